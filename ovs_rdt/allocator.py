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
  and a count of free ways is something a scheduler can trust.
* The default group gets the largest contiguous run of what no group of
  ours holds (never a foreign exclusive group's ways), and at least
  ``system_min_ways`` ways.
* A group that holds no ways on a domain (its tasks never run there) gets
  the default group's mask there; such a group cannot be kernel-exclusive.
"""
from __future__ import annotations

from ovs_rdt.bitmask import CBM
from ovs_rdt import ways as capacity
from ovs_rdt.exceptions import InsufficientWays, InvalidMask, OutOfClosids
from ovs_rdt.model import MODE_EXCLUSIVE, MODE_SHAREABLE, ROOT, Group
from ovs_rdt.model import Platform, Request


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


def validate_mask(platform: Platform, mask: CBM, field: str) -> None:
    """Raise InvalidMask unless the kernel would accept ``mask``."""
    if mask.width != platform.cbm_len:
        raise InvalidMask('%s %s is not a %d-bit capacity bitmask'
                          % (field, mask, platform.cbm_len))
    if not platform.sparse_masks and not mask.is_contiguous():
        raise InvalidMask('%s %s is not contiguous (this platform does not '
                          'support sparse masks)' % (field, mask))
    if mask.count < platform.min_cbm_bits:
        raise InvalidMask('%s %s has %d ways, fewer than the platform '
                          'minimum %d' % (field, mask, mask.count,
                                          platform.min_cbm_bits))


def best_fit(free: CBM, ways: int, sparse: bool) -> CBM | None:
    """``ways`` contiguous ways from ``free``: the top of the smallest run
    that holds them (the highest such run on a tie), which keeps the largest
    run whole for the default group; highest bits when only sparse fits.
    """
    if ways <= 0:
        return CBM.empty(free.width)
    runs = [(length, -low, low) for low, length in free.runs()
            if length >= ways]
    if runs:
        length, _, low = min(runs)
        return CBM.span(low + length - ways, ways, free.width)
    if sparse and free.count >= ways:
        value = 0
        for bit in sorted(free.bits(), reverse=True)[:ways]:
            value |= 1 << bit
        return CBM(value, free.width)
    return None


def _order(requests: list[Request], current: dict[str, Group],
           domain: int) -> list[Request]:
    """Stable packing order: existing groups by position, new ones last."""
    existing = []
    new = []
    for idx, req in enumerate(requests):
        grp = current.get(req.name)
        mask = grp.l3.get(domain) if grp else None
        if mask:
            existing.append((-mask.high, idx, req))
        else:
            new.append(req)
    existing.sort(key=lambda item: (item[0], item[1]))
    return [item[2] for item in existing] + new


def _layout_domain(platform: Platform, domain: int, groups: list[Group],
                   requests: list[Request], system_min_ways: int,
                   system_cbm: CBM | None, plan: Plan) -> None:
    width = platform.cbm_len
    current = {g.name: g for g in groups}
    wanted = {r.name for r in requests}
    foreign = [g for g in groups if not g.is_root and not g.owned]
    fixed = CBM.empty(width)
    foreign_exclusive = CBM.empty(width)
    for grp in foreign:
        mask = grp.l3.get(domain)
        if mask is None:
            continue
        fixed |= mask
        if grp.mode == MODE_EXCLUSIVE:
            foreign_exclusive |= mask
    ours = CBM.empty(width)
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
        plan.l3.setdefault(req.name, {})[domain] = mask
        ours |= mask
    reserve = max(system_min_ways, platform.min_cbm_bits)
    if system_cbm is not None:
        validate_mask(platform, system_cbm,
                      '[allocation] system_l3_cbm on domain %d' % domain)
        if system_cbm.overlaps(ours | foreign_exclusive):
            raise InvalidMask('[allocation] system_l3_cbm %s on domain %d '
                              'overlaps ways held by pools or exclusive '
                              'groups' % (system_cbm, domain))
        reserve = 0
    taken = fixed | ours | (system_cbm or CBM.empty(width))
    counted = [r for r in requests if r.ways.get(domain)]
    available = (~taken).count
    used = 0
    for req in _order(counted, current, domain):
        ways = req.ways[domain]
        if ways < platform.min_cbm_bits:
            raise InvalidMask('%s asks for %d ways on domain %d, fewer than '
                              'the platform minimum %d'
                              % (req.name, ways, domain, platform.min_cbm_bits))
        free = capacity.free_ways(available, reserve, used)
        mask = best_fit(~taken, ways, platform.sparse_masks) \
            if free >= ways else None
        if mask is None:
            held = (taken - (system_cbm or CBM.empty(width))).count
            raise InsufficientWays(
                '%s needs %d %sways on cache domain %d, but only %d of %d are '
                'free (%d held by other groups, %d kept for the system)'
                % (req.name, ways, 'contiguous ' if free >= ways else '',
                   domain, max(free, 0), width, held,
                   system_cbm.count if system_cbm else reserve))
        plan.l3.setdefault(req.name, {})[domain] = mask
        taken |= mask
        ours |= mask
        used += ways
    # The default group.
    if system_cbm is not None:
        root_mask = system_cbm
    else:
        spare = ~(ours | foreign_exclusive)
        root_mask = spare if platform.sparse_masks else spare.largest_run()
        if root_mask.count < reserve:
            raise InsufficientWays(
                'the default group would keep %d contiguous ways on cache '
                'domain %d, fewer than [allocation] system_min_ways = %d'
                % (root_mask.count, domain, reserve))
    plan.l3.setdefault(ROOT, {})[domain] = root_mask
    plan.free[domain] = capacity.free_ways(
        (~(taken | (system_cbm or CBM.empty(width)))).count, reserve, 0)
    # Groups of ours that hold nothing here follow the default group.
    for name in wanted:
        plan.l3.setdefault(name, {}).setdefault(domain, root_mask)


def _schemata_line(masks: dict[int, CBM]) -> str:
    return 'L3:' + ';'.join('%d=%s' % (d, masks[d]) for d in sorted(masks))


def _mb_line(values: dict[int, int]) -> str:
    return 'MB:' + ';'.join('%d=%d' % (d, values[d]) for d in sorted(values))


def plan(platform: Platform, groups: list[Group], requests: list[Request],
         system_min_ways: int = 1,
         system_cbm: dict[int, CBM] | None = None) -> Plan:
    """Compute the target layout for ``requests`` (every group we own).

    Groups we own that are not in ``requests`` are removed.  Raises
    InsufficientWays, OutOfClosids or InvalidMask, changing nothing.
    """
    names = [r.name for r in requests]
    if len(set(names)) != len(names):
        raise InvalidMask('duplicate group in requests: %s' % names)
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
    for req in requests:
        unknown = req.domains - set(platform.domains)
        if unknown:
            raise InvalidMask('%s names cache domains %s that this platform '
                              'does not have (it has %s)'
                              % (req.name, sorted(unknown),
                                 list(platform.domains)))
    for domain in platform.domains:
        _layout_domain(platform, domain, groups, requests, system_min_ways,
                       (system_cbm or {}).get(domain), result)
    all_domains = frozenset(platform.domains)
    for req in requests:
        holds_all = req.domains == all_domains
        result.modes[req.name] = (MODE_EXCLUSIVE if req.exclusive and holds_all
                                  else MODE_SHAREABLE)
        if platform.mb is not None:
            pct = platform.mb.round(req.mb_percent or 100)
            result.mb[req.name] = {d: pct for d in platform.mb.domains}
    result.steps = _steps(platform, current, result)
    return result


def _steps(platform: Platform, current: dict[str, Group],
           target: Plan) -> list[Step]:
    """Kernel-safe order.

    The kernel refuses a mask that overlaps an exclusive group, so groups
    of ours whose masks change drop to shareable first, every mask is
    written, and exclusivity is set last, when nothing overlaps any more.
    Removals come first: they free CLOSIDs and ways.
    """
    steps = [Step('rmdir', name) for name in target.remove]
    changing = []
    for name, masks in target.l3.items():
        grp = current.get(name)
        old = grp.l3 if grp else {}
        mb_old = grp.mb if grp else {}
        mb_new = target.mb.get(name, {})
        if name == ROOT:
            mb_new = {}
        if old != masks or any(mb_old.get(d, 100) != v for d, v in mb_new.items()):
            changing.append(name)
    for name in changing:
        grp = current.get(name)
        if grp is not None and grp.mode == MODE_EXCLUSIVE and name != ROOT:
            steps.append(Step('mode', name, MODE_SHAREABLE))
    steps.extend(Step('mkdir', name) for name in target.create)
    root_old = current[ROOT].l3 if ROOT in current else {}
    root_new = target.l3.get(ROOT, {})
    shrinking = all(root_new[d].value & ~root_old.get(d, root_new[d]).value == 0
                    for d in root_new)
    ordered = [n for n in changing if n != ROOT]
    if ROOT in changing:
        ordered.insert(0 if shrinking else len(ordered), ROOT)
    for name in ordered:
        line = _schemata_line(target.l3[name]) + '\n'
        if name in target.mb:
            line += _mb_line(target.mb[name]) + '\n'
        steps.append(Step('schemata', name, line))
    for name, mode in target.modes.items():
        grp = current.get(name)
        was = grp.mode if grp is not None else MODE_SHAREABLE
        if name in changing and was == MODE_EXCLUSIVE:
            was = MODE_SHAREABLE
        if mode != was:
            steps.append(Step('mode', name, mode))
    return steps
