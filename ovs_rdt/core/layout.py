"""Where the ways go on one L3 cache domain (pure logic, no I/O).

Domains are independent; :func:`layout_domain` places every group of ours
and the default (root) group on one of them:

* Fixed: masks of foreign groups (not ``ovsrdt-``), explicit ``l3_cbm``
  masks and an explicit system mask.  They are never moved; ways they use
  are never given to a counted request (:func:`place_explicit`).
* Counted requests (``ways``) that hold as many ways as they ask stay where
  they are: on silicon a group fills only its own ways, so a group moved
  elsewhere loses its warm cache (:func:`placing_order`).  A group that
  grows or shrinks keeps as many of its ways as it can
  (:func:`nearest_fit`); a new one goes to the top of the smallest free run
  that holds it (:func:`best_fit`, so the default group keeps the largest
  run).  Ways a group gives up stay where they are, free.  Which groups
  may move when a request fits only that way is the allocator's choice
  (``moving``: :func:`ovs_rdt.core.allocator.plan`).
* Isolated requests never get the ways in ``info/L3/shareable_bits`` (or,
  while io_alloc is enabled, ``io_alloc_cbm``; the default group's floor
  counts only ways outside those): the
  hardware (I/O) fills them too and the kernel refuses an exclusive group
  there.  Shared requests and the default group may use them.
* The default group keeps the run of the ways no group of ours gets and no
  foreign group holds that holds most of its ways now, or else gets the
  largest such run; while foreign groups exist, only of the ways it has now
  or our groups have now (:func:`root_may`), and at least
  ``system_min_ways`` ways (taking only that many from the ways nobody
  holds when it has fewer): :func:`root_mask`.  So it never grows over
  another tool's ways, and ways another tool took out of it, or freed,
  stay free for that tool while it has groups (libvirt counts as free only
  what neither the default group nor any group has).  What a foreign group
  holds, and the ways of ours it shares (which stay where they are and go
  to no other group of ours), is :mod:`ovs_rdt.core.foreign`'s rule; of
  those, the ways its tool wrote (:attr:`CacheDomain.written`) the default
  group leaves where it fits beside them (:meth:`CacheDomain.ceding`).
* A group that holds no ways on a domain (its tasks never run there) gets
  the default group's mask there; such a group cannot be kernel-exclusive.
"""
from __future__ import annotations

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core import foreign
from ovs_rdt.core.kernel import UNSHAREABLE, lowest_run, validate_mask
from ovs_rdt.core.model import ROOT, Group, Platform, Request, held
from ovs_rdt.core.model import held_masks
from ovs_rdt.core.ways import ways_left
from ovs_rdt.exceptions import AllocationError, InsufficientWays, InvalidMask
from ovs_rdt.exceptions import count

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import AbstractSet

    #: group -> domain -> mask: where the groups are (or were last placed).
    Positions = dict[str, dict[int, CBM]]


class CacheDomain:
    """What the layout of one cache domain depends on.

    The ways foreign groups hold (:attr:`fixed`, :attr:`foreign_exclusive`)
    or share with ours (:attr:`shared`, of them :attr:`written` those their
    tool wrote) and the ways the default group may have (:attr:`root_may`)
    depend on nothing but the groups as they are, so they are worked out
    once.
    """

    __slots__ = ('platform', 'index', 'groups', 'requests', 'system_min_ways',
                 'system_cbm', 'width', 'hw_shared', 'hw_source', 'io_ways',
                 'fixed', 'shared', 'written',
                 'foreign_exclusive', 'root_may')

    def __init__(self, platform: Platform, index: int, groups: list[Group],
                 requests: list[Request], system_min_ways: int,
                 system_cbm: CBM | None) -> None:
        self.platform = platform
        self.index = index
        self.groups = groups
        self.requests = requests
        self.system_min_ways = system_min_ways
        self.system_cbm = system_cbm
        self.width = width = platform.cbm_len
        # Ways the hardware also fills (I/O): the kernel refuses them to an
        # exclusive group, and an isolated allocation is not isolated there.
        self.hw_shared = CBM(platform.hw_shared(index) & ((1 << width) - 1),
                             width)
        self.hw_source = platform.hw_shared_source(index)
        # Ways reserved for I/O (io_alloc): never part of the system's floor.
        self.io_ways = platform.io_ways(index)
        self.fixed, self.foreign_exclusive, self.shared, self.written = \
            foreign_ways(self)
        self.root_may = root_may(self)

    def ceding(self, positions: Positions) -> CacheDomain | None:
        """This domain with the :attr:`written` ways no group of ours but
        the default group holds now (``positions``) held by their tool
        (fixed, no longer shared): the default group leaves them; a live
        group of ours keeps its ways.  None when there are none.
        """
        ways = self.written
        root = positions.get(ROOT, {}).get(self.index)
        for grp in self.groups:
            mask = positions.get(grp.name, {}).get(self.index)
            if grp.owned and mask is not None and held(mask, root):
                ways -= mask
        if not ways:
            return None
        out = CacheDomain.__new__(CacheDomain)
        for name in CacheDomain.__slots__:
            setattr(out, name, getattr(self, name))
        out.fixed, out.shared = self.fixed | ways, self.shared - ways
        return out


