"""Pack, release and move invariants of the allocator (Hypothesis).

Random platforms (4-20 ways, 1-4 domains, ``min_cbm_bits``,
``shareable_bits``, sparse masks or not) and random sequences of operations:
requests added and removed (way counts, isolated or shared, some with
explicit masks), other tools' groups made and removed the way libvirt and
pqos make them.  The node is the emulator's kernel model
(:mod:`ovs_rdt.emulator.model`, written from ``fs/resctrl`` apart from the
allocator's own model): every plan's steps are written to it in order, and
the next operation plans from what it then holds.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from hypothesis import HealthCheck, example, given, settings, strategies as st

from ovs_rdt.core.allocator import Plan, plan, validate_mask
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.foreign import mirrors_default
from ovs_rdt.core.kernel import Kernel
from ovs_rdt.core.model import held
from ovs_rdt.core.model import MODE_EXCLUSIVE, MODE_SHAREABLE, ROOT, Group
from ovs_rdt.core.model import Platform, Request
from ovs_rdt.emulator.model import Caller, ResctrlModel
from ovs_rdt.emulator.monitor import Footprints
from ovs_rdt.emulator.profiles import PROFILES
from ovs_rdt.exceptions import AllocationError

# Few examples of long sequences cost less than many short ones; the
# default profile's 100 examples run in a few seconds.
PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
CALLER = Caller(pid=1)


class _NoTasks:
    """A host without threads: these writes move no task."""

    def threads(self) -> list[tuple[int, int]]:
        return []

    def info(self, tid: int) -> None:
        return None

    def tgid(self, tid: int) -> None:
        return None

    def uids(self, tid: int) -> None:
        return None

    def comm(self, tid: int) -> None:
        return None

    def now_ticks(self) -> int:
        return 0

    def last_pid(self) -> None:
        return None

    def resident(self, tid: int) -> None:
        return None


@st.composite
def platforms(draw: st.DrawFn) -> Platform:
    width = draw(st.integers(4, 20))
    domains = tuple(range(draw(st.integers(1, 4))))
    min_bits = draw(st.integers(1, 3))
    io = draw(st.sampled_from(['none', 'top', 'any']))
    shareable = 0
    if io == 'top':      # what Intel parts report: a run at the top
        count = draw(st.integers(1, 2))
        shareable = ((1 << count) - 1) << (width - count)
    elif io == 'any':
        low = draw(st.integers(0, width - 1))
        shareable = ((1 << draw(st.integers(1, width - low))) - 1) << low
    return Platform(width, draw(st.integers(3, 16)), domains,
                    min_cbm_bits=min_bits, shareable_bits=shareable,
                    sparse_masks=draw(st.booleans()))


def run_mask(width: int) -> st.SearchStrategy[CBM]:
    return st.integers(1, width).flatmap(lambda n: st.integers(0, width - n).map(
        lambda low: CBM.span(low, n, width)))


@st.composite
def operations(draw: st.DrawFn, platform: Platform,
               foreign: bool, explicit: bool) -> list[tuple]:
    kinds = ['add', 'add', 'add', 'remove', 'resize']
    if foreign:
        kinds += ['libvirt', 'libvirt', 'pqos', 'drop-foreign', 'shrink-root']
    ops = []
    for _ in range(draw(st.integers(1, 16))):
        kind = draw(st.sampled_from(kinds))
        doms = draw(st.lists(st.sampled_from(platform.domains), min_size=1,
                             unique=True))
        if kind in ('add', 'resize'):
            ways = draw(st.integers(1, max(1, platform.cbm_len // 3)))
            cbm = draw(run_mask(platform.cbm_len)) if explicit and \
                draw(st.integers(0, 4)) == 0 else None
            ops.append((kind, doms, ways, draw(st.booleans()), cbm))
        elif kind == 'libvirt':
            ops.append((kind, doms, draw(st.integers(1, 3)),
                        draw(st.booleans())))
        elif kind == 'pqos':
            ops.append((kind, draw(run_mask(platform.cbm_len))))
        elif kind == 'shrink-root':
            ops.append((kind, draw(st.integers(1, platform.cbm_len - 1))))
        else:
            ops.append((kind, draw(st.integers(0, 15))))
    return ops


class Node:
    """The emulated node, and the requests ovs-rdt holds on it."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        profile = dataclasses.replace(
            PROFILES['xeon-d-1540'], sockets=len(platform.domains),
            cbm_len=platform.cbm_len, l3_num_closids=platform.num_closids,
            min_cbm_bits=platform.min_cbm_bits,
            shareable_bits=platform.shareable_bits,
            sparse_masks=platform.sparse_masks, mba=False)
        self.model = ResctrlModel(profile, host=_NoTasks(),
                                  footprints=Footprints(default=0), clock=lambda: 0.0)
        self.requests: list[Request] = []
        self.serial = 0

    # -- the emulated kernel ------------------------------------------------
    def groups(self) -> list[Group]:
        width = self.platform.cbm_len
        return [Group(g.name, {d: CBM(v, width)
                               for d, v in self.model.ctrl['L3'][g.closid].items()},
                      mode=g.mode)
                for g in self.model.ctrl_groups()]

    def write(self, group: str, name: str, text: str) -> None:
        node = self.model.lookup(group + '/' + name if group else name)
        data = text.encode('latin-1')
        self.model.check_write(node, data)
        assert node.write is not None
        node.write(data, CALLER)

    def apply(self, step: tuple[str, str, str]) -> None:
        op, group, value = step
        if op == 'mkdir':
            self.model.mkdir(group, 0o755, CALLER)
        elif op == 'rmdir':
            self.model.rmdir(group)
        elif op == 'mode':
            self.write(group, 'mode', value + '\n')
        else:
            self.write(group, 'schemata', value)

    def try_foreign(self, name: str, masks: dict[int, CBM],
                    exclusive: bool = False) -> None:
        """Another tool's group, if the kernel takes it."""
        line = 'L3:' + ';'.join('%d=%x' % (d, m.value)
                                for d, m in sorted(masks.items())) + '\n'
        try:
            self.model.mkdir(name, 0o755, CALLER)
        except OSError:
            return
        try:
            self.write(name, 'schemata', line)
            if exclusive:
                self.write(name, 'mode', 'exclusive\n')
        except OSError:
            self.model.rmdir(name)

    # -- the operations -----------------------------------------------------
    def libvirt(self, doms: list[int], ways: int, exclusive: bool) -> None:
        """A ``<cachetune>`` guest: ways no group has on ``doms`` (libvirt's
        "unused"), the default group's mask copied on the other domains.
        """
        groups = self.groups()
        root = groups[0].l3
        masks = {}
        for dom in self.platform.domains:
            if dom not in doms:
                masks[dom] = root[dom]
                continue
            used = 0
            for grp in groups:
                used |= grp.l3[dom].value
            free = ~CBM(used, self.platform.cbm_len)
            runs = [CBM.span(low + length - ways, ways, free.width)
                    for low, length in free.runs() if length >= ways]
            if not runs:
                return
            masks[dom] = runs[0]
        self.serial += 1
        self.try_foreign('qemu-%d-guest-vcpus_0' % self.serial, masks,
                         exclusive and set(doms) == set(self.platform.domains))

    def pqos(self, mask: CBM) -> None:
        """A pqos class: one mask on every domain, over whatever is there."""
        self.serial += 1
        self.try_foreign('COS%d' % self.serial,
                         {d: mask for d in self.platform.domains})

    def shrink_root(self, ways: int) -> None:
        """The operator makes room for libvirt: the default group keeps
        its lowest ``ways`` (README, "How ways are laid out").
        """
        root = self.groups()[0].l3
        line = 'L3:' + ';'.join(
            '%d=%x' % (d, CBM.span(m.low, min(ways, m.count), m.width).value)
            for d, m in sorted(root.items())) + '\n'
        try:
            self.write('', 'schemata', line)
        except OSError:
            pass

    def drop_foreign(self, index: int) -> None:
        names = [g.name for g in self.groups() if not g.is_root and not g.owned]
        if names:
            self.model.rmdir(names[index % len(names)])

    def request(self, op: tuple) -> list[Request]:
        """The requests after ``op`` (add, remove, resize)."""
        reqs = list(self.requests)
        if op[0] == 'remove':
            if reqs:
                del reqs[op[1] % len(reqs)]
            return reqs
        _, doms, ways, exclusive, cbm = op
        if cbm is not None:
            new = Request('', cbm={d: cbm for d in doms}, exclusive=exclusive)
        else:
            new = Request('', ways={d: ways for d in doms}, exclusive=exclusive)
        if op[0] == 'resize' and reqs:
            idx = ways % len(reqs)
            new.name = reqs[idx].name
            reqs[idx] = new
        else:
            self.serial += 1
            new.name = 'ovsrdt-vm-%d' % self.serial
            reqs.append(new)
        return reqs

    def step(self, op: tuple, system_min_ways: int) -> Optional[Plan]:
        if op[0] == 'libvirt':
            self.libvirt(*op[1:])
        elif op[0] == 'pqos':
            self.pqos(*op[1:])
        elif op[0] == 'shrink-root':
            self.shrink_root(op[1])
        elif op[0] == 'drop-foreign':
            self.drop_foreign(op[1])
        else:
            return self.change(self.request(op), system_min_ways)
        return None

    def change(self, requests: list[Request],
               system_min_ways: int) -> Optional[Plan]:
        """Plan ``requests``, check the plan, write it: None if refused."""
        before = self.groups()
        try:
            result = plan(self.platform, before, requests, system_min_ways)
        except AllocationError:
            return None      # refused before any write: nothing changes
        check_layout(self.platform, before, requests, result, system_min_ways)
        check_kernel_model(self.platform, before, result)
        for step in result.steps:
            self.apply(step)
            check_half_way(self.platform, before, self.groups(), result,
                           requests)
        after = {g.name: g for g in self.groups()}
        assert set(after) == {g.name for g in before if not g.owned} | \
            {r.name for r in requests}
        for name, masks in result.l3.items():
            assert after[name].l3 == masks, (name, after[name], masks)
        for name, mode in result.modes.items():
            assert after[name].mode == mode, (name, after[name], mode)
        self.requests = requests
        return result

    def check_count(self, result: Plan, system_min_ways: int) -> None:
        """The free count is one a scheduler can trust: a request of that
        many isolated ways on one domain is placed (moving groups if it
        must).  Where ways cannot move (I/O's ways, other tools' groups,
        explicit masks) the count is an upper bound only
        (doc/architecture.md): asked without them.
        """
        groups = self.groups()
        if len(groups) >= self.platform.num_closids:
            return
        least = min(result.free.values())
        asks = [{dom: free} for dom, free in result.free.items()]
        if len(asks) > 1:       # and one on every domain at once
            asks.append({dom: least for dom in result.free})
        for ways in asks:
            if min(ways.values()) < max(1, self.platform.min_cbm_bits):
                continue
            probe = Request('ovsrdt-vm-probe', ways=ways)
            try:
                plan(self.platform, groups, self.requests + [probe],
                     system_min_ways)
            except AllocationError as exc:
                raise AssertionError((ways, groups, exc)) from None


