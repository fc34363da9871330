"""The cache-way allocator: pure logic, no I/O.

Given what the platform offers, every resctrl group as it is now and the
complete set of groups ovs-rdt should own, :func:`plan` computes the mask of
every one of our groups and of the default (root) group on every L3 cache
domain, and the ordered, kernel-safe writes that get there.  It owns the
checks of the whole request set (names, CLOSIDs, domains, MB percentages),
which groups may move when a request fits no other way (:func:`layouts`:
the fewest), and the groups' modes; the rest is in three modules:

* :mod:`ovs_rdt.core.layout`: where the ways go on one cache domain (live
  groups where they are, new ones by best fit, the default group's floor,
  foreign groups).
* :mod:`ovs_rdt.core.writes`: the order of the writes (shrinking groups
  first, every step undoable).
* :mod:`ovs_rdt.core.kernel`: the kernel's rules each write is checked
  against before any is made (and which masks it accepts).

The names other modules use stay importable from here.
"""
from __future__ import annotations

import itertools

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.foreign import mirrors_default
from ovs_rdt.core.kernel import validate_mask
from ovs_rdt.core.layout import CacheDomain, Layout, layout_domain
from ovs_rdt.core.layout import Cost, cost, live_groups, moved
from ovs_rdt.core.model import UNIT_PERCENT, MBInfo, Platform, Request
from ovs_rdt.core.model import mb_terms
from ovs_rdt.core.model import MODE_EXCLUSIVE, MODE_SHAREABLE, ROOT, Group
from ovs_rdt.core.ways import closids_fit
from ovs_rdt.core.plan import RMDIR, Move, Plan, Step
from ovs_rdt.core.writes import Overlap, steps
from ovs_rdt.exceptions import AllocationError, InsufficientWays
from ovs_rdt.exceptions import InvalidMask, OutOfClosids, count
from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.inputs import request
from ovs_rdt import VM_GROUP_PREFIX, vm_group

__all__ = ['Plan', 'Step', 'freeing', 'mirrors_default', 'plan', 'room',
           'validate_mask']

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Callable

    from ovs_rdt.core.layout import Positions


def _check_names(requests: list[Request]) -> None:
    names = [r.name for r in requests]
    if len(set(names)) != len(names):
        raise InvalidMask('duplicate group in requests: %s' % ', '.join(
            sorted({n for n in names if names.count(n) > 1})))


def _check_closids(platform: Platform, groups: list[Group],
                   result: Plan) -> None:
    in_use = len(groups) - len(result.remove) + len(result.create)
    if not closids_fit(platform.num_closids, in_use):
        theirs = [g.name for g in groups if not g.is_root and not g.owned]
        raise OutOfClosids(
            'out of CLOSIDs: %s needs %d groups but the platform has %d '
            'CLOSIDs (%d groups exist%s)'
            % (', '.join(result.create) or 'the plan', in_use,
               platform.num_closids, len(groups),
               '; %d are other tools\': %s' % (len(theirs), ', '.join(theirs))
               if theirs else ''))


def _check_mb(mba: MBInfo, req: Request) -> None:
    """A request's MB cap against the platform, by the operator's rule
    (:func:`ovs_rdt.inputs.request.check_mb`, which the hook, the agent and
    the configuration ask first, naming their field): here for every
    other path (a group kept as it is, the policy), naming the group.
    """
    caps = [(request.MB_PERCENT, v) for v in sorted(set(req.mb.values()) | (
        {req.mb_percent} if req.mb_percent is not None else set()))]
    if req.mb_mbps is not None:
        caps.append((request.MB_MBPS, req.mb_mbps))
    for field, value in caps:
        try:
            request.check_mb(field, value, '%s %s' % (req.name, field),
                             *mb_terms(mba))
        except InvalidValue as exc:
            raise AllocationError(str(exc)) from None


