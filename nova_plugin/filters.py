"""RDTCacheFilter: schedule instances onto hosts with free L3 cache ways.

Enable with ``[filter_scheduler] available_filters =
nova_plugin.filters.RDTCacheFilter`` and ``enabled_filters`` (after
NUMATopologyFilter).  The arithmetic is :mod:`ovs_rdt.core.capacity`'s, the one
the node allocator uses; capacity comes from aggregate metadata, else from
the ``[ovs_rdt]`` options (:mod:`nova_plugin.opts`).

Every Nova internal it relies on (object storage, HostState, what
``consume_from_request()`` changes, the NUMA fit, loading instances) is
read through :mod:`nova_plugin.adapter`, one function each, tested inside
Nova; this module is the filter class and the accounting.

Usage: the host's instances (their flavors' ``rdt:`` specs and NUMA
cells, parsed once per Instance object; bare stubs are loaded from the
database in one query per host), plus this request's own placements.

Multi-create (``--min-count N``): Nova filters the hosts for instance
``i``, picks one, then consumes it, which raises its placement count
(:func:`adapter.placements`) but does not add the instance to its
instances.  So a pass is tracked per RequestSpec (weakly: it ends with
the request), restarted at index 0, and notes each host's placement count
whenever it looks at it; a rise is instances of this request placed
there, each holding what the request asks, on the NUMA cells Nova fitted
(:func:`adapter.placed_cells`).  Every host seen at index i > 0 passed
this filter at index i - 1, so each placement is seen.  A concurrent
request consuming the same host in between counts as ours (conservative);
a concurrent request refreshing the host from a compute report newer than
our placement resets the count, and loses that placement as it loses
Nova's own RAM and NUMA consumption (doc/nova.md).

A request with NUMA cells is checked on the cells Nova's NUMA fit will
give it (:func:`adapter.numa_fit`): the filter cannot steer that choice,
only refuse it.
"""
from __future__ import annotations

import functools
import threading
import time
import weakref
from typing import Any, Iterable

from oslo_log import log as logging

from nova_plugin import adapter
from nova_plugin import opts
from ovs_rdt.core import capacity
from ovs_rdt.core import topology
from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.inputs import integers, numa_l3 as numa_l3_text, request

LOG = logging.getLogger(__name__)
CONF = adapter.CONF
opts.register_opts(CONF)

#: Aggregate metadata keys (and [ovs_rdt] options), in HostCapacity order.
KEYS = ('rdt_l3_ways', 'rdt_system_ways', 'rdt_closids',
        'rdt_reserved_closids', 'rdt_pools')
#: Aggregate metadata key (and [ovs_rdt] option) of the NUMA node to L3 map
#: (``ovs-rdt provider-config`` prints it); read after KEYS.
NUMA_L3 = 'rdt_numa_l3'
_UNSET = object()
_HOLDING = adapter.private_slot('holding')   # Holding on an Instance
_USAGE = adapter.private_slot('usage')       # (instances, Usage) on a HostState
#: Seconds a holding loaded from the database for a bare instance stub is
#: reused on the same host (only a resize in place changes it there).
LOADED_TTL = 60.0
#: Seconds between two warnings about the same kind of failure.
WARN_INTERVAL = 60.0


class _Pass:
    """One request's scheduling pass (all its instances)."""

    __slots__ = ('request', 'cells', 'error', 'defaults', 'uuids', 'seen',
                 'placed', 'warned', 'numa_l3')

    def __init__(self, spec_obj: Any) -> None:
        self.request: capacity.Holding | None = None
        self.cells = 0
        self.error: str | None = None
        self.defaults: tuple = ()
        self.numa_l3: str | None = None
        self.uuids: set[str] = set()
        self.seen: dict[tuple, int] = {}
        self.placed: dict[tuple, list[capacity.Holding]] = {}
        self.warned = False
        flavor = adapter.request_flavor(spec_obj)
        try:
            spec = request.from_extra_specs(adapter.flavor_extra_specs(flavor))
        except InvalidValue as exc:
            self.error = 'flavor %s: %s' % (adapter.flavor_name(flavor), exc)
            return
        if spec is None or (spec.l3_ways is None and spec.pool is None):
            return
        self.request = capacity.Holding(spec.l3_ways or 0, None, spec.pool)
        self.cells = adapter.request_cells(spec_obj)