def holds(req: Request, dom: int) -> bool:
    return bool(req.ways.get(dom)) or dom in req.cbm


def check_layout(platform: Platform, before: list[Group],
                 requests: list[Request], result: Plan,
                 system_min_ways: int) -> None:
    """The invariants of one plan."""
    root = result.l3[ROOT]
    foreign = [g for g in before if not g.is_root and not g.owned]
    for name, masks in result.l3.items():
        assert set(masks) == set(platform.domains), (name, masks)
        for dom, mask in masks.items():
            validate_mask(platform, mask, '%s on %d' % (name or '/', dom))
    for dom in platform.domains:
        # The default group keeps its floor.
        assert root[dom].count >= system_min_ways, (dom, root[dom])
        for req in requests:
            mask = result.l3[req.name][dom]
            if not holds(req, dom):
                # it follows the default group there
                assert mask == root[dom], (req, dom, mask)
                continue
            # A group that holds ways never shares one with the default
            # group (how the manager tells the two kinds apart).
            assert held(mask, root[dom]), (req, dom, mask, root[dom])
            if not req.exclusive:
                continue
            assert not mask.value & platform.shareable_bits, (req, dom, mask)
            for other in requests:
                if other is not req:
                    assert not mask.overlaps(result.l3[other.name][dom]), \
                        (req, other, dom, result.l3)
            for grp in foreign:
                if mask.overlaps(grp.l3[dom]):
                    # only a libvirt copy of the default group's mask, or
                    # ways it held before that the tool wrote over (kept:
                    # ovs-rdt.core.foreign.shares), and the group is not
                    # kernel-exclusive then
                    was = next((g.l3.get(dom) for g in before
                                if g.name == req.name), None)
                    kept = was is not None and held(was, before[0].l3[dom]) \
                        and not (mask & grp.l3[dom]) - was
                    assert kept or mirrors_default(grp, dom, before), \
                        (req, grp, dom)
                    assert result.modes[req.name] == MODE_SHAREABLE
    for req in requests:
        if result.modes[req.name] == MODE_EXCLUSIVE:
            assert req.exclusive and all(holds(req, d)
                                         for d in platform.domains)