def _mb_values(mba: MBInfo, req: Request) -> dict[int, int]:
    """The ``MB:`` value per domain: the cap, or the platform's maximum."""
    if mba.unit == UNIT_PERCENT:
        return {d: mba.value(percent=req.mb_on(d)) for d in mba.domains}
    return {d: mba.value(mbps=req.mb_mbps) for d in mba.domains}


def _check_requests(platform: Platform, requests: list[Request]) -> None:
    """Every request names domains the platform has, and MB it takes."""
    for req in requests:
        unknown = req.domains - set(platform.domains)
        if unknown:
            raise InvalidMask('%s names cache domains %s that this platform '
                              'does not have (it has %s)'
                              % (req.name, sorted(unknown),
                                 list(platform.domains)))
        if platform.mb is not None:
            _check_mb(platform.mb, req)


#: How many sets of groups allowed to move are tried on one domain before
#: every group may move (the whole repacking): sets whose moving could not
#: free a run long enough are not counted.  Most requests that do not fit
#: where the groups are fit when one group moves.
_MOVE_TRIES = 200
#: How many layouts per domain, and combinations of them, are tried when
#: the writes of the cheapest would have a group overlap the default group
#: for a moment (:class:`~ovs_rdt.core.writes.Overlap`).
_OPTIONS, _COMBINATIONS = 3, 32


def _growing(dom: CacheDomain, live: dict[str, CBM]) -> list[Request]:
    """The requests that are new on the domain or ask more ways than they
    hold there (``live``: :func:`~ovs_rdt.core.layout.live_groups`): the
    ones groups move for.
    """
    return [r for r in dom.requests if r.ways.get(dom.index, 0) > (
        live[r.name].count if r.name in live else 0)]


def _could_free(dom: CacheDomain, live: dict[str, CBM]
                ) -> Callable[[tuple[str, ...]], bool]:
    """Whether moving a set of groups could free a run of ways as long as
    the largest request that is new or grows on the domain (a set that
    cannot is not worth a layout).
    """
    need = max((r.ways[dom.index] for r in _growing(dom, live)), default=0)
    fixed = dom.fixed
    for req in dom.requests:
        fixed |= req.cbm.get(dom.index) or fixed
    if dom.platform.sparse_masks or not need:
        return lambda names: True

    def could(names: tuple[str, ...]) -> bool:
        blocked = fixed
        for name, mask in live.items():
            if name != ROOT and name not in names:
                blocked |= mask
        return (~blocked).largest_run().count >= need
    return could


def _ceding(dom: CacheDomain,
            positions: Positions) -> list[tuple[Cost, Layout]]:
    """The layout where the default group leaves the ways other tools
    wrote for their classes (:meth:`~ovs_rdt.core.layout.CacheDomain.ceding`),
    when it fits with no group of ours but the default group moving;
    else none.
    """
    ceded = dom.ceding(positions)
    if ceded is None:
        return []
    try:
        layout = layout_domain(ceded, positions)
    except AllocationError:
        return []
    live = live_groups(dom, positions)
    live.pop(ROOT, None)
    return [] if cost(layout, live)[0] else [((0, 0), layout)]


def layouts(dom: CacheDomain,
            positions: Positions) -> list[tuple[Cost, Layout]]:
    """The domain's layouts and their costs, the one that moves the fewest
    groups (then the fewest ways: :func:`~ovs_rdt.core.layout.cost`) first.

    Every group stays where it is when the requests fit so (first, where
    it fits too, the layout where the default group leaves the ways other
    tools wrote: :func:`_ceding`).  Else, when they fit at all (the whole
    repacking, the last resort), the smallest sets of groups allowed to
    move, fewest ways first, until a size of set fits (at most
    :data:`_MOVE_TRIES` sets).  Raises the whole repacking's error when
    nothing fits.
    """
    try:
        layout = layout_domain(dom, positions)
    except AllocationError:
        pass
    else:
        return _ceding(dom, positions) + [((0, 0), layout)]
    whole = layout_domain(dom, positions, None)
    live = live_groups(dom, positions)
    found = [(cost(whole, live), 0, whole)]
    could = _could_free(dom, live)
    tries = 0
    for size in range(1, len(live)):
        sets = sorted((names for names in itertools.combinations(
            sorted(live), size) if could(names)),
            key=lambda names: (sum(live[n].count for n in names),
                               ROOT in names, names))
        for names in sets[:_MOVE_TRIES - tries]:
            try:
                layout = layout_domain(dom, positions, frozenset(names))
            except AllocationError:
                continue
            found.append((cost(layout, live), len(found), layout))
        tries += len(sets)
        if len(found) > 1 or tries >= _MOVE_TRIES:
            break
    return [(item[0], item[2]) for item in sorted(found,
                                                  key=lambda i: i[:2])]


