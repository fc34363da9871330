"""The cache-way allocator: pure logic, no I/O.

Given what the platform offers, every resctrl group as it is now and the
complete set of groups ovs-rdt should own, :func:`plan` computes the mask of
every one of our groups and of the default (root) group on every L3 cache
domain, and the ordered, kernel-safe writes that get there.

Layout rules, per cache domain (domains are independent):

* Fixed: masks of foreign groups (not ``ovsrdt-``), explicit ``l3_cbm``
  masks and an explicit system mask.  They are never moved; ways they use
  are never given to a counted request.
* Counted requests (``ways``) are packed from the highest way down, in a
  stable order (where they are now, highest first; new ones last), each at
  the top of the smallest free run that fits (so the default group keeps
  the largest run).  Recomputing this canonical
  layout on every change is the repacking: when a group goes, the ones
  below it move up, so the free ways stay one contiguous run at the bottom
  and a count of free ways is something a scheduler can trust.  Where
  fixed masks split the free ways, the packing is repeated until it
  settles, else the groups stay where they are (see :func:`plan`).
* Isolated requests never get the ways in ``info/L3/shareable_bits`` or,
  while io_alloc is enabled, ``io_alloc_cbm``: the hardware (I/O) fills
  them too and the kernel refuses an exclusive group there.  Shared
  requests and the default group may use them; the default group's floor
  (``system_min_ways``) counts only ways outside ``io_alloc_cbm``.
* The default group gets the largest contiguous run of the ways no group
  of ours gets and no foreign group holds; while foreign groups exist,
  only of the ways it has now or our groups have now, and at least
  ``system_min_ways`` ways (taking only that many from the ways nobody
  holds when it has fewer).  So it never grows over another tool's ways,
  and ways another tool took out of it, or freed, stay free for that tool
  while it has groups (libvirt counts as free only what neither the
  default group nor any group has).  A foreign group holds no ways on a
  domain where its mask overlaps the default group's while it holds
  ways elsewhere: :func:`mirrors_default`.
* A group that holds no ways on a domain (its tasks never run there) gets
  the default group's mask there; such a group cannot be kernel-exclusive.

The writes are checked step by step against the kernel's rules
(:class:`_Kernel`) before any is made; see :func:`_steps` for the order.
"""
from __future__ import annotations

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import UNIT_PERCENT, MBInfo, Platform, Request
from ovs_rdt.core.model import MODE_EXCLUSIVE, MODE_SHAREABLE, ROOT, Group
from ovs_rdt.core import ways as capacity
from ovs_rdt.exceptions import AllocationError, InsufficientWays, InvalidMask
from ovs_rdt.exceptions import OutOfClosids
from ovs_rdt import GROUP_PREFIX


class Step(tuple):
    """One write: ``(op, group, value)``; op is mkdir/rmdir/schemata/mode."""

    __slots__ = ()

    def __new__(cls, op: str, group: str, value: str = '') -> 'Step':
        return tuple.__new__(cls, (op, group, value))

    @property
    def op(self) -> str:
        return self[0]

    @property
    def group(self) -> str:
        return self[1]

    @property
    def value(self) -> str:
        return self[2]


class Plan:
    """The target state and the steps that reach it."""

    def __init__(self) -> None:
        #: group -> domain -> mask, for the root and every group we own.
        self.l3: dict[str, dict[int, CBM]] = {}
        #: group -> domain -> percent, for groups with an MB cap.
        self.mb: dict[str, dict[int, int]] = {}
        self.modes: dict[str, str] = {}
        self.create: list[str] = []
        self.remove: list[str] = []
        self.steps: list[Step] = []
        #: domain -> ways a new counted request could still get.
        self.free: dict[int, int] = {}

    def masks_of(self, group: str) -> dict[int, CBM]:
        return self.l3.get(group, {})