def check_half_way(platform: Platform, before: list[Group],
                   now: list[Group], result: Plan,
                   requests: list[Request]) -> None:
    """After every single write, a group that holds ways before and after
    the plan still does not overlap the default group: what the manager
    reads back after a crash half-way (``existing_request``) is right.

    Not asked of a group moving to an explicit mask (``l3_cbm``): that is
    a configured pool's, whose request the manager reads from the
    configuration, not from the kernel; and it can be a mask the default
    group must leave for the very ways the group leaves, no way free, which
    no order of single writes reaches without an overlap.
    """
    root_before, root_now = before[0].l3, now[0].l3
    root_after = result.l3[ROOT]
    explicit = {r.name: r.cbm for r in requests}
    for grp in now:
        old = next((g for g in before if g.name == grp.name), None)
        if not grp.owned or old is None or grp.name not in result.l3:
            continue
        for dom, mask in grp.l3.items():
            if dom in explicit.get(grp.name, {}):
                continue
            if held(old.l3[dom], root_before[dom]) and \
                    held(result.l3[grp.name][dom], root_after[dom]):
                assert held(mask, root_now[dom]), (grp, dom, root_now[dom])


def check_kernel_model(platform: Platform, before: list[Group],
                       result: Plan) -> None:
    """The steps pass the allocator's own kernel model, one by one."""
    sim = Kernel(platform, {g.name: g for g in before})
    for step in result.steps:
        op, group, value = step
        if op == 'mkdir':
            assert sim.closids_left() > 0 and sim.mkdir_fits() is None
            sim.mkdir(group)
        elif op == 'rmdir':
            sim.rmdir(group)
        elif op == 'mode':
            assert sim.set_mode(group, value) is None, (group, value)
        else:
            masks = step.l3         # the step's own values, not its text
            assert masks and value.startswith('L3:')
            assert sim.write(group, masks) is None, (group, masks)


