"""The order of the writes that reach a plan, each one kernel-safe (no I/O).

:func:`steps` turns the groups as they are and a target layout into
mkdir/rmdir/schemata/mode writes, and checks each against the kernel's
rules (:class:`ovs_rdt.core.kernel.Kernel`) before any is made:

1. Groups of ours whose L3 masks change, or that go away, drop to
   shareable: the kernel refuses any mask overlapping an exclusive one.
2. New groups are created (removals first only when CLOSIDs are short).
3. The default group first gives up the ways it loses, masks are written
   (groups giving ways up before the groups taking them:
   :func:`shrinking_first`), then it takes the ways it gains.  At every
   point a group that holds ways does not overlap the default group,
   which is how :func:`ovs_rdt.desired.existing_request` tells them from
   groups that follow it, even after a crash half-way.
4. Removals, then modes (exclusive last, when nothing overlaps).

Every step but a removal can be undone by writing back what was there
before, which the kernel accepts in reverse order.
"""
from __future__ import annotations

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.kernel import Kernel, is_valid
from ovs_rdt.core.model import MODE_EXCLUSIVE, MODE_SHAREABLE, ROOT, Group, held
from ovs_rdt.core.model import Platform
from ovs_rdt.exceptions import AllocationError, count
from ovs_rdt.core.plan import EVENT, MKDIR, MODE, RMDIR, Plan, Step
from ovs_rdt import GROUP_PREFIX


def split_masks(target: Plan, name: str
                ) -> tuple[dict[int, CBM], dict[int, CBM]] | None:
    """A group's own code and data masks on every domain of its target
    (``[pool:X] l3_code_cbm``/``l3_data_cbm``); None: both are its mask.
    Where it holds no ways both follow its mask (the default group's).
    """
    if name not in target.split:
        return None
    masks = target.l3.get(name, {})
    code, data = target.split[name]
    return ({d: code.get(d, m) for d, m in masks.items()},
            {d: data.get(d, m) for d, m in masks.items()})


class _Writes:
    """The steps so far, each checked on the kernel's model first."""

    def __init__(self, platform: Platform, current: dict[str, Group],
                 target: Plan | None = None) -> None:
        self.platform = platform
        self.sim = Kernel(platform, current)
        self.steps: list[Step] = []
        self.target = target

    def mode(self, name: str, value: str) -> None:
        self._check(Step(MODE, name, value), self.sim.set_mode(name, value))

    def write(self, name: str, masks: dict[int, CBM],
              mb: dict[int, int] | None = None) -> None:
        split = split_masks(self.target, name) if self.target else None
        step = Step.schemata(name, masks, mb, self.platform.cdp, split)
        self._check(step, self.sim.write(name, masks))

    def rmdir(self, name: str) -> None:
        self.sim.rmdir(name)
        self.steps.append(Step(RMDIR, name))

    def mkdir(self, name: str) -> None:
        """Create ``name``; our exclusive groups step aside if they must.

        The kernel needs a free CLOSID, and gives a new group the lowest
        run of what is not exclusive, refusing the mkdir when that run is
        too short.
        """
        if self.sim.closids_left() <= 0:
            raise _refused(Step(MKDIR, name),
                           'No space (all %d CLOSIDs have a group)'
                           % self.platform.num_closids)
        if self.sim.mkdir_fits() is not None:
            for other in [n for n in self.sim.modes
                          if n.startswith(GROUP_PREFIX)
                          and self.sim.modes[n] == MODE_EXCLUSIVE]:
                self.mode(other, MODE_SHAREABLE)
            domain = self.sim.mkdir_fits()
            if domain is not None:
                raise _refused(Step(MKDIR, name),
                               'No space on L3:%d (its initial mask would '
                               'have fewer than min_cbm_bits = %s)'
                               % (domain, count(self.platform.min_cbm_bits,
                                                'way')))
        self.sim.mkdir(name)
        self.steps.append(Step(MKDIR, name))

    def _check(self, step: Step, why: str | None) -> None:
        if why is not None:
            raise _refused(step, why)
        self.steps.append(step)


class Overlap(AllocationError):
    """No order of writes reaches the plan without a group of ours that
    holds ways before and after overlapping the default group for a moment
    (:func:`steps`).
    """


def _refused(step: Step, why: str) -> AllocationError:
    return AllocationError(
        'the kernel would refuse %s of %s (%s): %s; nothing was changed'
        % (step.op, step.group or 'the default group',
           step.value.strip().replace('\n', ' ') or '-', why))