def _merge(domains: list[CacheDomain], chosen: list[Layout]) -> Plan:
    """One layout per domain, as a plan's masks and free ways."""
    out = Plan()
    for dom, layout in zip(domains, chosen):
        for name, mask in layout.masks.items():
            out.l3.setdefault(name, {})[dom.index] = mask
        out.free[dom.index] = layout.free
    return out


def _moves(domains: list[CacheDomain], positions: Positions,
           chosen: list[Layout]) -> list[Move]:
    """The groups that existed and move, each with the requests it moves
    for: on its domain, the other new ones and the ones that grow.
    """
    out = []
    for dom, layout in zip(domains, chosen):
        live = live_groups(dom, positions)
        growing = [r.name for r in _growing(dom, live)]
        for name, old in live.items():
            new = layout.masks[name]
            if moved(old, new):
                out.append(Move(name, dom.index, old, new,
                                [n for n in growing if n != name]))
    return out


def _set_modes_and_mb(platform: Platform, groups: list[Group],
                      requests: list[Request], result: Plan) -> None:
    """Isolated groups are exclusive where the kernel allows it.

    The kernel refuses exclusive mode to a group overlapping any other:
    where a foreign group's copy of the default group's mask overlaps, the
    group stays shareable (still apart from every group of ours and the
    default group).  So does a group that holds no ways on some domain.
    """
    all_domains = frozenset(platform.domains)
    mba = platform.mb
    foreign = [g for g in groups if not g.is_root and not g.owned]
    for req in requests:
        holds = frozenset(d for d, n in req.ways.items() if n) | \
            frozenset(req.cbm)
        overlaps = bool(foreign) and any(
            m.overlaps(g.l3.get(d, m.empty(m.width)))
            for d, m in result.l3.get(req.name, {}).items() for g in foreign)
        result.modes[req.name] = (MODE_EXCLUSIVE if req.exclusive and
                                  holds == all_domains and not overlaps
                                  else MODE_SHAREABLE)
        if mba is not None:
            result.mb[req.name] = _mb_values(mba, req)
        if req.mb_event is not None:
            result.events[req.name] = req.mb_event
        if platform.cdp and req.code:
            result.split[req.name] = (dict(req.code), dict(req.data))


def plan(platform: Platform, groups: list[Group], requests: list[Request],
         system_min_ways: int = 1,
         system_cbm: dict[int, CBM] | None = None) -> Plan:
    """Compute the target layout for ``requests`` (every group we own).

    Groups we own that are not in ``requests`` are removed.  Raises
    InsufficientWays, OutOfClosids, InvalidMask or AllocationError,
    changing nothing.  A request refused for want of ways is told what it
    could get there by the one free count (:func:`room`), as ``ovs-rdt
    status`` and ``provider-config`` count.
    """
    try:
        return _plan(platform, groups, requests, system_min_ways, system_cbm)
    except InsufficientWays as exc:
        raise _short(exc, platform, groups, requests, system_min_ways,
                     system_cbm) from None


#: The request :func:`room` asks with (no domain has this UUID).
PROBE = vm_group('00000000-0000-0000-0000-000000000000')