def release_all(node: Node, system_min_ways: int) -> None:
    """Every other tool's group gone and every request released: the
    default group has every way again.
    """
    for grp in node.groups():
        if not grp.is_root and not grp.owned:
            node.model.rmdir(grp.name)
    result = node.change([], system_min_ways)
    assert result is not None
    assert len(node.groups()) == 1
    assert all(m == CBM.full(node.platform.cbm_len)
               for m in node.groups()[0].l3.values())


@st.composite
def scenarios(draw: st.DrawFn, foreign: bool,
              explicit: bool) -> tuple[Platform, int, list[tuple]]:
    platform = draw(platforms())
    system_min_ways = draw(st.integers(0, min(3, platform.cbm_len - 1)))
    return platform, system_min_ways, draw(operations(platform, foreign,
                                                      explicit))


# Found by this property when every plan repacked (before groups stayed
# where they are): domain 0 did not settle, and the fallback kept every
# domain's groups in place.  Kept as an example of several domains.
UNSETTLED_NEIGHBOUR = (
    Platform(11, 10, (0, 1, 2), shareable_bits=0x400), 0,
    [('add', [0, 1, 2], 2, False, None), ('add', [0], 1, False, None),
     ('add', [0], 1, False, None), ('resize', [1], 1, False, None),
     ('add', [0, 1, 2], 2, True, None), ('add', [0], 1, False, None),
     ('add', [0, 1, 2], 3, True, None), ('remove', 0),
     ('add', [0], 1, False, None), ('add', [0], 1, False, None),
     ('add', [0], 1, False, None), ('add', [0], 1, False, None),
     ('add', [1], 1, True, None), ('add', [0], 1, False, None),
     ('add', [0], 1, False, None), ('remove', 0)])


