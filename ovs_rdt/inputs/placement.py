"""A Nova flavor against what Placement counts: the one rule of scheduling.

A node publishes (``ovs-rdt provider-config``) the resource classes
``CUSTOM_RDT_L3_WAY`` (a way on every L3 cache of one cache group) and
``CUSTOM_RDT_CLOSID``, and traits for what it serves: ``CUSTOM_RDT_L3_CAT``,
``CUSTOM_RDT_MBA``, the kind of memory-bandwidth cap it takes
(``CUSTOM_RDT_MB_PERCENT`` or ``CUSTOM_RDT_MB_MBPS``) and one
``CUSTOM_RDT_POOL_<NAME>`` per configured pool.  Nova claims what a flavor
asks, atomically, on every scheduler, cell and move; so a flavor asking for
cache must ask Placement for all of it, each number written once:

* a class of service of its own: ``resources:CUSTOM_RDT_L3_WAY=N`` (ways in
  all) and ``resources:CUSTOM_RDT_CLOSID=1`` (:func:`request.placement_ways`),
  not ``rdt:l3_ways`` or ``rdt:l3_kib`` alone, which Placement does not see;
* a pool: ``rdt:pool=NAME`` and ``trait:CUSTOM_RDT_POOL_<NAME>=required``;
* a cap: ``rdt:mb_percent`` (or ``rdt:mb_mbps``) and
  ``trait:CUSTOM_RDT_MB_PERCENT=required`` (``..._MB_MBPS``).

:func:`schedulable` says why a flavor breaks this (the scheduler filter,
one line); :func:`advice` what to set instead (``python3 -m
nova_plugin.upgrade``, for 0.3's flavors).  Pure: no nova, no I/O.
"""
from __future__ import annotations

from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.inputs import integers, request
from ovs_rdt.inputs.request import CLOSIDS_SPEC, WAYS_SPEC

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Mapping

TRAIT_CAT = 'CUSTOM_RDT_L3_CAT'
TRAIT_MBA = 'CUSTOM_RDT_MBA'
#: The kind of memory-bandwidth cap a host takes, by request field.
TRAIT_MB_KIND = {request.MB_PERCENT: 'CUSTOM_RDT_MB_PERCENT',
                 request.MB_MBPS: 'CUSTOM_RDT_MB_MBPS'}
POOL_TRAIT_PREFIX = 'CUSTOM_RDT_POOL_'
#: How a flavor requires a trait (Nova's ``trait:NAME=required``).
TRAIT_SPEC = 'trait:%s'
REQUIRED = 'required'
#: Where an operator finds what to set.
UPGRADE = 'python3 -m nova_plugin.upgrade lists what to set'


def pool_trait(pool: str) -> str:
    """``hp.v2-a`` -> ``CUSTOM_RDT_POOL_HP_V2_A`` (a trait's characters)."""
    return POOL_TRAIT_PREFIX + ''.join(
        c if c.isalnum() else '_' for c in pool.upper())


def traits_needed(req: request.CacheRequest) -> list[tuple[str, str]]:
    """(the request's label, trait) for each trait a host needs to serve
    ``req`` that Placement is to check.
    """
    out = []
    if req.pool is not None:
        out.append((req.label(request.POOL), pool_trait(req.pool)))
    for field, trait in TRAIT_MB_KIND.items():
        if getattr(req, field) is not None:
            out.append((req.label(field), trait))
    return out


def schedulable(specs: Mapping[str, str]) -> request.CacheRequest | None:
    """What a flavor with ``specs`` asks for, if Placement counts all of it
    (None: it asks for nothing); else InvalidValue, one line saying what
    to write.
    """
    req = request.from_extra_specs(specs)
    if req is None:
        return None
    for field in request.L3_FIELDS:
        value = getattr(req, field)
        if value is not None:
            raise InvalidValue(
                '%s=%s is not counted by Placement: ask %s=<ways in all> and '
                '%s=1 instead (%s)' % (req.label(field), value, WAYS_SPEC,
                                       CLOSIDS_SPEC, UPGRADE))
    for label, trait in traits_needed(req):
        spec = TRAIT_SPEC % trait
        if specs.get(spec) != REQUIRED:
            raise InvalidValue('%s needs %s=%s too: only the hosts that serve '
                               'it have that trait' % (label, spec, REQUIRED))
    return req