def room(platform: Platform, groups: list[Group], requests: list[Request],
         system_min_ways: int = 1, system_cbm: dict[int, CBM] | None = None,
         isolated: bool = True) -> dict[int, int]:
    """The most ways one more group gets on each cache domain: the largest
    request :func:`plan` places there beside ``requests`` (moving groups
    as it would for it), 0 when not even ``min_cbm_bits``; an ``isolated``
    one (a VM's, an isolated pool) or not.

    The one free count: ``ovs-rdt status``, the reserve ``provider-config``
    gives Placement and the refusals all say this.  CLOSIDs are counted
    apart (as if one were free).  The layout's own count (``Plan.free``)
    is where the search starts: it is exact unless I/O's ways, explicit
    masks or another tool's groups split the free ways.  Raises what
    :func:`plan` raises for ``requests`` alone (a configuration that
    cannot be applied: nothing is counted then).
    """
    import copy

    spare = copy.copy(platform)
    spare.num_closids += 1
    base = _plan(spare, groups, requests, system_min_ways, system_cbm)

    def fits(dom: int, ways: int) -> bool:
        probe = Request(PROBE, ways={dom: ways}, exclusive=isolated)
        try:
            _plan(spare, groups, requests + [probe], system_min_ways,
                  system_cbm)
        except AllocationError:
            return False
        return True

    least = max(1, platform.min_cbm_bits)
    out = {}
    for dom in platform.domains:
        # Largest n in [least, cbm_len] that fits, by bisection from the
        # layout's count (usually two plans: it fits, one more does not).
        guess = min(max(base.free.get(dom, 0), least), platform.cbm_len)
        if fits(dom, guess):
            low, high = guess, platform.cbm_len + 1
            if guess < platform.cbm_len and not fits(dom, guess + 1):
                high = guess + 1
        else:
            low, high = least - 1, guess
        while high - low > 1:
            mid = (low + high) // 2
            if fits(dom, mid):
                low = mid
            else:
                high = mid
        out[dom] = low if low >= least else 0
    return out


def reserve(platform: Platform, groups: list[Group], requests: list[Request],
            system_min_ways: int = 1,
            system_cbm: dict[int, CBM] | None = None
            ) -> dict[int, list[tuple[str, int]]]:
    """What :func:`room`'s reserve (the ways one more group cannot have,
    VMs' aside) holds on each cache domain: the default
    group's floor (``system_min_ways``, or ``system_l3_cbm``), each group
    of ours that is not a VM's (the pools, the PMD group) as ``requests``
    size it, other tools' groups, I/O's ways.  They may overlap (a shared
    pool on I/O's ways); what they leave of the reserve is ways that are
    free but not beside the others (one group's ways are one run).
    """
    out = {}
    for index in platform.domains:
        mask = (system_cbm or {}).get(index)
        dom = CacheDomain(platform, index, groups, requests, system_min_ways,
                          mask)
        parts = [('system_%s' % ('l3_cbm' if mask else 'min_ways'),
                  mask.count if mask else system_min_ways)]
        for req in requests:
            if not req.name.startswith(VM_GROUP_PREFIX):
                held = req.ways.get(index) or (
                    req.cbm[index].count if index in req.cbm else 0)
                parts.append((req.name, held))
        parts += [('other tools\' groups', dom.fixed.count),
                  ('I/O', dom.io_ways.count)]
        out[index] = [(name, ways) for name, ways in parts if ways]
    return out