@PROPERTY
@given(scenarios(foreign=False, explicit=False))
@example(UNSETTLED_NEIGHBOUR)
def test_counted_requests_pack_and_release(scenario) -> None:
    platform, system_min_ways, ops = scenario
    node = Node(platform)
    for op in ops:
        result = node.step(op, system_min_ways)
        if result is not None and not platform.shareable_bits:
            node.check_count(result, system_min_ways)
    release_all(node, system_min_ways)


# -- a running VM keeps its ways ---------------------------------------------
# A model of "fits where the groups are" apart from the allocator's: every
# position of the new run, and the default group's run left after it.

def _runs(value: int, width: int) -> list[int]:
    out = []
    low = 0
    while low < width:
        if value >> low & 1:
            high = low
            while high + 1 < width and value >> (high + 1) & 1:
                high += 1
            out.append(((1 << (high - low + 1)) - 1) << low)
            low = high + 1
        else:
            low += 1
    return out


def _lost(old: int, new: int) -> int:
    """The ways a mask loses that it had room to keep (0: it stayed, grew
    over its ways or shrank within them).
    """
    return min(bin(old).count('1'), bin(new).count('1')) - \
        bin(old & new).count('1')


def _root_keeps(spare: int, root: int, floor: int, width: int) -> bool:
    """The default group can keep its place in ``spare``: the run of it
    holding the most of ``root`` has ``floor`` ways, and the default group
    only shrinks within its ways or grows over them there.
    """
    runs = _runs(spare, width)
    if not runs:
        return floor == 0
    best = max(runs, key=lambda r: (bin(r & root).count('1'),
                                    bin(r).count('1')))
    return bin(best).count('1') >= floor and not _lost(root, best)


def _place(free: int, sizes: list[int], width: int, root: int,
           floor: int) -> bool:
    """Runs of ``sizes`` ways in ``free``, disjoint, leaving the default
    group its place (:func:`_root_keeps`): is there any?
    """
    if not sizes:
        return _root_keeps(free, root, floor, width)
    need, rest = sizes[0], sizes[1:]
    for low in range(width - need + 1):
        run = ((1 << need) - 1) << low
        if run & ~free == 0 and _place(free & ~run, rest, width, root,
                                       floor):
            return True
    return False


def _held_now(groups: list[Group], dom: int) -> dict[str, int]:
    root = groups[0].l3[dom]
    return {g.name: g.l3[dom].value for g in groups[1:]
            if g.owned and held(g.l3[dom], root)}


def fits_moving(platform: Platform, groups: list[Group], dom: int,
                ways: int, movers: tuple[str, ...], floor: int) -> bool:
    """A new run of ``ways`` fits on ``dom`` with only ``movers`` moving."""
    width = platform.cbm_len
    held_now = _held_now(groups, dom)
    free = (1 << width) - 1
    for name, mask in held_now.items():
        if name not in movers:
            free &= ~mask
    sizes = [ways] + [bin(held_now[n]).count('1') for n in movers]
    return _place(free, sizes, width, groups[0].l3[dom].value, floor)


@PROPERTY
@given(scenarios(foreign=False, explicit=False).filter(
    lambda s: not s[0].sparse_masks and not s[0].shareable_bits))
def test_a_live_group_moves_only_when_a_request_needs_it(scenario) -> None:
    """Across starts and stops, no live group's mask changes (nor the
    default group's place) unless a new group fits no other way; then the
    plan names each move, and moves two groups or more on a domain only
    when no single one would do.
    """
    platform, system_min_ways, ops = scenario
    floor = max(system_min_ways, platform.min_cbm_bits)
    node = Node(platform)
    for op in ops:
        if op[0] == 'resize':
            node.step(op, system_min_ways)
            continue
        before = node.groups()
        new = node.request(op)[-1] if op[0] == 'add' else None
        result = node.step(op, system_min_ways)
        if result is None:
            continue
        after = {g.name: g for g in node.groups()}
        named = {(m.group, m.domain) for m in result.moves}
        for dom in platform.domains:
            was = _held_now(before, dom)
            now = {n: after[n].l3[dom].value for n in was if n in after}
            changed = {n for n in now if now[n] != was[n]}
            if _lost(before[0].l3[dom].value, after[ROOT].l3[dom].value):
                changed.add(ROOT)
            assert changed == {n for n, d in named if d == dom}, \
                (op, dom, changed, result.moves)
            ways = new.ways.get(dom, 0) if new is not None else 0
            if not ways:
                assert not changed, (op, dom, changed)
                continue
            if fits_moving(platform, before, dom, ways, (), floor):
                assert not changed, (op, dom, changed)
            if len(changed) >= 2:       # the default group counts as one
                assert not any(
                    fits_moving(platform, before, dom, ways, (one,), floor)
                    for one in was), (op, dom, changed)


