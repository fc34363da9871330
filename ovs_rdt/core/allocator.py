"""The cache-way allocator: pure logic, no I/O.

Given what the platform offers, every resctrl group as it is now and the
complete set of groups ovs-rdt should own, :func:`plan` computes the mask of
every one of our groups and of the default (root) group on every L3 cache
domain, and the ordered, kernel-safe writes that get there.  It owns the
checks of the whole request set (names, CLOSIDs, domains, MB percentages),
the repacking until the layout settles, and the groups' modes; the rest is
in three modules:

* :mod:`ovs_rdt.core.layout`: where the ways go on one cache domain (the
  packing, the default group's floor, foreign groups).
* :mod:`ovs_rdt.core.writes`: the order of the writes (shrinking groups
  first, every step undoable).
* :mod:`ovs_rdt.core.kernel`: the kernel's rules each write is checked
  against before any is made (and which masks it accepts).

The names other modules use stay importable from here.
"""
from __future__ import annotations

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.foreign import mirrors_default
from ovs_rdt.core.kernel import validate_mask
from ovs_rdt.core.layout import Domain, Layout, best_fit, layout_domain
from ovs_rdt.core.model import UNIT_PERCENT, MBInfo, Platform, Request
from ovs_rdt.core.model import mb_terms
from ovs_rdt.core.model import MODE_EXCLUSIVE, MODE_SHAREABLE, ROOT, Group
from ovs_rdt.core.ways import closids_fit
from ovs_rdt.core.plan import RMDIR, Plan, Step
from ovs_rdt.core.writes import Overlap, split_masks, steps
from ovs_rdt.exceptions import AllocationError, InvalidMask, OutOfClosids
from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.inputs import request

__all__ = ['Plan', 'Step', 'best_fit', 'freeing', 'mirrors_default', 'plan',
           'validate_mask']


#: How many times a layout is re-packed from itself to settle.
_SETTLE_ROUNDS = 4


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


def _attempt(domains: list[Domain], positions: dict[str, dict[int, CBM]],
             keep: bool) -> Plan:
    """Every domain laid out from ``positions`` (l3 and free only)."""
    trial = Plan()
    for dom in domains:
        layout = layout_domain(dom, positions, keep)
        for name, mask in layout.masks.items():
            trial.l3.setdefault(name, {})[dom.index] = mask
        trial.free[dom.index] = layout.free
    return trial


def _settle(domains: list[Domain], groups: list[Group]) -> Plan:
    """The layout the next operation leaves as it is, domain by domain."""
    start = {g.name: g.l3 for g in groups}
    result = Plan()
    for dom in domains:
        layout = _settle_domain(dom, start)
        for name, mask in layout.masks.items():
            result.l3.setdefault(name, {})[dom.index] = mask
        result.free[dom.index] = layout.free
    return result


def _settle_domain(dom: Domain, start: dict[str, dict[int, CBM]]) -> Layout:
    """One domain's layout that the next operation leaves as it is.

    Packing follows the groups' positions, and the new ones go last; once
    placed, a new group has a position of its own, which can change the
    order the next time (when foreign groups or explicit masks split the
    free ways).  So the packing is repeated from its own result until
    nothing moves.  Where it does not settle, or does not fit, the groups
    of ours stay where they are and only new or resized ones are placed: a
    layout an earlier operation made always fits again, and nothing moves
    on later, unrelated changes.  Each cache domain is laid out on its own,
    so one that does not settle keeps its groups in place without holding
    the others back (found by the property tests: a domain left unpacked
    for another's sake kept a freed way apart from the other free ways).
    And where the packing does settle from that kept layout, the next
    operation would move the groups there: so they go there now (found by
    the property tests: with a way shared with I/O in the middle of the
    domain, a settled layout was repacked by the next, unrelated plan).
    """
    settled, first, error = _repack(dom, start)
    if settled is not None:
        return settled
    try:
        kept = layout_domain(dom, start, True)
    except AllocationError:
        if first is None:
            raise error or AllocationError('no layout') from None
        return first
    index = dom.index
    positions = dict(start)
    for name, mask in kept.masks.items():
        positions[name] = {**positions.get(name, {}), index: mask}
    return _repack(dom, positions)[0] or kept