def _lowest_run(value: int) -> int:
    """Length of the lowest run of set bits (0 for an empty mask)."""
    if not value:
        return 0
    shifted = value // (value & -value)
    return ((shifted ^ (shifted + 1)) >> 1).bit_length()


def validate_mask(platform: Platform, mask: CBM, field: str) -> None:
    """Raise InvalidMask unless the kernel would accept ``mask``.

    Like ``cbm_validate()``: the minimum is checked on the lowest run of
    ones, which for a sparse mask is less than its way count.
    """
    if mask.width != platform.cbm_len:
        raise InvalidMask('%s %s is not a %d-bit capacity bitmask'
                          % (field, mask, platform.cbm_len))
    if not platform.sparse_masks and not mask.is_contiguous():
        raise InvalidMask('%s %s is not contiguous (this platform does not '
                          'support sparse masks)' % (field, mask))
    if _lowest_run(mask.value) < platform.min_cbm_bits:
        if mask.is_contiguous():
            raise InvalidMask('%s %s has %d ways, fewer than the platform '
                              'minimum %d' % (field, mask, mask.count,
                                              platform.min_cbm_bits))
        raise InvalidMask('%s %s starts with a run of %d ways, fewer than the '
                          'platform minimum %d (the kernel checks the lowest '
                          'run of a sparse mask)'
                          % (field, mask, _lowest_run(mask.value),
                             platform.min_cbm_bits))


def _valid(platform: Platform, mask: CBM) -> bool:
    try:
        validate_mask(platform, mask, 'mask')
    except InvalidMask:
        return False
    return True


def best_fit(free: CBM, ways: int, sparse: bool,
             min_bits: int = 1, shared: int = 0) -> CBM | None:
    """``ways`` contiguous ways from ``free``: the top of the smallest run
    that holds them (the highest such run on a tie), which keeps the largest
    run whole for the default group; highest bits when only sparse fits
    (and only if the lowest run of those is at least ``min_bits`` long).

    ``shared``: ways the default group may use but this request may not
    (``shareable_bits``).  When they sit just above the chosen run, the
    request takes the run's bottom instead, so that the default group's
    run reaches into them rather than stranding them.
    """
    if ways <= 0:
        return CBM.empty(free.width)
    runs = [(length, -low, low) for low, length in free.runs()
            if length >= ways]
    if runs:
        length, _, low = min(runs)
        if shared >> (low + length) & 1:
            return CBM.span(low, ways, free.width)
        return CBM.span(low + length - ways, ways, free.width)
    if sparse and free.count >= ways:
        value = 0
        for bit in sorted(free.bits(), reverse=True)[:ways]:
            value |= 1 << bit
        if _lowest_run(value) >= min_bits:
            return CBM(value, free.width)
    return None


def _sparse_spare(spare: CBM, min_bits: int) -> CBM:
    """``spare`` without the low runs shorter than ``min_bits``.

    A sparse mask is only valid when its lowest run is long enough.
    """
    value = spare.value
    for low, length in spare.runs():
        if length >= min_bits:
            break
        value &= ~(((1 << length) - 1) << low)
    return CBM(value, spare.width)


def _held(mask: CBM | None, root: CBM | None) -> bool:
    """Whether a group of ours holds ``mask`` as its own ways.

    A group that holds no ways on a domain has the default group's mask
    there; every mask that holds ways is disjoint from it.
    """
    if not mask:
        return False
    return root is None or not mask.overlaps(root)


def mirrors_default(group: Group, domain: int, groups: list[Group]) -> bool:
    """Whether a foreign group only copies the default group on ``domain``.

    libvirt takes a ``<cachetune>``'s ways from those no group holds, not
    the default group's (``virResctrlAllocGetUnused``), and writes the
    default group's mask for the domains the ``<cachetune>`` does not name
    (``virResctrlAllocCopyMasks``).  So a group that holds ways (a mask
    disjoint from the default group's) on some domain and overlaps the
    default group on ``domain`` holds nothing there.  A group that
    overlaps the default group everywhere (``pqos`` classes on a host
    whose default group was never shrunk) holds its whole mask.
    """
    root = next((g for g in groups if g.is_root), None)
    if root is None:
        return False
    mask = group.l3.get(domain)
    if mask is None or _held(mask, root.l3.get(domain)):
        return False
    return any(_held(m, root.l3.get(d)) for d, m in group.l3.items()
               if d != domain)