def _changes(platform: Platform, current: dict[str, Group],
             target: Plan) -> tuple[set[str], dict[str, dict[int, int]]]:
    """Groups whose schemata change, and the MB values each one writes.

    A capped group keeps its MB line with its L3 line.  "No cap" is the
    platform's maximum: 100 percent, MBA_MAX_MBPS, AMD's maximum.
    """
    top = platform.mb_uncapped
    l3_changes = set()
    mb_lines = {}
    for name, masks in target.l3.items():
        grp = current.get(name)
        want = split_masks(target, name)
        if want is not None:
            differs = grp is None or (grp.l3code, grp.l3data) != want
        else:
            differs = grp is None or grp.l3 != masks or (
                platform.cdp and grp.cdp_split)
        if differs:
            l3_changes.add(name)
        new_mb = target.mb.get(name, {}) if name != ROOT else {}
        old_mb = grp.mb if grp is not None else {}
        if any(old_mb.get(d, top) != v for d, v in new_mb.items()):
            mb_lines[name] = dict(new_mb)
    for name in list(mb_lines):
        l3_changes.add(name)
    for name in l3_changes:
        new_mb = target.mb.get(name, {}) if name != ROOT else {}
        if any(v != top for v in new_mb.values()):
            mb_lines[name] = dict(new_mb)
    return l3_changes, mb_lines


def _unlock(out: _Writes, current: dict[str, Group], target: Plan,
            l3_changes: set[str]) -> None:
    """Step 1: groups that move, go or end shareable drop exclusive."""
    moving = [n for n in target.l3 if n in l3_changes and n != ROOT
              and n in current and current[n].l3 != target.l3[n]]
    # Also the ones that stay put but end shareable: the default group
    # may take over those very ways (a VM re-pinned off a domain).
    ending = [n for n, m in target.modes.items() if m != MODE_EXCLUSIVE]
    for name in dict.fromkeys(moving + target.remove + ending):
        if out.sim.modes.get(name) == MODE_EXCLUSIVE:
            out.mode(name, MODE_SHAREABLE)


def _root_shrinks(out: _Writes, current: dict[str, Group],
                  target: Plan) -> bool:
    """Step 3's start: the default group gives up the ways it loses.

    True when it gains ways too, to be written after the other groups.
    """
    root_new = target.l3.get(ROOT, {})
    root_old = current[ROOT].l3 if ROOT in current else {}
    gains = any(m.value & ~root_old.get(d, m).value
                for d, m in root_new.items())
    loses = any(root_old[d].value & ~m.value
                for d, m in root_new.items() if d in root_old)
    if not gains:
        out.write(ROOT, root_new)
        return False
    if loses:
        inter = {d: root_old[d] & m if d in root_old else m
                 for d, m in root_new.items()}
        if all(is_valid(out.platform, m) for m in inter.values()):
            out.write(ROOT, inter)
    return True


def _blocked(out: _Writes, target: Plan, name: str) -> bool:
    """Whether ``name`` takes ways the default group holds now."""
    root_now = out.sim.l3.get(ROOT, {})
    root_new = target.l3[ROOT]
    return any(held(m, root_new.get(d)) and m.value & root_now.get(d, 0)
               for d, m in target.l3[name].items())


def _kept(current: dict[str, Group], target: Plan, name: str) -> list[int]:
    """The domains where ``name`` holds ways before and after the plan.

    There it must never overlap the default group: how the manager tells
    it from a group following the default group, even after a crash.
    """
    grp = current.get(name)
    if grp is None or ROOT not in current:
        return []
    root_old, root_new = current[ROOT].l3, target.l3[ROOT]
    return [d for d, m in target.l3[name].items()
            if held(m, root_new.get(d)) and d in root_old
            and held(grp.l3.get(d), root_old[d])]


def _trade_places(out: _Writes, current: dict[str, Group], target: Plan,
                  pending: list[str], mb_lines: dict[str, dict[int, int]]
                  ) -> None:
    """Step 3 when the default group trades places with groups of ours.

    It keeps none of its ways, or too few for a valid mask (I/O ways,
    explicit masks or other tools' groups move its run), so it cannot
    shrink first, and a group moving into its ways would overlap it.  A
    group of ours that holds ways before and after (on a domain) goes:

    1. before the default group moves, when it leaves ways the default
       group takes and moves into none it holds;
    2. while the default group stands aside, when it does both: the
       default group first takes a run of its ways, or of ways nobody
       holds, that no such group moves into (:func:`_aside`);
    3. after the default group took its new mask, otherwise (also every
       group that holds no ways before or after: new ones, ones that
       follow the default group).

    So none of them overlaps the default group at any point.
    """
    root_new = target.l3[ROOT]
    root_now = out.sim.l3[ROOT]
    before: list[str] = []
    aside: list[str] = []
    after: list[str] = []
    for name in pending:
        grp = current.get(name)
        leaves = takes = False
        for d in _kept(current, target, name):
            assert grp is not None
            leaves = leaves or grp.l3[d].overlaps(root_new[d])
            takes = takes or bool(target.l3[name][d].value
                                  & root_now.get(d, 0))
        (aside if leaves and takes else before if leaves
         else after).append(name)
    for name in shrinking_first(before, out.sim, target):
        out.write(name, target.l3[name], mb_lines.get(name))
    if aside:
        _aside(out, current, target, aside)
        for name in shrinking_first(aside, out.sim, target):
            out.write(name, target.l3[name], mb_lines.get(name))
    out.write(ROOT, root_new)
    for name in shrinking_first(after, out.sim, target):
        out.write(name, target.l3[name], mb_lines.get(name))


