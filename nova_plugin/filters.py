"""RDTCacheFilter: schedule instances onto hosts with free L3 cache ways.

Enable with ``[filter_scheduler] available_filters =
nova_plugin.filters.RDTCacheFilter`` and ``enabled_filters`` (after
NUMATopologyFilter).  The filter class and its glue: the host's capacity
and NUMA node to L3 map (:mod:`nova_plugin.aggregates`), what its
instances hold (:mod:`nova_plugin.usage`), what this request placed there
so far (:mod:`nova_plugin.passes`), checked with
:mod:`ovs_rdt.core.capacity` (the node allocator's arithmetic); Nova is
read only through :mod:`nova_plugin.adapter`.  A request with NUMA cells
is checked on the cells Nova's NUMA fit will give it
(:func:`adapter.numa_fit`), on their L3 domains.
"""
from __future__ import annotations

import functools
import time
from typing import Any, Iterable

from oslo_log import log as logging

from nova_plugin import adapter
from nova_plugin import aggregates
from nova_plugin import opts
from nova_plugin import passes
from nova_plugin import throttle
from nova_plugin import usage as instance_usage
from ovs_rdt.core import capacity
from ovs_rdt.core import topology

LOG = logging.getLogger(__name__)
CONF = adapter.CONF
opts.register_opts(CONF)


class RDTCacheFilter(adapter.IndexedHostFilter):
    """Pass hosts with the L3 cache ways and CLOSID a request needs."""

    RUN_ON_REBUILD = False

    def __init__(self) -> None:
        super().__init__()
        self._passes = passes.Passes()
        self._usage = instance_usage.InstanceUsage(
            adapter, lambda: CONF.ovs_rdt.rdt_l3_way_kib)
        self._read_failed = throttle.Throttle()

    @property
    def ledger(self) -> Any:
        """Where the filter counts instances that changed
        (:class:`nova_plugin.ledger.Ledger`).
        """
        return self._usage.ledger

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
        self._read(hosts, spec_obj, rdt_pass)
        passed = [h for h in hosts
                  if self._passes_host(h, spec_obj, rdt_pass)]
        uuid = adapter.request_instance_uuid(spec_obj)
        if uuid and rdt_pass.seq:
            self._usage.ledger.passed(uuid, passed)
        return passed

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        """Whether the host has the cache the request needs; never raises."""
        rdt_pass = self._start(spec_obj, None)
        if rdt_pass is None:
            return False
        if rdt_pass.request is None and rdt_pass.error is None:
            return True
        self._read([host_state], spec_obj, rdt_pass)
        return self._passes_host(host_state, spec_obj, rdt_pass)

    def _start(self, spec_obj: Any, index: int | None) -> passes.Pass | None:
        """The pass of ``spec_obj`` (a new one at index 0); None: broken."""
        try:
            rdt_pass = self._passes.start(
                adapter.request_key(spec_obj), index,
                functools.partial(_new_pass, spec_obj))
            rdt_pass.defaults = aggregates.defaults(CONF.ovs_rdt)
            rdt_pass.numa_l3 = CONF.ovs_rdt[aggregates.NUMA_L3]
            uuid = adapter.request_instance_uuid(spec_obj)
            rdt_pass.add_instance(uuid)
            if uuid and rdt_pass.request is not None and \
                    adapter.request_context(spec_obj) is not None:
                seq = self._usage.ledger.expect(
                    uuid, rdt_pass.request, spec_obj,
                    adapter.request_num_instances(spec_obj))
                rdt_pass.seq = rdt_pass.seq or seq
        except Exception:
            LOG.warning('RDTCacheFilter cannot read the request %(spec)s, '
                        'failing every host', {'spec': spec_obj},
                        exc_info=True)
            return None
        return rdt_pass

    def _read(self, hosts: list, spec_obj: Any,
              rdt_pass: passes.Pass) -> None:
        """Let the ledger read what changed in the hosts' cells, once per
        pass and cell, and look up the instances other requests placed; a
        failure is noted on the pass (the hosts fail) and warned about
        once a minute.  Never raises.
        """
        context = adapter.request_context(spec_obj)
        if context is None:
            return
        ledger = self._usage.ledger
        by_cell: dict[Any, list] = {}
        providers = {}
        for host_state in hosts:
            key = adapter.host_key(host_state)
            by_cell.setdefault(adapter.host_cell(host_state), []).append(key)
            providers[adapter.host_provider(host_state)] = key
        for cell, keys in by_cell.items():
            if cell in rdt_pass.read:
                continue
            rdt_pass.read[cell] = self._try(
                'the instance changes of its cell could not be read',
                ledger.refresh, context, cell, keys)
        if not rdt_pass.settled:
            rdt_pass.settled = True
            why = self._try('the instances other requests placed could not '
                            'be looked up in Placement', ledger.settle,
                            context, providers, rdt_pass.uuids, rdt_pass.seq)
            rdt_pass.unsettled = why

    def _try(self, why: str, call: Any, *args: Any) -> str | None:
        """``call(*args)``; ``why`` when it raised (warned about once a
        minute).
        """
        try:
            call(*args)
        except Exception as exc:
            if self._read_failed.due(time.monotonic()):
                LOG.warning('RDTCacheFilter: %(why)s (hosts fail RDT '
                            'requests meanwhile): %(error)s',
                            {'why': why, 'error': exc})
            return why
        return None

    def _passes_host(self, host_state: Any, spec_obj: Any,
                     rdt_pass: passes.Pass) -> bool:
        """One debug line when it does not; never raises."""
        try:
            reason = self._why_not(host_state, spec_obj, rdt_pass)
            if reason is None:
                return True
            LOG.debug('%(host_state)s fails RDT cache requirements: '
                      '%(reason)s', {'host_state': host_state,
                                     'reason': reason})
        except Exception:
            _unexpected(host_state, rdt_pass)
        return False

    def _why_not(self, host_state: Any, spec_obj: Any,
                 rdt_pass: passes.Pass) -> str | None:
        """Why the host cannot take the request; None: it can."""
        if rdt_pass.error is not None:
            return rdt_pass.error
        unread = rdt_pass.unsettled or (
            rdt_pass.read and rdt_pass.read.get(adapter.host_cell(host_state)))
        if unread:
            return unread
        raw = adapter.aggregate_metadata(host_state, aggregates.METADATA)
        cap = aggregates.host_capacity(raw, rdt_pass.defaults)
        if cap is None:
            return ('no cache capacity known (aggregate metadata or '
                    '[ovs_rdt] rdt_l3_ways and rdt_closids)')
        numa_l3 = aggregates.host_numa_l3(tuple(r[-1] for r in raw),
                                          rdt_pass.numa_l3)
        instances = adapter.host_instances(host_state)
        usage = self._usage.of_host(host_state, instances, numa_l3)
        if usage is None:
            return 'the flavors of its instances could not be loaded'
        host = adapter.host_key(host_state)
        request = rdt_pass.request
        assert request is not None
        new = rdt_pass.new_placements(host, adapter.placements(host_state))
        if new:
            rdt_pass.place(host, new, adapter.placed_cells(spec_obj)
                           if request.ways else None)
        usage = rdt_pass.host_usage(usage, host, functools.partial(
            self._usage.holdings_on, host, instances))
        domains, nodes = aggregates.domains_and_nodes(
            numa_l3, adapter.host_domains(host_state), usage)
        if request.ways and rdt_pass.cells:
            if rdt_pass.cells > len(nodes):
                return '%d NUMA cells, %d %s' % (
                    rdt_pass.cells, len(nodes), 'L3 cache domains'
                    if numa_l3 is None else 'NUMA nodes')
            request = request._replace(domains=_request_domains(
                host_state, spec_obj, cap, usage, nodes, rdt_pass.cells,
                numa_l3))
        return capacity.check(cap, usage, request, domains)