class RDTCacheFilter(adapter.IndexedHostFilter):
    """Pass hosts with the L3 cache ways and CLOSID a request needs."""

    RUN_ON_REBUILD = False

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._passes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._loaded: dict[tuple, tuple[float, capacity.Holding | None]] = {}
        self._load_failed_at = -WARN_INTERVAL

    # -- Nova's filter interface ------------------------------------------
    def filter_all(self, filter_obj_list: Iterable, spec_obj: Any) -> list:
        index = self.take_index()
        hosts = list(filter_obj_list)
        if adapter.is_rebuild(spec_obj):
            return hosts
        rdt_pass = self._start(spec_obj, index)
        if rdt_pass is None:
            return []
        if rdt_pass.request is None and rdt_pass.error is None:
            return hosts
        fits = self._host_fits
        passed = []
        for host_state in hosts:
            try:
                if fits(host_state, spec_obj, rdt_pass):
                    passed.append(host_state)
            except Exception:
                _unexpected(host_state, rdt_pass)
        return passed

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        """Whether the host has the cache the request needs; never raises."""
        rdt_pass = self._start(spec_obj, None)
        if rdt_pass is None:
            return False
        if rdt_pass.request is None and rdt_pass.error is None:
            return True
        try:
            return self._host_fits(host_state, spec_obj, rdt_pass)
        except Exception:
            _unexpected(host_state, rdt_pass)
            return False

    # -- the pass ---------------------------------------------------------
    def _start(self, spec_obj: Any, index: int | None) -> _Pass | None:
        """The pass of ``spec_obj`` (a new one at index 0); None: broken."""
        try:
            key = adapter.request_key(spec_obj)
            with self._lock:
                rdt_pass = self._passes.get(key)
                if rdt_pass is None or index == 0:
                    rdt_pass = self._passes[key] = _Pass(spec_obj)
            group = CONF.ovs_rdt
            rdt_pass.defaults = tuple(
                tuple(group[k]) if k == 'rdt_pools' and group[k] is not None
                else group[k] for k in KEYS)
            rdt_pass.numa_l3 = group[NUMA_L3]
            uuid = adapter.request_instance_uuid(spec_obj)
            if uuid:
                rdt_pass.uuids.add(uuid)
        except Exception:
            LOG.warning('RDTCacheFilter cannot read the request %(spec)s, '
                        'failing every host', {'spec': spec_obj},
                        exc_info=True)
            return None
        return rdt_pass

    def _host_fits(self, host_state: Any, spec_obj: Any,
                   rdt_pass: _Pass) -> bool:
        if rdt_pass.error is not None:
            LOG.debug('%(host_state)s fails RDT cache requirements: '
                      '%(error)s', {'host_state': host_state,
                                    'error': rdt_pass.error})
            return False
        raw = adapter.aggregate_metadata(host_state, (*KEYS, NUMA_L3))
        cap = _capacity(raw, rdt_pass.defaults)
        if cap is None:
            LOG.debug('%(host_state)s fails RDT cache requirements: no cache '
                      'capacity known (aggregate metadata or [ovs_rdt] '
                      'rdt_l3_ways and rdt_closids)',
                      {'host_state': host_state})
            return False
        numa_l3 = _numa_l3(tuple(r[-1] for r in raw), rdt_pass.numa_l3)
        usage = self._usage(host_state, spec_obj, rdt_pass, numa_l3)
        if usage is None:
            LOG.debug('%(host_state)s fails RDT cache requirements: the '
                      'flavors of its instances could not be loaded',
                      {'host_state': host_state})
            return False
        nodes = adapter.host_domains(host_state)
        if numa_l3 is None:     # node id == L3 id
            domains = nodes = nodes or usage.domains() | {0}
        else:
            domains = topology.domains(numa_l3)
            nodes = nodes or frozenset(numa_l3)
        request = rdt_pass.request
        assert request is not None
        if request.ways and rdt_pass.cells:
            if rdt_pass.cells > len(nodes):
                LOG.debug('%(host_state)s fails RDT cache requirements: %(n)d '
                          'NUMA cells, %(d)d %(what)s',
                          {'host_state': host_state, 'n': rdt_pass.cells,
                           'd': len(nodes), 'what': 'L3 cache domains'
                           if numa_l3 is None else 'NUMA nodes'})
                return False
            request = request._replace(domains=_request_domains(
                host_state, spec_obj, cap, usage, nodes, rdt_pass.cells,
                numa_l3))
        reason = capacity.check(cap, usage, request, domains)
        if reason is not None:
            LOG.debug('%(host_state)s fails RDT cache requirements: '
                      '%(reason)s', {'host_state': host_state,
                                     'reason': reason})
            return False
        return True

    # -- usage --------------------------------------------------------------
    def _usage(self, host_state: Any, spec_obj: Any, rdt_pass: _Pass,
               numa_l3: topology.NumaL3 | None = None
               ) -> capacity.Usage | None:
        """What the host's instances hold, plus this pass's placements.

        None when the instances' flavors could not be loaded.  Holdings
        name NUMA cells; ``numa_l3`` maps them to L3 domains.
        """
        instances = adapter.host_instances(host_state)
        usage = self._instances_usage(host_state, instances, numa_l3)
        if usage is None:
            return None
        own = [instances[u] for u in rdt_pass.uuids if u in instances]
        key = adapter.host_key(host_state)
        placed = rdt_pass.placed.get(key, ())
        count = adapter.placements(host_state)
        new = count - rdt_pass.seen.setdefault(key, count)
        rdt_pass.seen[key] = count
        if new > 0:
            holding = rdt_pass.request
            assert holding is not None
            cells = adapter.placed_cells(spec_obj) if holding.ways else None
            if cells is not None:
                holding = holding._replace(domains=cells)
            placed = rdt_pass.placed[key] = [*placed, *[holding] * new]
        if not own and not placed:
            return usage
        usage = usage.copy()
        for inst in own:  # a moved instance's old allocation goes away
            held = self._holding(inst)
            if held is not None:
                usage.add(held, -1)
        for held in placed:
            usage.add(held)
        return usage

    def _instances_usage(self, host_state: Any, instances: dict,
                         numa_l3: topology.NumaL3 | None = None
                         ) -> capacity.Usage | None:
        """Sum of the host's instances, cached while they are the same objects.

        None when bare stubs could not be loaded: counting them as holding
        nothing could over-commit the host.
        """
        current = tuple(instances.values())
        cached = adapter.cached(host_state, _USAGE)
        if cached is not None and adapter.same_instances(cached[0], current) \
                and cached[1].numa_l3 is numa_l3:
            return cached[1]
        usage = capacity.Usage(numa_l3)
        stubs = []
        for inst in current:
            held = adapter.cached(inst, _HOLDING, _UNSET)
            if held is _UNSET:
                if adapter.is_loadable_stub(inst):
                    stubs.append(inst)
                    continue
                held = self._holding(inst)
            if held is not None:
                usage.add(held)
        if stubs:
            if not self._load(stubs, adapter.host_key(host_state)):
                return None
            for inst in stubs:
                held = adapter.cached(inst, _HOLDING)
                if held is not None:
                    usage.add(held)
        adapter.cache(host_state, _USAGE, (current, usage))
        return usage

    def _holding(self, inst: Any) -> capacity.Holding | None:
        """What an instance holds, parsed once per Instance object."""
        held: Any = adapter.cached(inst, _HOLDING, _UNSET)
        if held is _UNSET:
            # no flavor: a stub of this request, or its flavor not loaded
            loaded = adapter.instance_loaded(inst)
            held = None if loaded is None else _holding_of(inst.uuid, *loaded)
            adapter.cache(inst, _HOLDING, held)
        return held

    def _load(self, stubs: list, host: tuple) -> bool:
        """Load the flavors of bare Instance stubs, in one query.

        Computes that do not report their instances leave such stubs
        (``[filter_scheduler] track_instance_changes``).  What was loaded
        is reused for LOADED_TTL seconds on the same host (an instance
        that moved has other NUMA cells).  False when the query failed.
        """
        now = time.monotonic()
        loaded = self._loaded
        todo = []
        for inst in stubs:
            hit = loaded.get((inst.uuid, host))
            if hit is not None and hit[0] > now:
                adapter.cache(inst, _HOLDING, hit[1])
            else:
                todo.append(inst)
        if not todo:
            return True
        try:
            found = adapter.load_instances(todo)
        except Exception as exc:
            if now - self._load_failed_at >= WARN_INTERVAL:
                self._load_failed_at = now
                LOG.warning('RDTCacheFilter could not load the flavors of '
                            'the instances on %(host)s (hosts with instances '
                            'it cannot load fail RDT requests): %(error)s',
                            {'host': host[0], 'error': exc})
            return False
        held = {uuid: _holding_of(uuid, *(adapter.instance_loaded(i)
                                          or (None, None)))
                for uuid, i in found.items()}
        if len(loaded) > 100000:
            loaded = self._loaded = {k: v for k, v in loaded.items()
                                     if v[0] > now}
        for inst in todo:
            adapter.cache(inst, _HOLDING, held.get(inst.uuid))
            loaded[(inst.uuid, host)] = (now + LOADED_TTL,
                                         held.get(inst.uuid))
        return True


