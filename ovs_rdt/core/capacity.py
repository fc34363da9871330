"""Cache-way and CLOSID arithmetic shared by the Nova filter and the node.

Pure: no I/O, no oslo, no nova.  The scheduler filter
(:mod:`nova_plugin.filters`) and the node allocator (:mod:`ovs_rdt.core.allocator`)
use the same functions, so the same numbers decide on both sides.  Because
the allocator moves groups to make a run of the free ways when a request
needs one (and only then), a count of free ways per cache domain is exact.

The model, per host:

* Each L3 cache domain (socket) has ``l3_ways`` ways.  ``system_ways`` of
  them are kept out of VM allocations: the default group's minimum, the OvS
  PMD group and the configured pools.
* An instance with ``rdt:l3_ways=N`` holds N ways on *each* domain it may
  run on, and one CLOSID.  Pinned instances (a Nova NUMA topology) run on
  the L3 domains of their NUMA cells: with a NUMA node to L3 map
  (:mod:`ovs_rdt.core.topology`, given to :class:`Usage`) each domain of
  those nodes once (Sub-NUMA Clustering: several nodes, one L3; AMD: one
  node, many L3s); without one, domain id == host NUMA node id (Xeons
  without Sub-NUMA Clustering).  Unpinned instances run on, and hold ways
  on, every domain.
* An instance with ``rdt:pool=X`` holds no ways.  The node only accepts
  pools it is configured with (``[allocation] pools``; the hook refuses
  any other), and creates all of them together, their CLOSIDs in
  ``reserved_closids``.  When the host's pools are known
  (:attr:`HostCapacity.pools`), a request for another pool does not fit;
  when they are not, a pool without an instance on the host is assumed
  not to exist yet and to take a CLOSID when its first instance starts.
* Free CLOSIDs = closids - reserved_closids - (instances holding ways)
  - (distinct pools in use that are not among the known ones).

What the node's allocator also checks and this model leaves to the
operator's numbers (``system_ways``): the ways the hardware shares with
I/O (``info/L3/shareable_bits``), which isolated groups cannot have, and
that the free ways stay contiguous (explicit masks and other tools' groups
at an edge of the mask); ``min_cbm_bits`` is assumed to be 1.
"""
from __future__ import annotations

from typing import AbstractSet, Iterable, NamedTuple

from ovs_rdt.core import topology
from ovs_rdt.core.ways import closids_fit  # noqa: F401 (re-exported)
from ovs_rdt.core.ways import closids_free
from ovs_rdt.core.ways import ways_left


class Holding(NamedTuple):
    """What one instance holds (or a request asks for) on a host."""

    ways: int = 0
    """Ways per domain, 0 for pool members."""
    domains: frozenset[int] | None = None
    """Domains the ways are held on; None means every domain (unpinned).
    Host NUMA node ids when added to a :class:`Usage` with a NUMA node to
    L3 map."""
    pool: str | None = None
    """The shared pool joined, if any."""


class HostCapacity(NamedTuple):
    """A host's cache allocation capacity (names as in the contract)."""

    l3_ways: int
    system_ways: int
    closids: int
    reserved_closids: int = 1
    pools: frozenset[str] | None = None
    """The pools configured on the host (they exist whatever runs there);
    None when unknown."""


class Usage:
    """What the instances on one host hold, summed per domain."""

    __slots__ = ('every', 'on', 'dedicated', 'pools', 'numa_l3')

    def __init__(self, numa_l3: topology.NumaL3 | None = None) -> None:
        self.numa_l3 = numa_l3
        """NUMA node -> L3 domains: holdings added name NUMA nodes, held
        on each of their L3 domains once.  None: node id == L3 id."""
        self.every = 0
        """Ways held on every domain (unpinned instances)."""
        self.on: dict[int, int] = {}
        """Ways held on one domain only (pinned instances), by domain."""
        self.dedicated = 0
        """Instances holding ways: one CLOSID each."""
        self.pools: dict[str, int] = {}
        """Instances per pool."""

    def add(self, holding: Holding, count: int = 1) -> None:
        """Account ``count`` instances holding ``holding`` (-1 removes one)."""
        if holding.ways:
            self.dedicated += count
            if holding.domains is None:
                self.every += holding.ways * count
            else:
                doms = holding.domains if self.numa_l3 is None else \
                    topology.l3_of(self.numa_l3, holding.domains)
                for dom in doms:
                    left = self.on.get(dom, 0) + holding.ways * count
                    if left:
                        self.on[dom] = left
                    else:
                        self.on.pop(dom, None)
        elif holding.pool is not None:
            left = self.pools.get(holding.pool, 0) + count
            if left > 0:
                self.pools[holding.pool] = left
            else:
                self.pools.pop(holding.pool, None)

    def copy(self) -> 'Usage':
        new = Usage(self.numa_l3)
        new.every = self.every
        new.on = dict(self.on)
        new.dedicated = self.dedicated
        new.pools = dict(self.pools)
        return new

    def used_ways(self, domain: int) -> int:
        return self.every + self.on.get(domain, 0)

    def domains(self) -> frozenset[int]:
        """Domains that pinned instances hold ways on."""
        return frozenset(self.on)

    def __repr__(self) -> str:
        return ('Usage(every=%d, on=%r, dedicated=%d, pools=%r)'
                % (self.every, self.on, self.dedicated, self.pools))