def _order(requests: list[Request], positions: dict[str, dict[int, CBM]],
           domain: int) -> list[Request]:
    """Stable packing order: existing groups by position, new ones last.

    A group that follows the default group on ``domain`` has no position
    there yet: it is placed like a new one, so nothing else moves for it.
    """
    existing = []
    new = []
    root = positions.get(ROOT, {}).get(domain)
    for idx, req in enumerate(requests):
        mask = positions.get(req.name, {}).get(domain)
        if mask is not None and _held(mask, root):
            existing.append((-mask.high, idx, req))
        else:
            new.append(req)
    existing.sort(key=lambda item: (item[0], item[1]))
    return [item[2] for item in existing] + new


#: How many times a layout is re-packed from itself to settle.
_SETTLE_ROUNDS = 4

#: Modes whose ways no other group may share (the kernel refuses overlaps).
_UNSHAREABLE = (MODE_EXCLUSIVE, 'pseudo-locked')


def _layout_domain(platform: Platform, domain: int, groups: list[Group],
                   requests: list[Request], system_min_ways: int,
                   system_cbm: CBM | None, plan: Plan,
                   positions: dict[str, dict[int, CBM]],
                   keep: bool = False) -> None:
    width = platform.cbm_len
    empty = CBM.empty(width)
    wanted = {r.name for r in requests}
    # Ways the hardware also fills (I/O): the kernel refuses them to an
    # exclusive group, and an isolated allocation is not isolated there.
    hw_shared = CBM(platform.hw_shared(domain) & ((1 << width) - 1), width)
    # Ways reserved for I/O (io_alloc): never part of the system's floor.
    io_ways = platform.io_ways(domain)
    hw_source = platform.hw_shared_source(domain)
    foreign = [g for g in groups if not g.is_root and not g.owned]
    root_now = next((g.l3.get(domain) for g in groups if g.is_root), None)
    fixed = empty
    foreign_exclusive = empty
    # Ways a foreign group shares with the default group on a domain
    # where it holds none (see mirrors_default) are the default group's.
    for grp in foreign:
        mask = grp.l3.get(domain)
        if mask is None:
            continue
        if grp.mode in _UNSHAREABLE:
            foreign_exclusive |= mask
        elif mirrors_default(grp, domain, groups):
            continue
        fixed |= mask
    # Beside another tool's groups, the default group may have only the
    # ways it has now and those our groups hold now: ways nobody holds
    # (the other tool took them out of the default group, or freed them)
    # stay free for that tool too.  Without one, it takes every spare way.
    root_may = CBM.full(width)
    if foreign and root_now is not None:
        root_may = root_now
        for grp in groups:
            mask = grp.l3.get(domain)
            if grp.owned and mask is not None and _held(mask, root_now):
                root_may |= mask
    ours = empty
    ours_exclusive = empty
    # Explicit masks first: they are where the operator put them.
    for req in requests:
        mask = req.cbm.get(domain)
        if mask is None:
            continue
        field = '%s l3_cbm on domain %d' % (req.name, domain)
        validate_mask(platform, mask, field)
        if req.exclusive and mask.overlaps(fixed | ours):
            raise InvalidMask('%s %s overlaps ways already in use (%s)'
                              % (field, mask, fixed | ours))
        if mask.overlaps(foreign_exclusive):
            raise InvalidMask('%s %s overlaps an exclusive group of another '
                              'tool (%s)' % (field, mask, foreign_exclusive))
        if req.exclusive and mask.overlaps(hw_shared):
            raise InvalidMask('%s %s is isolated but overlaps the ways the '
                              'hardware shares with I/O (%s)'
                              % (field, mask, hw_source))
        if not req.exclusive and mask.overlaps(ours_exclusive):
            raise InvalidMask('%s %s overlaps the ways of an isolated pool '
                              '(%s)' % (field, mask, ours_exclusive))
        plan.l3.setdefault(req.name, {})[domain] = mask
        ours |= mask
        if req.exclusive:
            ours_exclusive |= mask
    reserve = max(system_min_ways, platform.min_cbm_bits)
    if system_cbm is not None:
        validate_mask(platform, system_cbm,
                      '[allocation] system_l3_cbm on domain %d' % domain)
        if system_cbm.overlaps(ours | foreign_exclusive):
            raise InvalidMask('[allocation] system_l3_cbm %s on domain %d '
                              'overlaps ways held by pools or exclusive '
                              'groups' % (system_cbm, domain))
        reserve = 0
    system = system_cbm or empty
    taken = fixed | ours | system
    counted = [r for r in requests if r.ways.get(domain)]
    for req in _order(counted, positions, domain):
        ways = req.ways[domain]
        if ways < platform.min_cbm_bits:
            raise InvalidMask('%s asks for %d ways on domain %d, fewer than '
                              'the platform minimum %d'
                              % (req.name, ways, domain, platform.min_cbm_bits))
        allowed = ~taken - hw_shared if req.exclusive else ~taken
        free = max(0, min(allowed.count, (~taken - io_ways).count - reserve
                          + (allowed & io_ways).count))
        mask = best_fit(allowed, ways, platform.sparse_masks,
                        platform.min_cbm_bits,
                        hw_shared.value if req.exclusive else 0) \
            if free >= ways else None
        if keep and free >= ways:
            now = positions.get(req.name, {}).get(domain)
            root_now = positions.get(ROOT, {}).get(domain)
            if now is not None and _held(now, root_now) and \
                    now.count == ways and now.value & ~allowed.value == 0:
                mask = now
        if mask is None:
            io = (~taken & hw_shared).count if req.exclusive else 0
            raise InsufficientWays(
                '%s needs %d %sways on cache domain %d, but only %d of %d are '
                'free (%d held by other groups, %d kept for the system%s)'
                % (req.name, ways, 'contiguous ' if free >= ways else '',
                   domain, free, width, (taken - system).count,
                   system.count if system_cbm is not None else reserve,
                   ', %d shared with I/O (%s)'
                   % (io, hw_source) if io else ''))
        plan.l3.setdefault(req.name, {})[domain] = mask
        taken |= mask
        ours |= mask
    # The default group.
    if system_cbm is not None:
        root_mask = system_cbm
    else:
        def fit(spare: CBM) -> CBM:
            return (_sparse_spare(spare, platform.min_cbm_bits)
                    if platform.sparse_masks else spare.largest_run())
        spare = ~(ours | fixed)
        root_mask = fit(spare & root_may)
        if (root_mask - io_ways).count < reserve:
            # Only as many more as the minimum needs (not I/O's ways).
            root_mask = best_fit(spare - io_ways, reserve,
                                 platform.sparse_masks,
                                 platform.min_cbm_bits) or fit(spare)
        if (root_mask - io_ways).count < reserve:
            raise InsufficientWays(
                'the default group would keep %d contiguous ways%s on cache '
                'domain %d, fewer than %s'
                % ((root_mask - io_ways).count,
                   ' outside the ways reserved for I/O (io_alloc_cbm %s)'
                   % io_ways if io_ways else '', domain,
                   '[allocation] system_min_ways = %d' % system_min_ways
                   if system_min_ways >= platform.min_cbm_bits else
                   'the platform minimum %d (info/L3/min_cbm_bits)'
                   % platform.min_cbm_bits))
    plan.l3.setdefault(ROOT, {})[domain] = root_mask
    plan.free[domain] = max(0, min((~taken - hw_shared).count,
                                   capacity.free_ways(
                                       (~taken - io_ways).count, reserve,
                                       0)))
    # Groups of ours that hold nothing here follow the default group.
    for name in wanted:
        plan.l3.setdefault(name, {}).setdefault(domain, root_mask)