def numa_cells(specs: Mapping[str, str]) -> int:
    """The NUMA cells Nova gives an instance of the flavor (0: none, its
    vCPUs float over the whole host): ``hw:numa_nodes``, else one when it
    pins CPUs or asks for huge pages (Nova's implicit NUMA topology).
    Image properties may add one: they are not seen here.
    """
    nodes = specs.get('hw:numa_nodes', '').strip()
    if nodes.isdigit() and nodes.isascii():
        return int(nodes)
    if specs.get('hw:cpu_policy') in ('dedicated', 'mixed') or \
            specs.get('hw:mem_page_size') or \
            specs.get('resources:PCPU', '0') not in ('', '0'):
        return 1
    return 0


class Advice:
    """What to change in a flavor's extra specs."""

    def __init__(self) -> None:
        self.set: dict[str, str] = {}
        self.unset: list[str] = []
        self.notes: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.set or self.unset or self.notes)


def advice(specs: Mapping[str, str], cache_groups: int) -> Advice:
    """What a flavor asking for cache the 0.3 way should set and unset so
    that Placement counts it (empty: nothing).

    ``rdt:l3_ways=N`` becomes ``resources:CUSTOM_RDT_L3_WAY`` = N x its
    NUMA cells (:func:`numa_cells`), or N x ``cache_groups`` (the hosts'
    sockets) for an instance without a NUMA topology, which spans them
    all.  A flavor whose specs do not parse gets the error as a note.
    """
    out = Advice()
    try:
        req = request.from_extra_specs(specs)
    except InvalidValue as exc:
        out.notes.append('fix it first: %s' % exc)
        return out
    if req is None:
        return out
    cells = numa_cells(specs)
    spans = cells or cache_groups
    if req.l3_total is not None:
        for key in ('rdt:l3_ways', 'rdt:l3_kib'):
            if key in specs:
                out.unset.append(key)
        ways = integers.whole(specs.get('rdt:l3_ways', ''))
        if ways is not None and ways * spans != req.l3_total:
            out.notes.append(
                '%s=%d holds %d way(s) per cache group on %s, not the %d of '
                'rdt:l3_ways: since 0.4 it is the ways in all, spread over '
                'the cache groups the instance spans; set %d for %d per group'
                % (WAYS_SPEC, req.l3_total, req.l3_total // spans,
                   'its NUMA cells' if cells else 'hosts with %d cache groups'
                   % spans, ways, ways * spans, ways))
    elif req.l3_ways is not None:
        out.set[WAYS_SPEC] = str(req.l3_ways * spans)
        out.set[CLOSIDS_SPEC] = '1'
        out.unset.append('rdt:l3_ways')
        out.notes.append(
            '%d way(s) x %s' % (req.l3_ways, '%d NUMA cell(s)' % cells if cells
                                else '%d cache groups (no NUMA topology: it '
                                'spans every socket of its host; '
                                '--cache-groups for other hosts)' % spans))
    elif req.l3_kib is not None:
        out.set[WAYS_SPEC] = '<ways in all>'
        out.set[CLOSIDS_SPEC] = '1'
        out.unset.append('rdt:l3_kib')
        out.notes.append(
            'rdt:l3_kib=%d is a size, Placement counts ways: ask the ways that '
            'hold it on the hosts with the smallest ways, x %s'
            % (req.l3_kib, '%d NUMA cell(s)' % cells if cells
               else '%d cache groups' % spans))
    for _label, trait in traits_needed(req):
        if specs.get(TRAIT_SPEC % trait) != REQUIRED:
            out.set[TRAIT_SPEC % trait] = REQUIRED
    return out