def needs_closid(cap: HostCapacity, usage: Usage, request: Holding) -> bool:
    """True when placing ``request`` creates a resctrl group."""
    if request.ways:
        return True
    pool = request.pool
    return pool is not None and pool not in (cap.pools or ()) and \
        pool not in usage.pools


def free_closids(cap: HostCapacity, usage: Usage) -> int:
    on_demand = len(usage.pools) if not cap.pools else \
        len(usage.pools.keys() - cap.pools)
    return closids_free(cap.closids, cap.reserved_closids, usage.dedicated,
                        on_demand)


def best_domains(cap: HostCapacity, usage: Usage, domains: Iterable[int],
                 count: int) -> frozenset[int]:
    """The ``count`` domains with the most free ways (lowest id on a tie).

    For a request whose NUMA cells are not placed yet: whether it fits
    depends on the cells the NUMA fitting picks; this is the best case.
    """
    ranked = sorted(domains, key=lambda d: (usage.used_ways(d), d))
    return frozenset(ranked[:count])


def best_nodes(usage: Usage, numa_l3: topology.NumaL3, nodes: Iterable[int],
               count: int) -> frozenset[int]:
    """The L3 domains of the ``count`` NUMA nodes whose fullest L3 domain
    has the most free ways (lowest id on a tie): :func:`best_domains`
    through a NUMA node to L3 map.
    """
    def fullest(node: int) -> int:
        return max((usage.used_ways(d)
                    for d in topology.l3_of(numa_l3, (node,))), default=0)
    ranked = sorted(nodes, key=lambda n: (fullest(n), n))
    return topology.l3_of(numa_l3, ranked[:count])


def check(cap: HostCapacity, usage: Usage, request: Holding,
          domains: AbstractSet[int]) -> str | None:
    """Why ``request`` does not fit, or None when it does.

    ``domains`` are the host's L3 domains (where an unpinned request holds
    ways).  A pinned request holds ways on ``request.domains``, which must
    be among them.
    """
    if request.ways:
        wanted = domains if request.domains is None else request.domains
        if request.domains is not None and not wanted <= domains:
            return ('L3 cache domain(s) %s do not exist (host has %s)'
                    % (_ids(wanted - domains), _ids(domains)))
        for dom in (sorted(wanted) if len(wanted) > 1 else wanted):
            used = usage.used_ways(dom)
            free = ways_left(cap.l3_ways, cap.system_ways, used)
            if free < request.ways:
                return ('%d L3 way(s) requested on cache domain %d, %d free '
                        '(%d ways, %d system, %d used by instances)'
                        % (request.ways, dom, free, cap.l3_ways,
                           cap.system_ways, used))
    if request.pool is not None and cap.pools is not None and \
            request.pool not in cap.pools:
        return ('pool %s is not configured on this host (rdt_pools: %s)'
                % (request.pool, ','.join(sorted(cap.pools)) or 'none'))
    if needs_closid(cap, usage, request) and free_closids(cap, usage) < 1:
        return ('no free CLOSID (%d, %d reserved, %d dedicated, pools in '
                'use: %s)' % (cap.closids, cap.reserved_closids,
                              usage.dedicated,
                              ','.join(sorted(usage.pools)) or 'none'))
    return None


def _ids(domains: Iterable[int]) -> str:
    return ','.join(str(d) for d in sorted(domains)) or 'none'