def _request_domains(host_state: Any, spec_obj: Any,
                     cap: capacity.HostCapacity, usage: capacity.Usage,
                     domains: frozenset[int], cells: int,
                     numa_l3: topology.NumaL3 | None = None
                     ) -> frozenset[int]:
    """The L3 domains a request with NUMA cells will get on this host.

    The NUMA cells Nova will pick (NUMATopologyFilter's limits, so list
    RDTCacheFilter after it), mapped to their L3 domains by ``numa_l3``
    (``domains`` are then the host's NUMA nodes).  When that fit fails
    (NUMATopologyFilter rejects the host anyway) or cannot be computed,
    the best case.
    """
    try:
        fitted = adapter.numa_fit(host_state, spec_obj)
    except Exception as exc:
        LOG.debug('%(host_state)s: NUMA fit for the RDT check failed: '
                  '%(error)s', {'host_state': host_state, 'error': exc})
        fitted = None
    if numa_l3 is not None:
        return topology.l3_of(numa_l3, fitted) if fitted is not None else \
            capacity.best_nodes(usage, numa_l3, domains, cells)
    if fitted is not None:
        return fitted
    return capacity.best_domains(cap, usage, domains, cells)


def _unexpected(host_state: Any, rdt_pass: _Pass) -> None:
    """A bug: one warning with the traceback per request, debug lines after."""
    if rdt_pass.warned:
        LOG.debug('%(host_state)s fails RDT cache requirements: unexpected '
                  'error', {'host_state': host_state}, exc_info=True)
        return
    rdt_pass.warned = True
    LOG.warning('%(host_state)s fails RDT cache requirements: unexpected '
                'error (further hosts of this request: debug)',
                {'host_state': host_state}, exc_info=True)