def _schemata_line(masks: dict[int, CBM], cdp: bool = False) -> str:
    """The L3 line; under CDP an ``L3CODE`` and an ``L3DATA`` line with
    the same masks (code and data share the group's ways).
    """
    items = ';'.join('%d=%s' % (d, masks[d]) for d in sorted(masks))
    if cdp:
        return 'L3CODE:%s\nL3DATA:%s' % (items, items)
    return 'L3:' + items


def _mb_line(values: dict[int, int]) -> str:
    return 'MB:' + ';'.join('%d=%d' % (d, values[d]) for d in sorted(values))


def _check_mb(mba: MBInfo, req: Request) -> None:
    """The allocator's own check of a request's MB cap against the unit.

    Operators' values are refused earlier, naming their field
    (:func:`ovs_rdt.inputs.request.check_host`, the configuration); this
    guards every other path (a group kept as it is, the policy).
    """
    percents = sorted(set(req.mb.values()) | (
        {req.mb_percent} if req.mb_percent is not None else set()))
    if mba.unit != UNIT_PERCENT:
        if percents:
            raise AllocationError(
                '%s asks for mb_percent %d, but %s: give mb_mbps'
                % (req.name, percents[0], mba.kind))
        if req.mb_mbps is not None and req.mb_mbps < 1:
            raise AllocationError('%s asks for mb_mbps %d, below 1'
                                  % (req.name, req.mb_mbps))
        return
    if req.mb_mbps is not None:
        raise AllocationError(
            '%s asks for mb_mbps %d, but %s: give mb_percent'
            % (req.name, req.mb_mbps, mba.kind))
    for pct in percents:
        if not mba.min_bandwidth <= pct <= 100:
            raise AllocationError(
                '%s asks for mb_percent %d, outside the %d-100 this platform '
                'accepts (info/MB/min_bandwidth)'
                % (req.name, pct, mba.min_bandwidth))


