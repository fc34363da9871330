"""RDTCacheFilter: schedule instances onto hosts with free L3 cache ways.

Enable with ``[filter_scheduler] available_filters =
nova_plugin.filters.RDTCacheFilter`` and ``enabled_filters`` (after
NUMATopologyFilter).  The filter owns its ledger (where the cell
databases and Placement have instances, :mod:`nova_plugin.ledger`) and
its passes (what each request placed so far, :mod:`nova_plugin.passes`);
per host it sums what the instances hold (:mod:`nova_plugin.usage`) on
the host's capacity and NUMA node to L3 map
(:mod:`nova_plugin.aggregates`) and checks the request with
:mod:`ovs_rdt.core.capacity` (the node allocator's arithmetic).  Nova is
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
from nova_plugin import ledger as instance_ledger
from nova_plugin import opts
from nova_plugin import passes
from nova_plugin import throttle
from nova_plugin import usage
from ovs_rdt.core import capacity
from ovs_rdt.core import topology
from ovs_rdt.exceptions import InvalidValue

LOG = logging.getLogger(__name__)
CONF = adapter.CONF
opts.register_opts(CONF)
#: Key of a failed look-up in Placement among a call's read failures:
#: every host fails.
_PLACEMENT = object()


class RDTCacheFilter(adapter.IndexedHostFilter):
    """Pass hosts with the L3 cache ways and CLOSID a request needs."""

    RUN_ON_REBUILD = False

    def __init__(self) -> None:
        super().__init__()
        self.ledger = instance_ledger.Ledger(adapter, self._holding_of)
        """Where the database and Placement have instances
        (:class:`nova_plugin.ledger.Ledger`).
        """
        self._passes = passes.Passes()
        self._read_failed = throttle.Throttle()

    def filter_all(self, filter_obj_list: Iterable, spec_obj: Any) -> list:
        return self._filter(list(filter_obj_list), spec_obj,
                            self.take_index(), True)

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        """Whether the host has the cache the request needs; never raises.

        Not a scheduling pass: the instance is not counted as in flight.
        """
        return bool(self._filter([host_state], spec_obj, None, False))

    def _filter(self, hosts: list, spec_obj: Any, index: int | None,
                schedule: bool) -> list:
        """The hosts that pass; ``schedule``: the request's instance is in
        flight for the other requests from now on (:meth:`Ledger.expect`).
        """
        rdt_pass = self._start(spec_obj, index)
        if rdt_pass is None:
            return []
        if rdt_pass.request is None and rdt_pass.error is None:
            return hosts
        context = adapter.request_context(spec_obj)
        asked = rdt_pass.request
        uuid = adapter.request_instance_uuid(spec_obj) \
            if schedule and context is not None and asked is not None \
            else None
        order = self.ledger.expect(uuid, asked, rdt_pass.seq) \
            if uuid and asked is not None else None
        passed: list = []
        try:
            unread = self._read(hosts, context, rdt_pass) \
                if context is not None else {}
            in_flight = self.ledger.in_flight(rdt_pass.seq, order)
            passed = [h for h in hosts if self._passes_host(
                h, spec_obj, rdt_pass, unread, in_flight)]
        finally:
            if uuid:
                self.ledger.passed(uuid, map(adapter.host_key, passed))
        return passed

    def _holding_of(self, uuid: str, flavor: Any,
                    cells: frozenset[int] | None) -> capacity.Holding | None:
        """What an instance of ``flavor`` holds on ``cells``."""
        return usage.flavor_holding(adapter, uuid, flavor, cells,
                                    CONF.ovs_rdt.rdt_l3_way_kib)

    def _start(self, spec_obj: Any, index: int | None) -> passes.Pass | None:
        """The pass of ``spec_obj`` (a new one at index 0); None: broken."""
        try:
            if adapter.is_rebuild(spec_obj):
                return passes.Pass()     # asks nothing: every host passes
            rdt_pass = self._passes.start(
                adapter.request_key(spec_obj), index,
                functools.partial(_new_pass, spec_obj))
            rdt_pass.defaults = aggregates.defaults(CONF.ovs_rdt)
            rdt_pass.numa_l3 = CONF.ovs_rdt[aggregates.NUMA_L3]
            rdt_pass.add_instance(adapter.request_instance_uuid(spec_obj))
        except Exception:
            LOG.warning('RDTCacheFilter cannot read the request %(spec)s, '
                        'failing every host', {'spec': spec_obj},
                        exc_info=True)
            return None
        return rdt_pass

    def _read(self, hosts: list, context: Any,
              rdt_pass: passes.Pass) -> dict[Any, str]:
        """Let the ledger read what changed in the hosts' cells and look
        up in Placement the instances other requests are scheduling.

        Returns why a read failed: per cell (its hosts fail), or under
        ``_PLACEMENT`` (every host fails); warned about once a minute.
        Never raises.
        """
        by_cell: dict[Any, list] = {}
        providers = {}
        for host_state in hosts:
            key = adapter.host_key(host_state)
            by_cell.setdefault(adapter.host_cell(host_state), []).append(key)
            providers[adapter.host_provider(host_state)] = key
        unread = {}
        for cell, keys in by_cell.items():
            why = self._try('the instance changes of its cell could not be '
                            'read', self.ledger.refresh, context, cell, keys)
            if why:
                unread[cell] = why
        why = self._try('the instances other requests are scheduling could '
                        'not be looked up in Placement', self.ledger.look_up,
                        context, providers, rdt_pass.seq)
        if why:
            unread[_PLACEMENT] = why
        return unread

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
                     rdt_pass: passes.Pass, unread: dict[Any, str],
                     in_flight: list) -> bool:
        """One debug line when it does not; never raises."""
        try:
            reason = self._why_not(host_state, spec_obj, rdt_pass, unread,
                                   in_flight)
            if reason is None:
                return True
            LOG.debug('%(host_state)s fails RDT cache requirements: '
                      '%(reason)s', {'host_state': host_state,
                                     'reason': reason})
        except Exception:
            _unexpected(host_state, rdt_pass)
        return False

    def _why_not(self, host_state: Any, spec_obj: Any,
                 rdt_pass: passes.Pass, unread: dict[Any, str],
                 in_flight: list) -> str | None:
        """Why the host cannot take the request; None: it can."""
        if rdt_pass.error is not None:
            return rdt_pass.error
        unread_here = unread.get(_PLACEMENT) or unread.get(
            adapter.host_cell(host_state)) if unread else None
        if unread_here:
            return unread_here
        raw = adapter.aggregate_metadata(host_state, aggregates.METADATA)
        cap = aggregates.host_capacity(raw, rdt_pass.defaults)
        if cap is None:
            return ('no cache capacity known (aggregate metadata or '
                    '[ovs_rdt] rdt_l3_ways and rdt_closids)')
        numa_l3 = aggregates.host_numa_l3(tuple(r[-1] for r in raw),
                                          rdt_pass.numa_l3)
        instances = adapter.host_instances(host_state)
        host_usage = usage.of_host(adapter, self.ledger, host_state,
                                   instances, numa_l3, self._holding_of,
                                   self._read_stubs)
        if host_usage is None:
            return 'the flavors of its instances could not be loaded'
        host = adapter.host_key(host_state)
        request = rdt_pass.request
        assert request is not None
        new = rdt_pass.newly_consumed(host, adapter.num_consumed(host_state))
        if new:
            rdt_pass.place(host, new, adapter.placed_cells(spec_obj)
                           if request.ways else None)
        host_usage = rdt_pass.host_usage(
            host_usage, host, functools.partial(
                usage.holdings_on, adapter, self.ledger, host, instances,
                holding_of=self._holding_of),
            [held for hosts, held in in_flight
             if hosts is None or host in hosts] if in_flight else ())
        domains, nodes = aggregates.domains_and_nodes(
            numa_l3, adapter.host_domains(host_state), host_usage)
        if request.ways and rdt_pass.cells:
            if rdt_pass.cells > len(nodes):
                return '%d NUMA cells, %d %s' % (
                    rdt_pass.cells, len(nodes), 'L3 cache domains'
                    if numa_l3 is None else 'NUMA nodes')
            request = request._replace(domains=_request_domains(
                host_state, spec_obj, cap, host_usage, nodes, rdt_pass.cells,
                numa_l3))
        return capacity.check(cap, host_usage, request, domains)

    def _read_stubs(self, context: Any, uuids: list[str]) -> bool:
        """Let the ledger read a host's bare instance stubs (one query);
        False when that failed (warned about once a minute).
        """
        return self._try('the flavors of a host\'s instances could not be '
                         'loaded', self.ledger.load, context, uuids) is None


def _new_pass(spec_obj: Any) -> passes.Pass:
    """The pass of a request seen first (or again at index 0): what each
    of its instances asks for; malformed specs (or a size that cannot be
    counted): an ``error`` naming the flavor.
    """
    flavor = adapter.request_flavor(spec_obj)
    try:
        holding = usage.spec_holding(adapter.flavor_extra_specs(flavor),
                                     CONF.ovs_rdt.rdt_l3_way_kib)
    except InvalidValue as exc:
        return passes.Pass(error='flavor %s: %s'
                           % (adapter.flavor_name(flavor), exc))
    if holding is None:
        return passes.Pass()
    return passes.Pass(holding, adapter.request_cells(spec_obj))


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