@PROPERTY
@given(scenarios(foreign=False, explicit=True))
def test_explicit_masks_beside_counted_requests(scenario) -> None:
    platform, system_min_ways, ops = scenario
    node = Node(platform)
    for op in ops:
        node.step(op, system_min_ways)
    release_all(node, system_min_ways)


# Found by this property when every plan repacked: a tool wrote its class
# over the way an isolated VM had (shared, so the VM keeps it), and
# re-laying the groups under the I/O way handed that way to a new VM.
RESTACKED_SHARED_WAY = (
    Platform(4, 4, (0, 1), shareable_bits=0x8), 0,
    [('add', [0], 1, True, None), ('pqos', CBM(0x1, 4)),
     ('add', [0], 1, True, None)])


@PROPERTY
@given(scenarios(foreign=True, explicit=False))
@example(RESTACKED_SHARED_WAY)
def test_beside_libvirt_and_pqos_groups(scenario) -> None:
    platform, system_min_ways, ops = scenario
    node = Node(platform)
    for op in ops:
        node.step(op, system_min_ways)
    release_all(node, system_min_ways)


# Found by this property when every plan repacked: with a way shared with
# I/O in the middle, the next plan moved four groups on no change at all.
# Kept as an example.
MIDDLE_IO_WAY = (
    Platform(14, 8, (0, 1), min_cbm_bits=1, shareable_bits=0x8), 0,
    [('remove', 0), ('add', [0], 1, False, None), ('add', [0], 1, False, None),
     ('add', [0], 1, False, None), ('add', [0], 2, False, None),
     ('add', [0], 2, True, None), ('add', [0], 3, True, None),
     ('add', [0], 3, False, None)])


@PROPERTY
@given(scenarios(foreign=False, explicit=False))
@example(MIDDLE_IO_WAY)
def test_a_settled_layout_needs_no_steps(scenario) -> None:
    """Planning the same requests again on what a plan left moves nothing."""
    platform, system_min_ways, ops = scenario
    node = Node(platform)
    for op in ops:
        if node.step(op, system_min_ways) is not None:
            again = plan(platform, node.groups(), node.requests,
                         system_min_ways)
            assert again.steps == [], again.steps


def _fewest(width: int, live: dict[str, int], sizes: dict[str, int],
            root: int, floor: int) -> tuple[int, int] | None:
    """Every placement of the groups (``sizes``: each group's ways, the
    live ones' masks in ``live``) as runs, and of the default group as a
    run of at least ``floor`` of what is left: the fewest (groups, ways)
    that move (a group loses ways it had room to keep; the default group
    counts as one).  None when nothing fits.
    """
    names = list(sizes)
    best: list[tuple[int, int]] = []

    def place(i: int, taken: int, cost: tuple[int, int]) -> None:
        if best and cost > best[0]:
            return
        if i == len(names):
            for run in _runs(((1 << width) - 1) & ~taken, width) or [0]:
                if bin(run).count('1') < floor:
                    continue
                gone = _lost(root, run)
                total = (cost[0] + bool(gone), cost[1] + gone)
                if not best or total < best[0]:
                    best[:] = [total]
            return
        need = sizes[names[i]]
        for low in range(width - need + 1):
            run = ((1 << need) - 1) << low
            if run & taken:
                continue
            gone = _lost(live[names[i]], run) if names[i] in live else 0
            place(i + 1, taken | run,
                  (cost[0] + bool(gone), cost[1] + gone))
    place(0, 0, (0, 0))
    return best[0] if best else None