def _mb_values(mba: MBInfo, req: Request) -> dict[int, int]:
    """The ``MB:`` value per domain: the cap, or the platform's maximum."""
    if mba.unit == UNIT_PERCENT:
        return {d: mba.value(percent=req.mb_on(d)) for d in mba.domains}
    return {d: mba.value(mbps=req.mb_mbps) for d in mba.domains}


def plan(platform: Platform, groups: list[Group], requests: list[Request],
         system_min_ways: int = 1,
         system_cbm: dict[int, CBM] | None = None) -> Plan:
    """Compute the target layout for ``requests`` (every group we own).

    Groups we own that are not in ``requests`` are removed.  Raises
    InsufficientWays, OutOfClosids, InvalidMask or AllocationError,
    changing nothing.
    """
    names = [r.name for r in requests]
    if len(set(names)) != len(names):
        raise InvalidMask('duplicate group in requests: %s' % ', '.join(
            sorted({n for n in names if names.count(n) > 1})))
    current = {g.name: g for g in groups}
    result = Plan()
    result.remove = [g.name for g in groups
                     if g.owned and g.name not in set(names)]
    result.create = [n for n in names if n not in current]
    in_use = len(groups) - len(result.remove) + len(result.create)
    if not capacity.closids_fit(platform.num_closids, in_use):
        raise OutOfClosids(
            'out of CLOSIDs: %s needs %d groups but the platform has %d '
            'CLOSIDs (%d groups exist)'
            % (', '.join(result.create) or 'the plan', in_use,
               platform.num_closids, len(groups)))
    mba = platform.mb
    for req in requests:
        unknown = req.domains - set(platform.domains)
        if unknown:
            raise InvalidMask('%s names cache domains %s that this platform '
                              'does not have (it has %s)'
                              % (req.name, sorted(unknown),
                                 list(platform.domains)))
        if mba is not None:
            _check_mb(mba, req)
    # Packing follows the groups' positions, and the new ones go last;
    # once placed, a new group has a position of its own, which can change
    # the order the next time (when foreign groups or explicit masks split
    # the free ways).  So the packing is repeated from its own result until
    # nothing moves: that layout is the one the next operation leaves as it
    # is.  Where it does not settle, or does not fit, the groups of ours
    # stay where they are and only new or resized ones are placed: a
    # layout an earlier operation made always fits again, and nothing moves
    # on later, unrelated changes.
    start = {g.name: g.l3 for g in groups}

    def attempt(positions: dict[str, dict[int, CBM]], keep: bool) -> Plan:
        trial = Plan()
        for domain in platform.domains:
            _layout_domain(platform, domain, groups, requests,
                           system_min_ways, (system_cbm or {}).get(domain),
                           trial, positions, keep)
        return trial

    layout = first = None
    error: AllocationError | None = None
    positions = start
    for _ in range(_SETTLE_ROUNDS):
        try:
            trial = attempt(positions, False)
        except AllocationError as exc:
            error = error or exc
            break
        first = first or trial
        if all(positions.get(n) == m for n, m in trial.l3.items()):
            layout = trial
            break
        positions = dict(positions, **trial.l3)
    if layout is None:
        try:
            layout = attempt(start, True)
        except AllocationError:
            if first is None:
                raise error or AllocationError('no layout') from None
            layout = first
    result.l3, result.free = layout.l3, layout.free
    all_domains = frozenset(platform.domains)
    for req in requests:
        holds = frozenset(d for d, n in req.ways.items() if n) | \
            frozenset(req.cbm)
        # The kernel refuses exclusive mode to a group overlapping any
        # other: where a foreign group's copy of the default group's mask
        # overlaps, the group stays shareable (still apart from every group
        # of ours and the default group).
        overlaps = any(m.overlaps(g.l3.get(d, m.empty(m.width)))
                       for d, m in result.l3.get(req.name, {}).items()
                       for g in groups if not g.is_root and not g.owned)
        result.modes[req.name] = (MODE_EXCLUSIVE if req.exclusive and
                                  holds == all_domains and not overlaps
                                  else MODE_SHAREABLE)
        if mba is not None:
            result.mb[req.name] = _mb_values(mba, req)
    result.steps = _steps(platform, current, result)
    return result