class Layout:
    """One domain's result: every mask (in placing order) and free ways."""

    __slots__ = ('masks', 'free')

    def __init__(self, masks: dict[str, CBM], free: int) -> None:
        #: group (ours and the default group) -> mask on this domain.
        self.masks = masks
        #: ways a new counted request could still get.
        self.free = free


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
        if lowest_run(value) >= min_bits:
            return CBM(value, free.width)
    return None


def sparse_spare(spare: CBM, min_bits: int) -> CBM:
    """``spare`` without the low runs shorter than ``min_bits``.

    A sparse mask is only valid when its lowest run is long enough.
    """
    value = spare.value
    for low, length in spare.runs():
        if length >= min_bits:
            break
        value &= ~(((1 << length) - 1) << low)
    return CBM(value, spare.width)


def foreign_ways(dom: CacheDomain) -> tuple[CBM, CBM, CBM, CBM]:
    """The ways foreign groups hold on the domain, those of them in
    groups no other group may overlap (exclusive, pseudo-locked), the
    ways of ours they share, and of those the ways their tool wrote
    (:mod:`ovs_rdt.core.foreign`).
    """
    fixed = foreign_exclusive = shared = written = CBM.empty(dom.width)
    for grp in dom.groups:
        mask = foreign.holds(grp, dom.index, dom.groups)
        if mask is None:
            continue
        fixed |= mask
        if grp.mode in UNSHAREABLE:
            foreign_exclusive |= mask
        shared |= foreign.shares(grp, dom.index, dom.groups) or shared
        written |= foreign.written(dom.platform, grp, dom.index,
                                   dom.groups, root_min_ways(dom)) or written
    return fixed, foreign_exclusive, shared, written


def shared_away(dom: CacheDomain, name: str) -> CBM:
    """Ways foreign groups share with ours that ``name`` may not take:
    all but those it holds now.
    """
    if not dom.shared:
        return dom.shared
    root = next((g for g in dom.groups if g.is_root), None)
    for grp in dom.groups:
        if grp.name == name:
            mask = held_masks(grp, root).get(dom.index)
            if mask is not None:
                return dom.shared - mask
    return dom.shared


def root_may(dom: CacheDomain) -> CBM:
    """The ways the default group may have on the domain.

    Beside another tool's groups, only the ways it has now and those our
    groups hold now (:func:`ovs_rdt.core.foreign.held_by_ours`): ways
    nobody holds (the other tool took them out of the default group, or
    freed them) stay free for that tool too.  Without one, every spare way.
    """
    mine = None
    if any(not g.is_root and not g.owned for g in dom.groups):
        mine = foreign.held_by_ours(dom.index, dom.groups)
    return mine if mine is not None else CBM.full(dom.width)


def packing_order(requests: list[Request], positions: Positions,
                  domain: int) -> list[Request]:
    """The whole repacking's order: existing groups by position, highest
    first, new ones last (every group may move: the allocator's last
    resort, :func:`ovs_rdt.core.allocator.layouts`).

    A group that follows the default group on ``domain`` has no position
    there yet: it is placed like a new one.
    """
    existing = []
    new = []
    root = positions.get(ROOT, {}).get(domain)
    for idx, req in enumerate(requests):
        mask = positions.get(req.name, {}).get(domain)
        if mask is not None and held(mask, root):
            existing.append((-mask.high, idx, req))
        else:
            new.append(req)
    existing.sort(key=lambda item: (item[0], item[1]))
    return [item[2] for item in existing] + new