@st.composite
def split_caches(draw: st.DrawFn) -> tuple[int, int, list[int], int, int]:
    """A small cache split by live groups: (width, floor, the groups'
    masks, the default group's mask, ways a new VM asks: at most the free
    count, often exactly).
    """
    width = draw(st.integers(5, 9))
    floor = draw(st.integers(0, 2))
    taken, masks = 0, []
    for _ in range(draw(st.integers(1, 4))):
        ways = draw(st.integers(1, 3))
        low = draw(st.integers(0, width - ways))
        run = ((1 << ways) - 1) << low
        if not run & taken:
            taken |= run
            masks.append(run)
    runs = [r for r in _runs(((1 << width) - 1) & ~taken, width)
            if bin(r).count('1') >= max(floor, 1)]
    root = draw(st.sampled_from(runs)) if runs else 0
    # (the default group keeps min_cbm_bits, 1, even with a floor of 0)
    free = width - bin(taken).count('1') - max(floor, 1)
    ways = draw(st.integers(1, max(1, free)))
    return width, floor, masks, root, ways


@PROPERTY
@given(split_caches())
def test_a_start_moves_the_fewest_groups_then_ways(case) -> None:
    """A VM start that fits is placed; when it fits with no group moved,
    or one, it moves no more groups, then ways, than the best of every
    placement (a brute force over small caches).  Where two or more must
    move the search is bounded, not exhaustive (doc/architecture.md: in
    20,000 such caches, 21 of the 135 that needed two or three moved
    more than the fewest).
    """
    width, floor, masks, root, ways = case
    if not root:
        return
    platform = Platform(width, 16, (0,))
    groups = [Group('', {0: CBM(root, width)})] + [
        Group('ovsrdt-vm-%d' % i, {0: CBM(m, width)}, mode='exclusive')
        for i, m in enumerate(masks)]
    reqs = [Request('ovsrdt-vm-%d' % i, ways={0: bin(m).count('1')})
            for i, m in enumerate(masks)]
    new = Request('ovsrdt-vm-new', ways={0: ways})
    sizes = {r.name: r.ways[0] for r in reqs + [new]}
    live = {'ovsrdt-vm-%d' % i: m for i, m in enumerate(masks)}
    best = _fewest(width, live, sizes, root, max(floor, 1))
    try:
        result = plan(platform, groups, reqs + [new], floor)
    except AllocationError:
        assert best is None, (case, best)
        return
    cost = [0, 0]
    for name, old in list(live.items()) + [(ROOT, root)]:
        gone = _lost(old, result.l3[name][0].value)
        cost[0] += bool(gone)
        cost[1] += gone
    assert best is not None, (case, result.moves)
    if best[0] <= 1:
        assert tuple(cost) <= best, (case, cost, best, result.moves)


def test_a_trade_with_the_default_group_never_overlaps_half_way() -> None:
    """I/O shares way 5 of 6; the default group has 0x3, two isolated VMs
    0x4 and 0x10, way 3 is free.  A request for the 3 ways the count
    offers fits only once a VM and the default group move (no single one
    would do): the VM moves into the default group's ways and the default
    group onto the I/O way.  After every single write, no group that
    holds ways overlaps the default group (what ``existing_request`` reads
    after a crash half-way).
    """
    platform = Platform(6, 16, (0,), shareable_bits=0x20)
    node = Node(platform)
    node.apply(('schemata', '', 'L3:0=3\n'))
    for name, mask in (('ovsrdt-vm-3', '4'), ('ovsrdt-vm-4', '10')):
        node.apply(('mkdir', name, ''))
        node.apply(('schemata', name, 'L3:0=%s\n' % mask))
        node.apply(('mode', name, 'exclusive'))
    node.requests = [Request('ovsrdt-vm-3', ways={0: 1}),
                     Request('ovsrdt-vm-4', ways={0: 1})]
    result = plan(platform, node.groups(), node.requests, 0)
    assert result.steps == [] and result.free == {0: 3}
    result = node.change(node.requests + [Request('ovsrdt-vm-5',
                                                  ways={0: 3})], 0)
    assert result is not None
    assert [(m.group, str(m.old), str(m.new)) for m in result.moves] == [
        ('ovsrdt-vm-3', '4', '1'), ('', '3', '20')]
    assert str(result.l3['ovsrdt-vm-5'][0]) == 'e'