class _Kernel:
    """The rules resctrl applies to each write, on a copy of the state.

    ``fs/resctrl``: a schemata write may not overlap an exclusive group
    (nor anything at all while its own group is exclusive: other groups
    and info/L3/shareable_bits); ``mode`` becomes exclusive only when the
    group overlaps nothing; ``mkdir`` gives the new group the lowest run
    of the ways that are unused or shareable and fails with "No space"
    when that run is shorter than min_cbm_bits.  :func:`_steps` checks
    its sequence here, so a plan the kernel would refuse half-way is
    refused before anything is written.
    """

    def __init__(self, platform: Platform, current: dict[str, Group]) -> None:
        self.platform = platform
        self.l3 = {n: {d: m.value for d, m in g.l3.items()}
                   for n, g in current.items()}
        self.modes = {n: g.mode for n, g in current.items()}

    def overlap(self, name: str, domain: int, value: int,
                exclusive_only: bool) -> str | None:
        """What ``value`` on ``domain`` would collide with, or None."""
        if not exclusive_only and value & self.platform.hw_shared(domain):
            return self.platform.hw_shared_source(domain)
        for other, masks in self.l3.items():
            mode = self.modes[other]
            if other == name or mode == 'pseudo-locksetup':
                continue
            if value & masks.get(domain, 0) and (
                    not exclusive_only or mode in _UNSHAREABLE):
                return 'group %s (%s, %x)' % (other or '/', mode,
                                              masks.get(domain, 0))
        return None

    def write(self, name: str, masks: dict[int, CBM]) -> str | None:
        exclusive = self.modes.get(name) in _UNSHAREABLE
        for domain, mask in sorted(masks.items()):
            hit = self.overlap(name, domain, mask.value, not exclusive)
            if hit is not None:
                return ('L3 %s on domain %d would overlap %s'
                        % (mask, domain, hit))
        self.l3[name].update({d: m.value for d, m in masks.items()})
        return None

    def set_mode(self, name: str, mode: str) -> str | None:
        if mode == MODE_EXCLUSIVE:
            for domain, value in sorted(self.l3[name].items()):
                hit = self.overlap(name, domain, value, False)
                if hit is not None:
                    return ('its L3 %x on domain %d overlaps %s'
                            % (value, domain, hit))
        self.modes[name] = mode
        return None

    def mkdir_fits(self) -> int | None:
        """The first domain where a new group would get "No space"."""
        plat = self.platform
        full = (1 << plat.cbm_len) - 1
        for domain in plat.domains:
            # io_alloc's CLOSID is no group's and not shareable: a new
            # group starts off its ways.
            used = plat.hw_shared(domain)
            new = plat.shareable_bits
            for other, masks in self.l3.items():
                mode = self.modes[other]
                if mode == 'pseudo-locksetup':
                    continue
                used |= masks.get(domain, 0)
                if mode == MODE_SHAREABLE:
                    new |= masks.get(domain, 0)
            new |= ~used & full
            if _lowest_run(new) < plat.min_cbm_bits:
                return domain
        return None

    def mkdir(self, name: str) -> None:
        self.l3[name] = {}
        self.modes[name] = MODE_SHAREABLE

    def rmdir(self, name: str) -> None:
        del self.l3[name]
        del self.modes[name]