def _short(exc: InsufficientWays, platform: Platform, groups: list[Group],
           requests: list[Request], system_min_ways: int,
           system_cbm: dict[int, CBM] | None) -> InsufficientWays:
    """``exc`` worded with what its group could get (:func:`room`), in the
    arithmetic ``ovs-rdt status`` shows: the ways reserved for what is not
    a VM, and those VMs hold.
    """
    if exc.group is None or exc.domain is None:
        return exc
    others = [r for r in requests if r.name != exc.group]
    try:
        free = room(platform, groups, others, system_min_ways, system_cbm,
                    next(r.exclusive for r in requests
                         if r.name == exc.group))[exc.domain]
    except AllocationError:
        return exc
    if free >= exc.ways:
        return exc      # (room says it fits alone: not a want of ways)
    vms = sum(r.ways.get(exc.domain, 0) for r in others
              if r.name.startswith(VM_GROUP_PREFIX))
    width = platform.cbm_len
    return InsufficientWays(
        '%s needs %s on cache domain %d, but only %d of %d are free for it '
        '(%d - %d reserved for the default group, pools, OvS and other '
        'tools - %d held by VMs%s)%s'
        % (exc.group, count(exc.ways, 'way'), exc.domain, free, width, width,
           max(0, width - free - vms), vms,
           '; ' + exc.io[2:] + ' among them' if exc.io else '', exc.blocking),
        exc.group, exc.domain, exc.ways, exc.io, exc.blocking)


def _plan(platform: Platform, groups: list[Group], requests: list[Request],
          system_min_ways: int = 1,
          system_cbm: dict[int, CBM] | None = None) -> Plan:
    """:func:`plan`, a want of ways as the layout words it."""
    _check_names(requests)
    names = {r.name for r in requests}
    current = {g.name: g for g in groups}
    result = Plan()
    result.remove = [g.name for g in groups
                     if g.owned and g.name not in names]
    result.create = [r.name for r in requests if r.name not in current]
    _check_closids(platform, groups, result)
    _check_requests(platform, requests)
    domains = [CacheDomain(platform, d, groups, requests, system_min_ways,
                           (system_cbm or {}).get(d))
               for d in platform.domains]
    positions = {g.name: g.l3 for g in groups}
    options = [layouts(dom, positions)[:_OPTIONS] for dom in domains]
    # The cheapest combination of the domains' layouts whose writes never
    # have a group overlap the default group for a moment.
    combinations = sorted(itertools.product(*options), key=lambda combo: (
        sum(cost[0] for cost, _ in combo), sum(cost[1] for cost, _ in combo)))
    error: Overlap | None = None
    for combo in combinations[:_COMBINATIONS]:
        chosen = [layout for _, layout in combo]
        try:
            _finish(platform, groups, requests, _merge(domains, chosen),
                    result)
        except Overlap as exc:
            error = error or exc
            continue
        result.moves = _moves(domains, positions, chosen)
        return result
    raise Overlap(
        'cannot reach the new layout: the default group would trade '
        'places with groups of ours and has no way free to stand aside '
        'on, and a group overlapping it for a moment would read as '
        'holding no ways after a crash (%s); nothing was changed: free '
        'a way (stop a VM) and retry' % error)


def freeing(groups: list[Group], name: str, why: str) -> Plan:
    """The removal of ``name`` alone, every other group as it is.

    For a removal whose whole plan is refused (``why``: the pools do not
    fit as configured, another tool took ways, ...): freeing never waits
    for room.  The kernel takes an ``rmdir`` whatever the other groups
    hold; the group's tasks go to the default group and its CLOSID and
    ways come free (they go back to the default group at the next plan
    that fits).
    """
    result = Plan()
    result.unplaced = why
    for grp in groups:
        if grp.is_root or (grp.owned and grp.name != name):
            result.l3[grp.name] = dict(grp.l3)
            result.modes[grp.name] = grp.mode
        elif grp.name == name:
            result.remove = [name]
            result.steps = [Step(RMDIR, name)]
    return result


def _finish(platform: Platform, groups: list[Group], requests: list[Request],
            layout: Plan, result: Plan) -> None:
    """``result`` takes ``layout``'s masks, the modes and the steps.

    Raises :class:`Overlap` when no order of writes reaches it without a
    group of ours that holds ways overlapping the default group for a
    moment (a crash then would read that group as holding none).
    """
    result.l3, result.free = layout.l3, layout.free
    _set_modes_and_mb(platform, groups, requests, result)
    result.steps = steps(platform, {g.name: g for g in groups}, result)