def live_masks(dom: CacheDomain, positions: Positions) -> dict[str, CBM]:
    """The counted groups that hold ways on the domain now, and where."""
    root = positions.get(ROOT, {}).get(dom.index)
    out = {}
    for req in dom.requests:
        if req.ways.get(dom.index):
            mask = positions.get(req.name, {}).get(dom.index)
            if mask is not None and held(mask, root):
                out[req.name] = mask
    return out


def placing_order(dom: CacheDomain, live: dict[str, CBM],
                  movers: dict[str, CBM]) -> list[tuple[Request, CBM | None]]:
    """The counted requests in the order they are placed, each with the
    mask it holds now (None: placed as a new one).

    Groups that keep their size first (highest first: they stay), then
    growing ones, then shrinking ones (a group growing into its shrinking
    neighbour's ways takes them before the neighbour picks the ways it
    keeps), then the new ones in the order they come (configured pools
    before VMs: a VM that goes frees ways next to the default group), then
    the ``movers``, largest first (allowed to move: each stays if the
    others left its ways free, else goes as near as it can).
    """
    def key(item: tuple[int, Request]) -> tuple[int, int, int]:
        idx, req = item
        ways = req.ways[dom.index]
        now = live.get(req.name)
        if req.name in movers:
            return 4, -ways, idx
        if now is None:
            return 3, 0, idx
        if now.count == ways:
            return 0, -now.high, idx
        return (1 if ways > now.count else 2), -now.high, idx
    counted = [(i, r) for i, r in enumerate(dom.requests)
               if r.ways.get(dom.index)]
    return [(req, live.get(req.name, movers.get(req.name)))
            for _, req in sorted(counted, key=key)]


def nearest_fit(allowed: CBM, ways: int, now: CBM, avoid: CBM) -> CBM | None:
    """``ways`` contiguous ways from ``allowed`` that keep the most of
    ``now`` (a group growing or shrinking), then take the fewest of
    ``avoid`` (ways other groups hold now), then the highest; None when
    no run holds them.
    """
    best = None
    best_key = None
    for low in range(allowed.width - ways + 1):
        mask = CBM.span(low, ways, allowed.width)
        if mask.value & ~allowed.value:
            continue
        key = (-(mask & now).count, (mask & avoid).count, -low)
        if best_key is None or key < best_key:
            best, best_key = mask, key
    return best


def check_explicit(dom: CacheDomain, req: Request, mask: CBM, ours: CBM,
                   ours_exclusive: CBM) -> None:
    """Raise InvalidMask unless ``req``'s own ``l3_cbm`` can go there."""
    field = '%s l3_cbm on domain %d' % (req.name, dom.index)
    validate_mask(dom.platform, mask, field)
    used = dom.fixed | ours | shared_away(dom, req.name)
    if req.exclusive and mask.overlaps(used):
        raise InvalidMask('%s %s overlaps ways already in use (%s)%s'
                          % (field, mask, used, foreign.blocking(
                              dom.platform, dom.index, dom.groups,
                              mask & used)))
    if mask.overlaps(dom.foreign_exclusive):
        raise InvalidMask('%s %s overlaps an exclusive group of another '
                          'tool (%s)' % (field, mask, dom.foreign_exclusive))
    if req.exclusive and mask.overlaps(dom.hw_shared):
        raise InvalidMask('%s %s is isolated but overlaps the ways the '
                          'hardware shares with I/O (%s)'
                          % (field, mask, dom.hw_source))
    if not req.exclusive and mask.overlaps(ours_exclusive):
        raise InvalidMask('%s %s overlaps the ways of an isolated pool '
                          '(%s)' % (field, mask, ours_exclusive))


def place_explicit(dom: CacheDomain, out: dict[str, CBM]) -> CBM:
    """Explicit masks first: they are where the operator put them.

    Adds them to ``out``; returns the ways they take.
    """
    ours = ours_exclusive = CBM.empty(dom.width)
    for req in dom.requests:
        mask = req.cbm.get(dom.index)
        if mask is None:
            continue
        check_explicit(dom, req, mask, ours, ours_exclusive)
        out[req.name] = mask
        ours |= mask
        if req.exclusive:
            ours_exclusive |= mask
    return ours


def root_min_ways(dom: CacheDomain) -> int:
    """The fewest ways the default group keeps without an explicit system
    mask: ``system_min_ways``, at least the platform's minimum.
    """
    return max(dom.system_min_ways, dom.platform.min_cbm_bits)


