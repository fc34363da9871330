"""What the instances on a host hold, cached on Nova's objects.

Per instance: its flavor's ``rdt:`` specs and NUMA cells, parsed once
per Instance object (kept on it).  Per host: their sum on its L3 domains
(the host's NUMA node to L3 map), kept on the HostState while it holds
the same Instance objects and map and the ledger's version is the same.
Instances the :class:`~nova_plugin.ledger.Ledger` has read are counted
where it places them, not where the scheduler's view
(``HostState.instances``) has them (it lags and errs around moves; see
:mod:`nova_plugin.ledger`); the others as the view has them.  Bare
instance stubs (computes that do not report their instances, see
``[filter_scheduler] track_instance_changes``) are the ledger's to read
(:meth:`~nova_plugin.ledger.Ledger.load`) before their host is summed,
once.

Functions of what they are given: Nova's objects are read through the
adapter (:mod:`nova_plugin.adapter`; unit tests give a fake), what the
database says through the ledger.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from nova_plugin.ledger import HoldingOf
from ovs_rdt.core import capacity
from ovs_rdt.core import topology
from ovs_rdt.core.ways import ways_holding
from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.inputs import request

LOG = logging.getLogger(__name__)
_HOLDING = '_ovs_rdt_holding'   # on an Instance
_USAGE = '_ovs_rdt_usage'       # on a HostState
_UNSET = object()


def of_host(nova: Any, ledger: Any, host_state: Any,
            instances: Mapping[str, Any], numa_l3: topology.NumaL3 | None,
            holding_of: HoldingOf,
            read_stubs: Callable[[Any, list[str]], bool]
            ) -> capacity.Usage | None:
    """Sum of the host's instances, cached while they are the same objects.

    ``instances``: the host's view (uuid -> Instance); the ledger's
    instances count where it places them.  Bare stubs the ledger has not
    read are given to ``read_stubs(context, uuids)`` first (it lets the
    ledger read them); None when that failed: counting them as holding
    nothing could over-commit the host.  Holdings name NUMA cells;
    ``numa_l3`` maps them to L3 domains (None: node id == L3 id),
    compared by identity: the cached sum is recounted when the host's
    map is another object (:func:`nova_plugin.aggregates.host_numa_l3`
    gives one per text).  Never changed by the caller: shared.
    """
    current = tuple(instances.values())
    version = ledger.version
    cached = nova.cached(host_state, _USAGE)
    if cached is not None and nova.same_instances(cached[0], current) \
            and cached[1].numa_l3 is numa_l3 and cached[2] == version:
        return cached[1]
    stubs = [(inst.uuid, context) for inst in current
             if not ledger.tracks(inst.uuid) and
             (context := nova.stub_context(inst)) is not None]
    if stubs and not read_stubs(stubs[0][1], [uuid for uuid, _ in stubs]):
        return None
    version, placed, untracked = ledger.view(
        nova.host_key(host_state), [inst.uuid for inst in current])
    usage = capacity.Usage(numa_l3)
    for held in placed.values():
        for holding in held:
            usage.add(holding)
    for inst in current:
        if inst.uuid in untracked:
            holding = instance_holding(nova, inst, holding_of)
            if holding is not None:
                usage.add(holding)
    nova.cache(host_state, _USAGE, (current, usage, version))
    return usage


def holdings_on(nova: Any, ledger: Any, host: tuple,
                instances: Mapping[str, Any], uuid: str,
                holding_of: HoldingOf) -> list[capacity.Holding]:
    """What instance ``uuid`` holds on ``host`` (``instances``: the
    host's view), as :func:`of_host` counted it.
    """
    if ledger.tracks(uuid):
        return list(ledger.on_host(host).get(uuid, ()))
    inst = instances.get(uuid)
    holding = None if inst is None else \
        instance_holding(nova, inst, holding_of)
    return [] if holding is None else [holding]


def instance_holding(nova: Any, inst: Any,
                     holding_of: HoldingOf) -> capacity.Holding | None:
    """What an Instance holds, parsed once per Instance object (a stub
    without a flavor: nothing).
    """
    holding: Any = nova.cached(inst, _HOLDING, _UNSET)
    if holding is _UNSET:
        loaded = nova.instance_loaded(inst)
        holding = None if loaded is None \
            else holding_of(inst.uuid, *loaded)
        nova.cache(inst, _HOLDING, holding)
    return holding


def flavor_holding(nova: Any, uuid: str, flavor: Any,
                   cells: frozenset[int] | None,
                   way_kib: int | None) -> capacity.Holding | None:
    """What an instance of ``flavor`` holds on ``cells``; malformed specs
    (or no flavor): nothing, with a warning.
    """
    if flavor is None:
        return None
    try:
        spec = request.from_extra_specs(nova.flavor_extra_specs(flavor),
                                        strict=False)
        return None if spec is None else request_holding(spec, cells, way_kib)
    except InvalidValue as exc:
        LOG.warning('Instance %(uuid)s counted as holding no cache ways: '
                    'its flavor %(flavor)s has invalid extra specs: '
                    '%(error)s', {'uuid': uuid,
                                  'flavor': nova.flavor_name(flavor),
                                  'error': exc})
        return None


def spec_holding(extra_specs: Mapping[str, str],
                 way_kib: int | None) -> capacity.Holding | None:
    """What an instance of a flavor with ``extra_specs`` holds on any host
    (None: nothing); InvalidValue names a malformed spec (or a size that
    cannot be counted).
    """
    spec = request.from_extra_specs(extra_specs)
    return None if spec is None else request_holding(spec, None, way_kib)


def request_holding(spec: request.CacheRequest,
                    cells: frozenset[int] | None,
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
