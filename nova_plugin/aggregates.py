"""A host's cache capacity and NUMA node to L3 map: its aggregates'
metadata, else nova.conf.

Per key: the metadata of the host's aggregates (``rdt_l3_ways``, ...,
``rdt_numa_l3``); a key none of them has comes from the ``[ovs_rdt]``
option of the same name (:mod:`nova_plugin.opts`).  Several aggregates:
the smallest capacity, the largest reservation, the pools every one of
them lists, per NUMA node every L3 domain any of them lists.  A value is
read by the rule of the option (:mod:`ovs_rdt.inputs.host_capacity`); a
bad one leaves the host's capacity unknown (it fails RDT requests), with one
warning in the option's words: taking another aggregate's value or the
option's instead could promise ways the operator meant to keep.

Nova-free: it gets raw metadata values, as
:func:`nova_plugin.adapter.aggregate_metadata` reads them, and the
``[ovs_rdt]`` option group.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Mapping

from ovs_rdt.core import capacity
from ovs_rdt.core import topology
from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.inputs import host_capacity as capacity_text
from ovs_rdt.inputs import numa_l3 as numa_l3_text

LOG = logging.getLogger(__name__)

#: Aggregate metadata keys (and [ovs_rdt] options), in HostCapacity order.
KEYS = ('rdt_l3_ways', 'rdt_system_ways', 'rdt_closids',
        'rdt_reserved_closids', 'rdt_pools')
#: Aggregate metadata key (and [ovs_rdt] option) of the NUMA node to L3 map
#: (``ovs-rdt provider-config`` prints it); read after KEYS.
NUMA_L3 = 'rdt_numa_l3'
#: Every aggregate metadata key the filter reads, in that order.
METADATA = (*KEYS, NUMA_L3)


def defaults(group: Mapping[str, Any]) -> tuple:
    """The ``[ovs_rdt]`` values of KEYS (None: unset), hashable."""
    return tuple(
        tuple(group[k]) if k == 'rdt_pools' and group[k] is not None
        else group[k] for k in KEYS)


@functools.lru_cache(maxsize=1024)
def host_capacity(aggregates: tuple,
                  defaults: tuple) -> capacity.HostCapacity | None:
    """HostCapacity from aggregates' raw metadata values, else the defaults.

    ``aggregates``: per aggregate, its values of KEYS (None: absent;
    values after them, as METADATA's NUMA_L3, are not read);
    ``defaults``: :func:`defaults`.  None without ``rdt_l3_ways`` and
    ``rdt_closids``, or with a value the option's rule refuses (one
    warning).  Cached: bad values warn once.
    """
    merged: list[Any] = [None] * len(KEYS)
    refused = False
    for raw in aggregates:
        for i, (key, value) in enumerate(zip(KEYS, raw)):
            if value is None:
                continue
            parsed = _parse(key, value)
            if parsed is None:
                refused = True
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
    if refused or l3_ways is None or closids is None:
        return None
    return capacity.HostCapacity(l3_ways, system_ways or 0, closids,
                                 reserved or 0, pools)


@functools.lru_cache(maxsize=256)
def host_numa_l3(aggregates: tuple, default: str | None
                 ) -> dict[int, frozenset[int]] | None:
    """The NUMA node to L3 map from aggregates' ``rdt_numa_l3``, else the
    ``[ovs_rdt]`` default; None: neither (node id == L3 id).

    ``aggregates``: per aggregate, its raw ``rdt_numa_l3`` (None: absent).
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


def domains_and_nodes(numa_l3: topology.NumaL3 | None,
                      nodes: frozenset[int] | None, usage: capacity.Usage
                      ) -> tuple[frozenset[int], frozenset[int]]:
    """The host's L3 domains and the NUMA nodes a request's cells go on.

    ``numa_l3``: :func:`host_numa_l3`; ``nodes``: the host's NUMA node
    ids as Nova reports them (None: no NUMA topology); ``usage``: what its
    instances hold.  Without a map (node id == L3 id) both are its nodes,
    or when unknown the domains its instances hold ways on and 0; with a
    map, the map's L3 domains, and its nodes when Nova reports none.
    """
    if numa_l3 is None:
        nodes = nodes or usage.domains() | {0}
        return nodes, nodes
    return topology.domains(numa_l3), nodes or frozenset(numa_l3)


def _parse(key: str, value: str) -> Any:
    if key == 'rdt_pools':
        return frozenset(p.strip() for p in value.split(',') if p.strip())
    try:
        return capacity_text.parse(key, value, key)
    except InvalidValue as exc:
        LOG.warning('Bad aggregate metadata, the host fails RDT requests '
                    'until it is fixed: %(error)s', {'error': exc})
        return None