def system_reserve(dom: CacheDomain, ours: CBM) -> int:
    """Ways kept for the default group (``system_min_ways``).

    None with an explicit system mask: that mask is what it gets, checked
    here.
    """
    system_cbm = dom.system_cbm
    if system_cbm is None:
        return root_min_ways(dom)
    validate_mask(dom.platform, system_cbm,
                  '[allocation] system_l3_cbm on domain %d' % dom.index)
    if system_cbm.overlaps(ours | dom.foreign_exclusive):
        raise InvalidMask('[allocation] system_l3_cbm %s on domain %d '
                          'overlaps ways held by pools or exclusive '
                          'groups' % (system_cbm, dom.index))
    return 0


def fit_counted(dom: CacheDomain, req: Request, taken: CBM, reserve: int,
                now: CBM | None = None, avoid: CBM | None = None,
                keep_clear: CBM | None = None) -> CBM:
    """The mask of one counted request, given the ways already ``taken``.

    ``now``: the ways it holds (it stays there when it keeps its size and
    they are all allowed; else it keeps what it can: :func:`nearest_fit`
    away from ``avoid``).  A new shared group takes the most ways shared
    with I/O it can; a new one beside ``avoid`` (the ways of groups that
    may move) keeps off them where it can.  ``keep_clear``: taken ways the default group
    keeps (its floor), which a new group's run should end next to, as
    below I/O's ways (:func:`best_fit`'s ``shared``).
    """
    keep_clear = keep_clear or CBM.empty(dom.width)
    plat = dom.platform
    ways = req.ways[dom.index]
    if ways < plat.min_cbm_bits:
        raise InvalidMask('%s asks for %s on domain %d, fewer than '
                          'the platform minimum %d'
                          % (req.name, count(ways, 'way'), dom.index,
                             plat.min_cbm_bits))
    allowed = (~taken - dom.hw_shared if req.exclusive else ~taken) - \
        shared_away(dom, req.name)
    free = max(0, min(allowed.count, (~taken - dom.io_ways).count - reserve
                      + (allowed & dom.io_ways).count))
    if free < ways:
        raise _insufficient(dom, req, taken, reserve, free)
    mask = None
    avoid = avoid or CBM.empty(dom.width)
    if now is not None:
        if now.count == ways and now.value & ~allowed.value == 0:
            return now
        mask = nearest_fit(allowed, ways, now, avoid)
    elif not req.exclusive and allowed & dom.hw_shared:
        # A shared group takes the ways I/O fills too, where it can: an
        # isolated group could not have them.
        mask = nearest_fit(allowed, ways, dom.hw_shared, avoid)
        if mask is not None and not mask & dom.hw_shared:
            mask = None
    elif avoid:
        mask = nearest_fit(allowed, ways, CBM.empty(dom.width), avoid)
    mask = mask or best_fit(allowed, ways, plat.sparse_masks,
                            plat.min_cbm_bits, keep_clear.value | (
                                dom.hw_shared.value if req.exclusive else 0))
    if mask is None:
        raise _insufficient(dom, req, taken, reserve, free)
    return mask


def _insufficient(dom: CacheDomain, req: Request, taken: CBM, reserve: int,
                  free: int) -> InsufficientWays:
    ways = req.ways[dom.index]
    system = dom.system_cbm or CBM.empty(dom.width)
    io = (~taken & dom.hw_shared).count if req.exclusive else 0
    io_note = ', %d shared with I/O (%s)' % (io, dom.hw_source) if io else ''
    blocking = foreign.blocking(dom.platform, dom.index, dom.groups,
                                taken | dom.shared)
    # (The allocator words it with the one free count: allocator.room.)
    return InsufficientWays(
        '%s needs %s on cache domain %d, but only %d of %d are '
        'free (%d held by other groups, %d kept for the system%s)%s'
        % (req.name, count(ways, 'contiguous way' if free >= ways else 'way'),
           dom.index, free, dom.width, (taken - system).count,
           system.count if dom.system_cbm is not None else reserve,
           io_note, blocking),
        req.name, dom.index, ways, io_note, blocking)