def _shrinking_first(pending: list[str], sim: _Kernel,
                     target: Plan) -> list[str]:
    """``pending`` ordered so that no write takes ways another pending
    group still holds (a group giving ways up is written before the one
    taking them: two pools trading ways never overlap, even for a moment).
    Where no such order exists, the planned order.
    """
    root = sim.l3.get(ROOT, {})
    left = list(pending)
    out = []

    def takes(name: str) -> bool:
        for other in left:
            if other == name:
                continue
            for dom, mask in target.l3[name].items():
                held = sim.l3.get(other, {}).get(dom, 0)
                if held & mask.value and not held & root.get(dom, 0):
                    return True
        return False

    while left:
        pick = next((n for n in left if not takes(n)), left[0])
        left.remove(pick)
        out.append(pick)
    return out


def _steps(platform: Platform, current: dict[str, Group],
           target: Plan) -> list[Step]:
    """Kernel-safe order, checked against the kernel's rules.

    1. Groups of ours whose L3 masks change, or that go away, drop to
       shareable: the kernel refuses any mask overlapping an exclusive one.
    2. New groups are created (removals first only when CLOSIDs are short).
    3. The default group first gives up the ways it loses, masks are
       written, then it takes the ways it gains.  At every point a group
       that holds ways does not overlap the default group, which is how
       :meth:`CacheManager.existing_request` tells them from groups that
       follow it, even after a crash half-way.
    4. Removals, then modes (exclusive last, when nothing overlaps).

    Every step but a removal can be undone by writing back what was there
    before, which the kernel accepts in reverse order.
    """
    sim = _Kernel(platform, current)
    steps: list[Step] = []

    def refuse(step: Step, why: str) -> AllocationError:
        return AllocationError(
            'the kernel would refuse %s of %s (%s): %s; nothing was changed'
            % (step.op, step.group or 'the default group',
               step.value.strip().replace('\n', ' ') or '-', why))

    def mode(name: str, value: str) -> None:
        step = Step('mode', name, value)
        why = sim.set_mode(name, value)
        if why is not None:
            raise refuse(step, why)
        steps.append(step)

    def write(name: str, masks: dict[int, CBM], mb: str = '') -> None:
        step = Step('schemata', name,
                    _schemata_line(masks, platform.cdp) + '\n' + mb)
        why = sim.write(name, masks)
        if why is not None:
            raise refuse(step, why)
        steps.append(step)

    def rmdir(name: str) -> None:
        sim.rmdir(name)
        steps.append(Step('rmdir', name))

    l3_changes = set()
    mb_lines = {}
    # "No cap": 100 percent, MBA_MAX_MBPS, AMD's maximum.
    top = platform.mb.max_value if platform.mb is not None else 100
    for name, masks in target.l3.items():
        grp = current.get(name)
        if grp is None or grp.l3 != masks or (platform.cdp and grp.cdp_split):
            l3_changes.add(name)
        new_mb = target.mb.get(name, {}) if name != ROOT else {}
        old_mb = grp.mb if grp is not None else {}
        if any(old_mb.get(d, top) != v for d, v in new_mb.items()):
            mb_lines[name] = _mb_line(new_mb) + '\n'
    for name in list(mb_lines):
        l3_changes.add(name)
    for name in l3_changes:
        # A capped group keeps its MB line with its L3 line.
        new_mb = target.mb.get(name, {}) if name != ROOT else {}
        if any(v != top for v in new_mb.values()):
            mb_lines[name] = _mb_line(new_mb) + '\n'
    moving = [n for n in target.l3 if n in l3_changes and n != ROOT
              and n in current and current[n].l3 != target.l3[n]]
    # Also the ones that stay put but end shareable: the default group
    # may take over those very ways (a VM re-pinned off a domain).
    ending = [n for n, m in target.modes.items() if m != MODE_EXCLUSIVE]
    for name in dict.fromkeys(moving + target.remove + ending):
        if sim.modes.get(name) == MODE_EXCLUSIVE:
            mode(name, MODE_SHAREABLE)
    removed_early = (len(sim.l3) + len(target.create) >
                     platform.num_closids)
    if removed_early:
        for name in target.remove:
            rmdir(name)
    for name in target.create:
        domain = sim.mkdir_fits()
        if domain is not None:
            # The kernel gives a new group the lowest run of what is not
            # exclusive: our exclusive groups step aside for the mkdir.
            for other in [n for n in sim.modes if n.startswith(GROUP_PREFIX)
                          and sim.modes[n] == MODE_EXCLUSIVE]:
                mode(other, MODE_SHAREABLE)
            domain = sim.mkdir_fits()
            if domain is not None:
                raise refuse(Step('mkdir', name),
                             'No space on L3:%d (its initial mask would have '
                             'fewer than min_cbm_bits = %d ways)'
                             % (domain, platform.min_cbm_bits))
        sim.mkdir(name)
        steps.append(Step('mkdir', name))
    root_new = target.l3.get(ROOT, {})
    root_old = current[ROOT].l3 if ROOT in current else {}
    root_last = False
    if ROOT in l3_changes:
        gains = any(m.value & ~root_old.get(d, m).value
                    for d, m in root_new.items())
        loses = any(root_old[d].value & ~m.value
                    for d, m in root_new.items() if d in root_old)
        if not gains:
            write(ROOT, root_new)
        else:
            root_last = True
            if loses:
                inter = {d: root_old[d] & m if d in root_old else m
                         for d, m in root_new.items()}
                if all(_valid(platform, m) for m in inter.values()):
                    write(ROOT, inter)
    pending = [n for n in target.l3
               if n != ROOT and (n in l3_changes or n in mb_lines)]
    for name in _shrinking_first(pending, sim, target):
        write(name, target.l3[name], mb_lines.get(name, ''))
    if root_last:
        write(ROOT, root_new)
    if not removed_early:
        for name in target.remove:
            rmdir(name)
    for name, want in target.modes.items():
        if sim.modes.get(name) != want:
            mode(name, want)
    return steps