def _repack(dom: Domain, positions: dict[str, dict[int, CBM]]
            ) -> tuple[Layout | None, Layout | None, AllocationError | None]:
    """Repeat the packing from ``positions`` until nothing moves.

    (The settled layout or None, the first packing that fitted, the error
    that ended it.)
    """
    index = dom.index
    first: Layout | None = None
    for _ in range(_SETTLE_ROUNDS):
        try:
            trial = layout_domain(dom, positions, False)
        except AllocationError as exc:
            return None, first, exc
        first = first or trial
        if all(positions.get(n, {}).get(index) == m
               for n, m in trial.masks.items()):
            return trial, first, None
        positions = dict(positions)
        for name, mask in trial.masks.items():
            positions[name] = {**positions.get(name, {}), index: mask}
    return None, first, None


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
    changing nothing.
    """
    _check_names(requests)
    names = {r.name for r in requests}
    current = {g.name: g for g in groups}
    result = Plan()
    result.remove = [g.name for g in groups
                     if g.owned and g.name not in names]
    result.create = [r.name for r in requests if r.name not in current]
    _check_closids(platform, groups, result)
    _check_requests(platform, requests)
    domains = [Domain(platform, d, groups, requests, system_min_ways,
                      (system_cbm or {}).get(d)) for d in platform.domains]
    layout = _settle(domains, groups)
    try:
        _finish(platform, groups, requests, layout, result, True)
    except Overlap:
        _around(platform, groups, requests, domains, layout, result)
    return result


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


def _around(platform: Platform, groups: list[Group], requests: list[Request],
            domains: list[Domain], layout: Plan, result: Plan) -> None:
    """Reach ``layout`` when the default group would have to trade places
    with groups of ours and has no way free to stand aside on.

    First the groups stay where they are (only new or resized ones
    placed); from there the repacking settles in further runs of writes,
    each reaching as much of the settled layout as can be written without
    an overlap (:func:`_reachable`, domain by domain), until a run has
    nothing left to write: a layout the next plan keeps (what is left is
    a trade still out of reach).  When the
    groups cannot stay where they are either, the plan is refused
    (:class:`Overlap`, nothing changed): no order of single writes reaches
    it without a group that holds ways overlapping the default group for
    a moment, and a crash then would read that group as holding none.
    """
    try:
        kept = _attempt(domains, {g.name: g.l3 for g in groups}, True)
        _finish(platform, groups, requests, kept, result, True)
    except AllocationError as exc:
        raise Overlap(
            'cannot reach the new layout: the default group would trade '
            'places with groups of ours and has no way free to stand aside '
            'on, and a group overlapping it for a moment would read as '
            'holding no ways after a crash (%s); nothing was changed: free '
            'a way (stop a VM) and retry' % exc) from None
    between = _after(groups, result)
    for _ in range(_SETTLE_ROUNDS):
        more = Plan()
        try:
            again = [Domain(platform, d.index, between, requests,
                            d.system_min_ways, d.system_cbm) for d in domains]
            _finish(platform, between, requests,
                    _reachable(platform, between, requests, again,
                               _settle(again, between)), more, True)
        except AllocationError:
            return
        if not more.steps:
            return
        result.l3, result.free = more.l3, more.free
        result.modes, result.mb = more.modes, more.mb
        result.events, result.split = more.events, more.split
        result.steps += more.steps
        between = _after(between, more)


def _reachable(platform: Platform, groups: list[Group],
               requests: list[Request], domains: list[Domain],
               settled: Plan) -> Plan:
    """``settled``, or as much of it as single writes reach from ``groups``.

    A cache domain whose repacking has the default group trade places with
    groups of ours, with no way free to stand aside on, keeps its groups
    where they are; the other domains still settle (found by the property
    tests: a trade out of reach on one domain kept a way freed on another
    apart from the other free ways).
    """
    try:
        _finish(platform, groups, requests, _copy(settled), Plan(), True)
        return settled
    except Overlap:
        pass
    reached = _attempt(domains, {g.name: g.l3 for g in groups}, True)
    for dom in domains:
        trial = _copy(reached)
        for name, masks in settled.l3.items():
            trial.l3.setdefault(name, {})[dom.index] = masks[dom.index]
        trial.free[dom.index] = settled.free[dom.index]
        try:
            _finish(platform, groups, requests, _copy(trial), Plan(), True)
        except Overlap:
            continue
        reached = trial
    return reached


def _copy(layout: Plan) -> Plan:
    """A layout's masks and free ways, apart from ``layout``'s."""
    out = Plan()
    out.l3 = {name: dict(masks) for name, masks in layout.l3.items()}
    out.free = dict(layout.free)
    return out


def _after(groups: list[Group], result: Plan) -> list[Group]:
    """The groups as ``result``'s steps leave them."""
    out = []
    for grp in groups:
        if grp.is_root:
            out.append(Group(ROOT, dict(result.l3[ROOT]), mb=dict(grp.mb),
                             mode=grp.mode))
        elif not grp.owned:
            out.append(grp)
    for name, masks in result.l3.items():
        if name != ROOT:
            was = next((g for g in groups if g.name == name), None)
            code, data = split_masks(result, name) or ({}, {})
            out.append(Group(name, dict(masks),
                             mb=dict(result.mb.get(name, {})),
                             mode=result.modes[name],
                             mb_event=result.events.get(
                                 name, was.mb_event if was else None),
                             l3code=code, l3data=data))
    return out


def _finish(platform: Platform, groups: list[Group], requests: list[Request],
            layout: Plan, result: Plan, strict: bool) -> None:
    """``result`` takes ``layout``'s masks, the modes and the steps."""
    result.l3, result.free = layout.l3, layout.free
    _set_modes_and_mb(platform, groups, requests, result)
    result.steps = steps(platform, {g.name: g for g in groups}, result,
                         strict)