def root_floors(dom: CacheDomain, now: CBM | None, reserve: int,
                taken: CBM) -> list[CBM]:
    """Where the default group's ``reserve`` ways may stay while it may
    not move: of the ways it has now that it may keep, outside I/O's
    reserved ways, the run with the most ways the hardware shares with I/O
    (no isolated group can have those), else the nearest to them (so no
    way is stranded between), else the lowest (new groups go to the top
    of a run: :func:`best_fit`); then the lowest and the highest.  None
    when it has no such run now.
    """
    if not now or reserve <= 0 or dom.system_cbm is not None:
        return []
    may = (now & dom.root_may) - taken - dom.io_ways
    io = list((dom.hw_shared | dom.io_ways).bits())

    def key(run: CBM) -> tuple[int, int, int]:
        gap = min((max(run.low - b, b - run.high, 0) for b in io), default=0)
        return -(run & dom.hw_shared).count, gap, run.low
    runs = [CBM.span(low + at, reserve, dom.width)
            for low, length in may.runs()
            for at in range(length - reserve + 1)]
    if not runs:
        return []
    first = min(runs, key=key)
    return list(dict.fromkeys([first, runs[0], runs[-1]]))


def place_counted(dom: CacheDomain, taken: CBM, reserve: int,
                  positions: Positions, moving: AbstractSet[str] | None,
                  out: dict[str, CBM], floor: CBM) -> tuple[CBM, CBM]:
    """Place the counted requests (adding them to ``out``): every group
    of ours stays where it is but those in ``moving`` (None: all of them,
    the whole repacking, in :func:`packing_order`), and so does the
    default group's ``floor`` (:func:`root_floors`; empty: none).

    Returns the ways taken now, and the ways the counted requests got.
    """
    ours = CBM.empty(dom.width)
    root = positions.get(ROOT, {}).get(dom.index)
    order: list[tuple[Request, CBM | None]]
    if moving is None:
        order = [(r, None) for r in packing_order(
            [r for r in dom.requests if r.ways.get(dom.index)], positions,
            dom.index)]
        live: dict[str, CBM] = {}
        movers: dict[str, CBM] = {}
    else:
        live = live_masks(dom, positions)
        movers = {n: live.pop(n) for n in list(live) if n in moving}
        order = placing_order(dom, live, movers)
    avoid = root or CBM.empty(dom.width)
    for mask in live.values():
        avoid |= mask
    # New groups keep off the ways of the groups that may move, where they
    # can: those move the less.
    away = CBM.empty(dom.width)
    for mask in movers.values():
        away |= mask
    for req, now in order:
        if now is not None:
            avoid -= now
        mask = fit_counted(dom, req, taken | floor, 0 if floor else reserve,
                           now, avoid if now is not None else away, floor)
        out[req.name] = mask
        taken |= mask
        ours |= mask
    return taken, ours


def root_mask(dom: CacheDomain, ours: CBM, reserve: int,
              now: CBM | None = None) -> CBM:
    """The default group's mask, at least ``reserve`` ways.

    Of what no group of ours and no foreign group holds, the run it may
    have (of at least ``reserve`` ways where one has) that holds most of
    its ways ``now``, or else the largest.
    """
    if dom.system_cbm is not None:
        return dom.system_cbm
    plat = dom.platform

    def fit(spare: CBM) -> CBM:
        if plat.sparse_masks:
            return sparse_spare(spare, plat.min_cbm_bits)
        runs = [CBM.span(low, length, spare.width)
                for low, length in spare.runs()]
        return max(runs, key=lambda run: (
            (run - dom.io_ways).count >= reserve,
            (run & now).count if now else 0, run.count, run.low),
            default=spare)
    spare = ~(ours | dom.fixed)
    io_ways = dom.io_ways
    mask = fit(spare & dom.root_may)
    if (mask - io_ways).count < reserve:
        # Only as many more as the minimum needs (not I/O's ways).
        mask = best_fit(spare - io_ways, reserve, plat.sparse_masks,
                        plat.min_cbm_bits) or fit(spare)
    if (mask - io_ways).count < reserve:
        raise InsufficientWays(
            'the default group would keep %d contiguous ways%s on cache '
            'domain %d, fewer than %s%s'
            % ((mask - io_ways).count,
               ' outside the ways reserved for I/O (io_alloc_cbm %s)'
               % io_ways if io_ways else '', dom.index,
               '[allocation] system_min_ways = %d' % dom.system_min_ways
               if dom.system_min_ways >= plat.min_cbm_bits else
               'the platform minimum %d (info/L3/min_cbm_bits)'
               % plat.min_cbm_bits,
               foreign.blocking(plat, dom.index, dom.groups, ~spare)))
    return mask