def _new_pass(spec_obj: Any) -> passes.Pass:
    """The pass of a request seen first (or again at index 0)."""
    flavor = adapter.request_flavor(spec_obj)
    return passes.Pass.of_request(adapter.flavor_extra_specs(flavor),
                                  adapter.flavor_name(flavor),
                                  adapter.request_cells(spec_obj),
                                  CONF.ovs_rdt.rdt_l3_way_kib)


def _request_domains(host_state: Any, spec_obj: Any,
                     cap: capacity.HostCapacity, usage: capacity.Usage,
                     nodes: frozenset[int], cells: int,
                     numa_l3: topology.NumaL3 | None) -> frozenset[int]:
    """The L3 domains of the NUMA cells Nova will pick on this host.

    NUMATopologyFilter's limits (list RDTCacheFilter after it); when that
    fit fails (that filter rejects the host) or cannot be computed, the
    best ``cells`` of the host's NUMA ``nodes``.
    """
    try:
        fitted = adapter.numa_fit(host_state, spec_obj)
    except Exception as exc:
        LOG.debug('%(host_state)s: NUMA fit for the RDT check failed: '
                  '%(error)s', {'host_state': host_state, 'error': exc})
        fitted = None
    if numa_l3 is not None:
        return topology.l3_of(numa_l3, fitted) if fitted is not None else \
            capacity.best_nodes(usage, numa_l3, nodes, cells)
    if fitted is not None:
        return fitted
    return capacity.best_domains(cap, usage, nodes, cells)


def _unexpected(host_state: Any, rdt_pass: passes.Pass) -> None:
    """A bug: one warning with the traceback per request, debug lines after."""
    if rdt_pass.warned:
        LOG.debug('%(host_state)s fails RDT cache requirements: unexpected '
                  'error', {'host_state': host_state}, exc_info=True)
        return
    rdt_pass.warned = True
    LOG.warning('%(host_state)s fails RDT cache requirements: unexpected '
                'error (further hosts of this request: debug)',
                {'host_state': host_state}, exc_info=True)