def _aside(out: _Writes, current: dict[str, Group], target: Plan,
           aside: list[str]) -> None:
    """The default group stands aside for the ``aside`` groups.

    On each domain: the ways it keeps when the kernel takes that mask;
    else the largest run of its ways, or else of its ways and the ways
    nobody holds, that none of those groups moves into.  Groups of ours
    hold none of these ways now.
    """
    width = out.platform.cbm_len
    root_new = target.l3[ROOT]
    step = {}
    for d, now_value in out.sim.l3[ROOT].items():
        now = CBM(now_value, width)
        avoid = 0
        for name in aside:
            if d in _kept(current, target, name):
                avoid |= target.l3[name][d].value
        keep = now & root_new[d] if d in root_new else now
        if not now.value & avoid:
            step[d] = now
            continue
        if is_valid(out.platform, keep):
            step[d] = keep
            continue
        nobody = (1 << width) - 1
        for masks in out.sim.l3.values():
            nobody &= ~masks.get(d, 0)
        for ways in (now.value, now.value | nobody):
            run = CBM(ways & ~avoid, width).largest_run()
            if is_valid(out.platform, run):
                step[d] = run
                break
        else:
            raise Overlap('the default group (%s on domain %d) has no way '
                          'to stand aside on for the groups moving into its '
                          'ways (%s)' % (now, d, CBM(avoid, width)))
    if any(CBM(v, width) != step[d] for d, v in out.sim.l3[ROOT].items()):
        out.write(ROOT, step)


def shrinking_first(pending: list[str], sim: Kernel,
                    target: Plan) -> list[str]:
    """``pending`` ordered so that no write takes ways another pending
    group still holds (a group giving ways up is written before the one
    taking them: two pools trading ways never overlap, even for a moment).
    Where no such order exists, the planned order.
    """
    root = sim.l3.get(ROOT, {})
    # Who would take ways from whom, once: nothing is written meanwhile,
    # and the order is picked n times over n groups (the hook plans at
    # every VM start; 13 groups made 4000 mask comparisons of this).
    blocks: dict[str, set[str]] = {}
    for name in pending:
        wanted = target.l3[name].items()
        blocks[name] = set()
        for other in pending:
            if other == name:
                continue
            other_now = sim.l3.get(other, {})
            for dom, mask in wanted:
                if not other_now.get(dom, 0) & mask.value:
                    continue            # (no overlap: no mask objects)
                now = CBM(other_now[dom], mask.width)
                root_now = root.get(dom)
                root_mask = None if root_now is None else \
                    CBM(root_now, mask.width)
                if now.overlaps(mask) and held(now, root_mask):
                    blocks[name].add(other)
                    break
    left = list(pending)
    out = []
    while left:
        pick = next((n for n in left if blocks[n].isdisjoint(left)), left[0])
        left.remove(pick)
        out.append(pick)
    return out


def steps(platform: Platform, current: dict[str, Group],
          target: Plan) -> list[Step]:
    """The writes from ``current`` to ``target``, in a kernel-safe order.

    Raises AllocationError when the kernel's model refuses one of them,
    :class:`Overlap` when a group of ours that holds ways before and after
    would overlap the default group for a moment.
    """
    out = _Writes(platform, current, target)
    l3_changes, mb_lines = _changes(platform, current, target)
    _unlock(out, current, target, l3_changes)
    # Removals first only when the new groups need their CLOSIDs.
    removed_early = out.sim.closids_left() < len(target.create)
    if removed_early:
        for name in target.remove:
            out.rmdir(name)
    for name in target.create:
        out.mkdir(name)
    root_last = ROOT in l3_changes and _root_shrinks(out, current, target)
    pending = [n for n in target.l3
               if n != ROOT and (n in l3_changes or n in mb_lines)]
    if root_last and any(_blocked(out, target, n) for n in pending):
        _trade_places(out, current, target, pending, mb_lines)
    else:
        for name in shrinking_first(pending, out.sim, target):
            out.write(name, target.l3[name], mb_lines.get(name))
        if root_last:
            out.write(ROOT, target.l3.get(ROOT, {}))
    if not removed_early:
        for name in target.remove:
            out.rmdir(name)
    for name, want in target.modes.items():
        if out.sim.modes.get(name) != want:
            out.mode(name, want)
    for name, event in target.events.items():
        # The kernel checks the name only: any order is safe.
        if name not in current or current[name].mb_event != event:
            out.steps.append(Step(EVENT, name, event))
    return out.steps