def free_ways(dom: CacheDomain, taken: CBM, reserve: int,
              isolated: bool = True) -> int:
    """Ways one more counted group could get on the domain.

    The one rule for the layout's free count and provider-config's
    inventory: the ways not ``taken`` that the hardware does not share
    with I/O (``shareable_bits``, ``io_alloc_cbm``) and no foreign group
    shares with ours, less what the default group must keep
    (``reserve`` ways, outside those reserved for I/O).  A group that is
    not ``isolated`` (a pool with ``isolated = false``) may have any way
    not ``taken``, less the ``reserve``.
    """
    if not isolated:
        return max(0, (~taken).count - reserve)
    return max(0, min((~taken - dom.hw_shared - dom.shared).count,
                      ways_left((~taken - dom.io_ways).count, reserve,
                                0)))


def moved(old: CBM | None, new: CBM) -> int:
    """The ways a group loses that it had room to keep: 0 when it stays,
    grows over its ways or shrinks within them.
    """
    if not old:
        return 0
    return min(old.count, new.count) - (old & new).count


#: (groups that move, ways they move): a layout's cost.
Cost = tuple[int, int]


def live_groups(dom: CacheDomain, positions: Positions) -> dict[str, CBM]:
    """The groups that hold ways on the domain now, the default group
    too: the ones a layout may move.
    """
    live = live_masks(dom, positions)
    root = positions.get(ROOT, {}).get(dom.index)
    if root:
        live[ROOT] = root
    return live


def cost(layout: Layout, live: dict[str, CBM]) -> Cost:
    """(groups that move, ways they move), the default group one of them
    (:func:`moved`; ``live``: :func:`live_groups`).
    """
    groups = ways = 0
    for name, old in live.items():
        lost = moved(old, layout.masks[name])
        groups += bool(lost)
        ways += lost
    return groups, ways


def layout_domain(dom: CacheDomain, positions: Positions,
                  moving: AbstractSet[str] | None = frozenset()) -> Layout:
    """Every group's mask on the domain, from where they are
    (``positions``): only those in ``moving`` may move (None: every group
    of ours, the whole repacking; ROOT: the default group).

    When the default group may not move but would, or the groups do not
    fit, they are placed again with its floor kept where it is, at each
    place :func:`root_floors` offers: the cheapest (:func:`cost`) wins.
    Raises InsufficientWays or InvalidMask.
    """
    empty = CBM.empty(dom.width)
    try:
        layout = _layout(dom, positions, moving, empty)
    except AllocationError as exc:
        if moving is None:
            raise
        error: AllocationError | None = exc
    else:
        root = positions.get(ROOT, {}).get(dom.index)
        if moving is None or ROOT in moving or not moved(root,
                                                         layout.masks[ROOT]):
            return layout
        error = None
    root = positions.get(ROOT, {}).get(dom.index)
    reserve = system_reserve(dom, CBM.empty(dom.width)) \
        if dom.system_cbm is None else 0
    live = live_groups(dom, positions)
    found: list[tuple[Cost, int, Layout]] = []
    for floor in root_floors(dom, root, reserve, dom.fixed):
        try:
            trial = _layout(dom, positions, moving, floor)
        except AllocationError as exc:
            error = error or exc
            continue
        found.append((cost(trial, live), len(found), trial))
    if found:
        return min(found, key=lambda item: item[:2])[2]
    if error is not None:
        raise error
    return layout


def _layout(dom: CacheDomain, positions: Positions,
            moving: AbstractSet[str] | None, floor: CBM) -> Layout:
    masks: dict[str, CBM] = {}
    explicit = place_explicit(dom, masks)
    reserve = system_reserve(dom, explicit)
    system = dom.system_cbm or CBM.empty(dom.width)
    taken, counted = place_counted(dom, dom.fixed | explicit | system,
                                   reserve, positions, moving, masks,
                                   floor - explicit)
    root = masks[ROOT] = root_mask(dom, explicit | counted, reserve,
                                   positions.get(ROOT, {}).get(dom.index))
    free = free_ways(dom, taken, reserve)
    # Groups of ours that hold nothing here follow the default group.
    for name in {r.name for r in dom.requests}:
        masks.setdefault(name, root)
    return Layout(masks, free)