def _holding_of(uuid: str, flavor: Any,
                cells: frozenset[int] | None) -> capacity.Holding | None:
    """What an instance holds; malformed specs (or no flavor): nothing."""
    if flavor is None:
        return None
    try:
        spec = request.from_extra_specs(adapter.flavor_extra_specs(flavor),
                                        strict=False)
    except InvalidValue as exc:
        LOG.warning('Instance %(uuid)s counted as holding no cache ways: its '
                    'flavor %(flavor)s has invalid extra specs: %(error)s',
                    {'uuid': uuid, 'flavor': adapter.flavor_name(flavor),
                     'error': exc})
        return None
    if spec is None:
        return None
    if spec.pool is not None:
        return capacity.Holding(0, None, spec.pool)
    if spec.l3_ways is None:
        return None
    return capacity.Holding(spec.l3_ways, cells)


@functools.lru_cache(maxsize=1024)
def _capacity(aggregates: tuple, defaults: tuple) -> capacity.HostCapacity | None:
    """HostCapacity from aggregates' raw metadata values, else the defaults.

    Several aggregates: the smallest capacity, the largest reservation, the
    pools every one of them lists.  Cached: bad values warn once.
    """
    merged: list[Any] = [None] * len(KEYS)
    for raw in aggregates:
        for i, (key, value) in enumerate(zip(KEYS, raw)):
            if value is None:
                continue
            parsed = _parse(key, value)
            if parsed is None:
                continue
            old = merged[i]
            if old is None:
                merged[i] = parsed
            elif key == 'rdt_pools':
                merged[i] = old & parsed
            elif key in ('rdt_l3_ways', 'rdt_closids'):
                merged[i] = min(old, parsed)
            else:
                merged[i] = max(old, parsed)
    for i, default in enumerate(defaults):
        if merged[i] is None and default is not None:
            merged[i] = frozenset(default) if KEYS[i] == 'rdt_pools' \
                else default
    l3_ways, system_ways, closids, reserved, pools = merged
    if l3_ways is None or closids is None:
        return None
    return capacity.HostCapacity(l3_ways, system_ways or 0, closids,
                                 reserved or 0, pools)


@functools.lru_cache(maxsize=256)
def _numa_l3(aggregates: tuple, default: str | None
             ) -> dict[int, frozenset[int]] | None:
    """The NUMA node to L3 map from aggregates' ``rdt_numa_l3``, else the
    ``[ovs_rdt]`` default; None: neither (node id == L3 id).

    Several aggregates: per node, the L3 domains any of them lists (holding
    ways on more domains never over-commits).  Cached (one object per text,
    which the usage cache compares by identity): a bad value warns once and
    is ignored.
    """
    merged: dict[int, frozenset[int]] | None = None
    for value in aggregates:
        if value is None:
            continue
        try:
            parsed = numa_l3_text.parse(value, NUMA_L3)
        except InvalidValue as exc:
            LOG.warning('Ignoring aggregate metadata: %(error)s',
                        {'error': exc})
            continue
        if merged is None:
            merged = parsed
        else:
            for node, l3s in parsed.items():
                merged[node] = merged.get(node, frozenset()) | l3s
    if merged is None and default is not None:
        merged = numa_l3_text.parse(default, '[ovs_rdt] ' + NUMA_L3)
    return merged


def _parse(key: str, value: str) -> Any:
    if key == 'rdt_pools':
        return frozenset(p.strip() for p in value.split(',') if p.strip())
    number = integers.whole(value)
    if number is not None and number <= integers.MAX:
        return number
    LOG.warning('Ignoring aggregate metadata %(key)s=%(value)r: not a whole '
                'number', {'key': key, 'value': value})
    return None
