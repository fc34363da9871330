"""What the instances on a host hold, cached.

Per instance: its flavor's ``rdt:`` specs and NUMA cells, parsed once
per Instance object (kept on it).  Per host: their sum on its L3 domains
(the host's NUMA node to L3 map), kept on the HostState while it holds
the same Instance objects and map and the ledger has not changed.  Bare
instance stubs (computes that do not report their instances, see
``[filter_scheduler] track_instance_changes``) are loaded from the
database in one query per host, and what was loaded is reused on that
host for LOADED_TTL seconds.

Instances the :class:`~nova_plugin.ledger.Ledger` has seen change in the
database are counted where it places them, not where the scheduler's view
(``HostState.instances``) has them (it lags and errs around moves; see
:mod:`nova_plugin.ledger`); the others as the view has them.  So a holding
loaded for a stub is only reused for an instance that has not changed
since the ledger started.

Nova-free: every Nova object is read through the adapter it is given
(:mod:`nova_plugin.adapter`; unit tests give a fake).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

from nova_plugin import ledger as instance_ledger
from nova_plugin import throttle
from ovs_rdt.core import capacity
from ovs_rdt.core import topology
from ovs_rdt.core.ways import ways_holding
from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.inputs import request

LOG = logging.getLogger(__name__)
#: Seconds a holding loaded from the database for a bare instance stub is
#: reused on the same host (an instance that changed meanwhile is the
#: ledger's, which does not reuse it).
LOADED_TTL = 60.0
#: Loaded holdings kept before the expired ones are dropped.
LOADED_MAX = 100000
_UNSET = object()


class InstanceUsage:
    """What the instances on each host hold, read through ``nova``.

    ``nova``: :mod:`nova_plugin.adapter` (its ``host_instances``-style
    readers, ``cached``/``cache``/``private_slot``, ``load_instances``).
    """

    def __init__(self, nova: Any,
                 way_kib: Callable[[], int | None] = lambda: None) -> None:
        self._nova = nova
        #: ``[ovs_rdt] rdt_l3_way_kib`` now (see :func:`holding_of`).
        self.way_kib = way_kib
        self._holding_slot = nova.private_slot('holding')  # on an Instance
        self._usage_slot = nova.private_slot('usage')  # on a HostState
        self._loaded: dict[tuple, tuple[float, capacity.Holding | None]] = {}
        self._load_failed = throttle.Throttle()
        self.ledger = instance_ledger.Ledger(nova, self._holding_of)

    def of_host(self, host_state: Any, instances: dict,
                numa_l3: topology.NumaL3 | None = None
                ) -> capacity.Usage | None:
        """Sum of the host's instances, cached while they are the same objects.

        ``instances``: the host's (uuid -> Instance).  Holdings name NUMA
        cells; ``numa_l3`` maps them to L3 domains (None: node id == L3
        id), compared by identity: the cached sum is recounted when the
        host's map is another object
        (:func:`nova_plugin.aggregates.host_numa_l3` gives one per text).
        Never changed by the caller: shared.  None when bare stubs could
        not be loaded: counting them as holding nothing could over-commit
        the host.
        """
        nova = self._nova
        ledger = self.ledger
        current = tuple(instances.values())
        version = ledger.version
        cached = nova.cached(host_state, self._usage_slot)
        if cached is not None and nova.same_instances(cached[0], current) \
                and cached[1].numa_l3 is numa_l3 and cached[2] == version:
            return cached[1]
        host = nova.host_key(host_state)
        usage = capacity.Usage(numa_l3)
        for held_list in ledger.on_host(host).values():
            for holding in held_list:
                usage.add(holding)
        stubs = []
        for inst in current:
            if ledger.tracks(inst.uuid):
                continue
            held = nova.cached(inst, self._holding_slot, _UNSET)
            if held is _UNSET:
                if nova.is_loadable_stub(inst):
                    stubs.append(inst)
                    continue
                held = self.holding(inst)
            if held is not None:
                usage.add(held)
        if stubs:
            if not self._load(stubs, host):
                return None
            for inst in stubs:
                held = nova.cached(inst, self._holding_slot)
                if held is not None:
                    usage.add(held)
        nova.cache(host_state, self._usage_slot, (current, usage, version))
        return usage

    def holdings_on(self, host: tuple, instances: dict,
                    uuid: str) -> list[capacity.Holding]:
        """What instance ``uuid`` holds on ``host`` (``instances``: the
        host's view), as :meth:`of_host` counted it.
        """
        held_there = self.ledger.on_host(host).get(uuid)
        if held_there is not None or self.ledger.tracks(uuid):
            return list(held_there or ())
        inst = instances.get(uuid)
        held = None if inst is None else self.holding(inst)
        return [] if held is None else [held]

    def holding(self, inst: Any) -> capacity.Holding | None:
        """What an instance holds, parsed once per Instance object."""
        nova = self._nova
        held: Any = nova.cached(inst, self._holding_slot, _UNSET)
        if held is _UNSET:
            # no flavor: a stub of this request, or its flavor not loaded
            loaded = nova.instance_loaded(inst)
            held = None if loaded is None \
                else self._holding_of(inst.uuid, *loaded)
            nova.cache(inst, self._holding_slot, held)
        return held

    def _load(self, stubs: list, host: tuple) -> bool:
        """Load the flavors of bare Instance stubs, in one query.

        What was loaded is reused for LOADED_TTL seconds on the same host
        (an instance that moved has other NUMA cells).  False when the
        query failed.
        """
        nova = self._nova
        now = time.monotonic()
        loaded = self._loaded
        todo = []
        for inst in stubs:
            hit = loaded.get((inst.uuid, host))
            if hit is not None and hit[0] > now:
                nova.cache(inst, self._holding_slot, hit[1])
            else:
                todo.append(inst)
        if not todo:
            return True
        try:
            found = nova.load_instances(todo)
        except Exception as exc:
            if self._load_failed.due(now):
                LOG.warning('RDTCacheFilter could not load the flavors of '
                            'the instances on %(host)s (hosts with instances '
                            'it cannot load fail RDT requests): %(error)s',
                            {'host': host[0], 'error': exc})
            return False
        held = {uuid: self._holding_of(uuid, *(nova.instance_loaded(i)
                                               or (None, None)))
                for uuid, i in found.items()}
        if len(loaded) > LOADED_MAX:
            loaded = self._loaded = {k: v for k, v in loaded.items()
                                     if v[0] > now}
        for inst in todo:
            nova.cache(inst, self._holding_slot, held.get(inst.uuid))
            loaded[(inst.uuid, host)] = (now + LOADED_TTL,
                                         held.get(inst.uuid))
        return True

    def _holding_of(self, uuid: str, flavor: Any,
                    cells: frozenset[int] | None) -> capacity.Holding | None:
        """What an instance holds; malformed specs (or no flavor): nothing."""
        if flavor is None:
            return None
        try:
            spec = request.from_extra_specs(
                self._nova.flavor_extra_specs(flavor), strict=False)
            return None if spec is None else \
                holding_of(spec, cells, self.way_kib())
        except InvalidValue as exc:
            LOG.warning('Instance %(uuid)s counted as holding no cache ways: '
                        'its flavor %(flavor)s has invalid extra specs: '
                        '%(error)s',
                        {'uuid': uuid,
                         'flavor': self._nova.flavor_name(flavor),
                         'error': exc})
            return None


def holding_of(spec: request.CacheRequest, cells: frozenset[int] | None,
               way_kib: int | None) -> capacity.Holding | None:
    """What an instance asking ``spec`` holds on any host; None: nothing.

    A size (``rdt:l3_kib``) counts as the ways of ``way_kib`` KiB that
    hold it (``[ovs_rdt] rdt_l3_way_kib``, the cloud's smallest way):
    InvalidValue when that is unset.
    """
    if spec.pool is not None:
        return capacity.Holding(0, None, spec.pool)
    if spec.l3_kib is not None:
        if way_kib is None:
            raise InvalidValue('%s cannot be counted: [ovs_rdt] '
                               'rdt_l3_way_kib (the KiB of the smallest L3 '
                               'way of the cloud) is not set'
                               % spec.label(request.L3_KIB))
        return capacity.Holding(ways_holding(spec.l3_kib, way_kib * 1024),
                                cells)
    if spec.l3_ways is None:
        return None
    return capacity.Holding(spec.l3_ways, cells)
