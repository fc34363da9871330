"""What a VM or OvS asks for: L3 ways, a shared pool, a bandwidth cap.

One request, five fields, each written its own way on each surface:

* ``l3_ways``: ``<rdt:l3 ways>`` in a domain's annotation, the flavor extra
  spec ``rdt:l3_ways``, ``other_config:rdt-pmd-l3-ways`` in OvS;
* ``l3_kib``: ``<rdt:l3 kib>``, ``rdt:l3_kib`` (VMs only: a VM moves between
  nodes whose ways differ in size, OvS's PMD threads do not);
* ``pool``: ``<rdt:pool name>``, ``rdt:pool``, ``rdt-pmd-pool``;
* ``mb_percent``: ``<rdt:mb percent>``, ``rdt:mb_percent``,
  ``rdt-pmd-mb-percent``;
* ``mb_mbps``: ``<rdt:mb mbps>``, ``rdt:mb_mbps``, ``rdt-pmd-mb-mbps``.

A Nova flavor may instead ask Placement for the ways, which is what a node
reads then (the count is written once): ``resources:CUSTOM_RDT_L3_WAY=N``
(``l3_total``: N ways in all, spread over the cache groups the VM's vCPUs
span, :func:`ovs_rdt.core.topology.spread`) with
``resources:CUSTOM_RDT_CLOSID=1`` (:func:`from_extra_specs`).

``l3_ways`` is a whole number from 1 to :data:`MAX_WAYS`, ``l3_kib`` a
size in KiB (a whole number from 1), ``pool`` a pool name
(:mod:`~ovs_rdt.inputs.names`), ``mb_percent`` a percentage, ``mb_mbps`` a
bandwidth in MiB/s (a whole number from 1).  ``l3_ways`` and ``l3_kib``
both ask for a dedicated CLOS, by way count or by size: they exclude each
other and ``pool``; so do the two caps, and a cap only goes with a
dedicated CLOS (a pool's cap is its ``[pool:NAME] mb_percent`` or
``mb_mbps``).  On a node, a pool must be configured, the ways must fit the
L3 cache (a size becomes the fewest ways holding it there,
:func:`l3_ways_on`) and a cap needs memory bandwidth allocation taking its
kind of value: percentages on Intel MBA, MiB/s where resctrl is mounted
with ``mba_MBps`` and on AMD (:func:`check_host`, :func:`check_mb`).
"""
from __future__ import annotations

from ovs_rdt.core.ways import ways_holding
from ovs_rdt.exceptions import InvalidValue, count, refuse
from ovs_rdt.inputs import integers, names
from ovs_rdt import MAX_WAYS

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Collection, Iterable, Mapping

L3_WAYS = 'l3_ways'
L3_KIB = 'l3_kib'
POOL = 'pool'
MB_PERCENT = 'mb_percent'
MB_MBPS = 'mb_mbps'
#: The fields, in the order they are checked.
FIELDS = (L3_WAYS, L3_KIB, POOL, MB_PERCENT, MB_MBPS)
#: The two ways of asking for a dedicated CLOS: by way count, by size.
L3_FIELDS = (L3_WAYS, L3_KIB)
#: The two kinds of memory bandwidth cap.
MB_FIELDS = (MB_PERCENT, MB_MBPS)

#: Flavor extra specs (Nova) -> field: ``rdt:l3_ways`` and so on.
EXTRA_SPEC_PREFIX = 'rdt:'
EXTRA_SPECS = {EXTRA_SPEC_PREFIX + field: field for field in FIELDS}

#: The request field of ``resources:CUSTOM_RDT_L3_WAY``: ways in all.
L3_TOTAL = 'l3_total'
#: The Placement resource classes a node publishes (``ovs-rdt
#: provider-config``): a way on every L3 cache of one cache group, a CLOSID.
RC_WAYS = 'CUSTOM_RDT_L3_WAY'
RC_CLOSIDS = 'CUSTOM_RDT_CLOSID'
RC_PREFIX = 'CUSTOM_RDT_'
#: The flavor extra specs that ask Placement for them (no request group).
WAYS_SPEC = 'resources:' + RC_WAYS
CLOSIDS_SPEC = 'resources:' + RC_CLOSIDS


def is_ours(key: str) -> bool:
    """Whether a flavor extra spec is ovs-rdt's to read: ``rdt:*``, or
    ``resources*:CUSTOM_RDT_*`` (with any request group suffix).
    """
    if key.startswith(EXTRA_SPEC_PREFIX):
        return True
    group, colon, resource_class = key.partition(':')
    return bool(colon) and group.startswith('resources') and \
        resource_class.startswith(RC_PREFIX)


class CacheRequest:
    """A valid request; at most one of ``l3_ways``, ``l3_kib`` and ``pool``
    is set.

    ``labels`` maps a field to how the surface names it and ``source``
    says where the request came from, for messages.
    """

    __slots__ = ('l3_ways', 'l3_kib', 'pool', 'mb_percent', 'mb_mbps',
                 'labels', 'source', 'l3_total')

    def __init__(self, l3_ways: int | None = None, pool: str | None = None,
                 mb_percent: int | None = None,
                 labels: dict[str, str] | None = None,
                 source: str = '', mb_mbps: int | None = None,
                 l3_kib: int | None = None,
                 l3_total: int | None = None) -> None:
        self.l3_ways = l3_ways
        self.l3_kib = l3_kib
        self.l3_total = l3_total
        """Ways in all, spread over the cache groups spanned (a flavor's
        ``resources:CUSTOM_RDT_L3_WAY``)."""
        self.pool = pool
        self.mb_percent = mb_percent
        self.mb_mbps = mb_mbps
        self.labels = labels or {}
        self.source = source

    @property
    def dedicated(self) -> bool:
        """Whether it asks for a dedicated CLOS (by ways or by size)."""
        return (self.l3_ways is not None or self.l3_kib is not None
                or self.l3_total is not None)

    def label(self, field: str) -> str:
        return self.labels.get(field, field)

    def describe(self) -> str:
        """``2 L3 ways, memory bandwidth 50% (from SOURCE)``."""
        if self.pool is not None:
            what = 'pool %s' % self.pool
        elif self.l3_kib is not None:
            what = '%d KiB of L3' % self.l3_kib
        elif self.l3_total is not None:
            what = count(self.l3_total, 'L3 way') + ' in all'
        else:
            what = count(self.l3_ways or 0, 'L3 way')
        if self.mb_percent is not None:
            what += ', memory bandwidth %d%%' % self.mb_percent
        if self.mb_mbps is not None:
            what += ', memory bandwidth %d MiB/s' % self.mb_mbps
        return '%s (from %s)' % (what, self.source) if self.source else what

    def _key(self) -> tuple:
        return (self.l3_ways, self.pool, self.mb_percent, self.mb_mbps,
                self.l3_kib, self.l3_total)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CacheRequest) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return ('CacheRequest(l3_ways=%r, pool=%r, mb_percent=%r, '
                'mb_mbps=%r, l3_kib=%r, l3_total=%r)' % self._key())


def ways(raw: str, field: str) -> int:
    """An L3 way count: a whole number from 1 to :data:`MAX_WAYS`."""
    return integers.parse(raw, field, 1, MAX_WAYS)


def kib(raw: str, field: str) -> int:
    """An L3 size in KiB: a whole number from 1 to :data:`integers.MAX`."""
    return integers.parse(raw, field, 1, integers.MAX)


def total_ways(raw: str, field: str) -> int:
    """Ways in all (``resources:CUSTOM_RDT_L3_WAY``): a whole number from 1."""
    return integers.parse(raw, field, 1)


#: field -> its rule, ``rule(raw, label) -> value``.
RULES = {L3_WAYS: ways, L3_KIB: kib, POOL: names.pool_name,
         MB_PERCENT: integers.percent, MB_MBPS: integers.mbps,
         L3_TOTAL: total_ways}


def parse(raw: Mapping[str, str], labels: Mapping[str, str],
          source: str = '') -> CacheRequest:
    """The request of the fields given (``field -> text``).

    ``labels`` names each field (given or not) in messages; errors come in
    :data:`FIELDS` order, then the combination.
    """
    req = CacheRequest(labels=dict(labels), source=source)
    for field in (*FIELDS, L3_TOTAL):
        if field in raw:
            setattr(req, field, RULES[field](raw[field], req.label(field)))
    check_combination(req)
    return req


def check_one_cap(pct: int | None, mbps: int | None, pct_label: str,
                  mbps_label: str) -> None:
    """A memory-bandwidth cap is a percentage or a bandwidth, not both."""
    if pct is not None and mbps is not None:
        raise InvalidValue('%s and %s exclude each other: a memory bandwidth '
                           'cap is a percentage or a bandwidth in MiB/s, as '
                           'the host takes' % (pct_label, mbps_label))


def check_combination(req: CacheRequest) -> None:
    l3, size, pool, pct, mbps = (req.label(field) for field in FIELDS)
    if req.l3_ways is not None and req.l3_kib is not None:
        raise InvalidValue('%s and %s exclude each other: ask for a number '
                           'of ways or for a size, not both' % (l3, size))
    for field, label in ((L3_WAYS, l3), (L3_KIB, size),
                         (L3_TOTAL, req.label(L3_TOTAL))):
        if getattr(req, field) is not None and req.pool is not None:
            raise InvalidValue('%s and %s exclude each other: ask for a '
                               'dedicated CLOS or a shared pool, not both'
                               % (label, pool))
    check_one_cap(req.mb_percent, req.mb_mbps, pct, mbps)
    for field, mb in ((MB_PERCENT, pct), (MB_MBPS, mbps)):
        if getattr(req, field) is None:
            continue
        if req.pool is not None:
            raise InvalidValue('%s cannot go with %s: a pool\'s memory '
                               'bandwidth cap is its [pool:%s] %s'
                               % (mb, pool, req.pool, field))
        if not req.dedicated:
            raise InvalidValue('%s needs %s too: a memory bandwidth cap '
                               'applies to a dedicated CLOS' % (mb, l3))


def unknown_key(label: str, known: Iterable[str] = EXTRA_SPECS
                ) -> InvalidValue:
    """The error for a key of ours that is not one of the ``known`` ones
    (a typo must never read as "not set"): flavor extra specs, OvS knobs.
    """
    return InvalidValue('%s: unknown ovs-rdt key (known: %s)'
                        % (label, ', '.join(known)))


def from_extra_specs(specs: Mapping[str, str] | None, prefix: str = '',
                     source: str = '') -> CacheRequest | None:
    """The request of a flavor's extra specs (:func:`is_ours`); None when
    they ask for nothing.

    ``resources:CUSTOM_RDT_L3_WAY`` (ways in all, what Placement counted)
    goes with ``resources:CUSTOM_RDT_CLOSID=1`` (:func:`placement_ways`)
    and is the count: ``rdt:l3_ways`` or ``rdt:l3_kib`` beside it is
    checked but not used.  ``prefix + key`` names a key in messages.
    """
    keys = sorted(k for k in specs or () if is_ours(k))
    if not keys:
        return None
    assert specs is not None
    raw: dict[str, str] = {}
    for key in keys:
        if not key.startswith(EXTRA_SPEC_PREFIX):
            continue
        field = EXTRA_SPECS.get(key)
        if field is None:
            raise unknown_key(prefix + key)
        raw[field] = specs[key]
    labels = {field: prefix + key for key, field in EXTRA_SPECS.items()}
    labels[L3_TOTAL] = prefix + WAYS_SPEC
    total = placement_ways(specs, prefix)
    if total is not None:
        for field in L3_FIELDS:    # checked, not used: the count is total's
            if field in raw:
                RULES[field](raw.pop(field), labels[field])
        raw[L3_TOTAL] = str(total)
    if not raw:
        return None
    return parse(raw, labels, source)


def placement_ways(specs: Mapping[str, str], prefix: str = '') -> int | None:
    """The ways in all a flavor asks Placement for; None: none.

    The one rule of ``resources:CUSTOM_RDT_L3_WAY`` and
    ``resources:CUSTOM_RDT_CLOSID``: whole numbers (0 is Nova's "not
    asked"), the ways with exactly one CLOSID (the instance's class of
    service, which Placement counts too), neither in a request group
    (``resources1:...``), no other ``CUSTOM_RDT_`` class.
    """
    ways = closids = None
    for key in sorted(specs):
        group, colon, resource_class = key.partition(':')
        if not (colon and group.startswith('resources')
                and resource_class.startswith(RC_PREFIX)):
            continue
        label = prefix + key
        if resource_class not in (RC_WAYS, RC_CLOSIDS):
            raise InvalidValue('%s: unknown ovs-rdt resource class (known: '
                               '%s, %s)' % (label, RC_WAYS, RC_CLOSIDS))
        if group != 'resources':
            raise InvalidValue(
                '%s: ovs-rdt reads resources:%s only, not in a request group: '
                'write it without the suffix "%s"'
                % (label, resource_class, group[len('resources'):]))
        if resource_class == RC_WAYS:
            ways = integers.parse(specs[key], label)
        else:
            closids = integers.parse(specs[key], label, 0, 1)
    if ways:
        if closids != 1:
            raise InvalidValue(
                '%s%s=%d needs %s%s=1 too: the instance\'s class of service '
                'holds a CLOSID, which Placement counts'
                % (prefix, WAYS_SPEC, ways, prefix, CLOSIDS_SPEC))
        return ways
    if closids:
        raise InvalidValue(
            '%s%s=1 without %s%s: an instance holds a CLOSID of its own for '
            'the ways it asks there' % (prefix, CLOSIDS_SPEC, prefix,
                                        WAYS_SPEC))
    return None


def check_extra_spec(key: str, value: str) -> None:
    """One extra spec of ours on its own (Nova's API checks key by key):
    an ``rdt:`` key, or ``resources:CUSTOM_RDT_L3_WAY`` /
    ``resources:CUSTOM_RDT_CLOSID`` (:func:`placement_ways`' rules for a
    value).
    """
    if key == WAYS_SPEC:
        integers.parse(value, key)
        return
    if key == CLOSIDS_SPEC:
        integers.parse(value, key, 0, 1)
        return
    field = EXTRA_SPECS.get(key)
    if field is None:
        raise unknown_key(key)
    RULES[field](value, key)


def configured_pool(name: str, pools: Collection[str], field: str,
                    raw: str | None = None) -> str:
    """``name`` if it is one of the configured ``pools``."""
    if name not in pools:
        raise refuse(field, name if raw is None else raw,
                     'names no pool configured on this host (configured: '
                     '%s; see [allocation] pools)'
                     % (', '.join(sorted(pools)) or 'none'))
    return name


def check_host(req: CacheRequest, pools: Collection[str] | None,
               cbm_len: int | None, mb_min: int | None,
               mb_field: str = MB_PERCENT, mb_kind: str = '') -> None:
    """What the node can serve: the configured ``pools`` (None: unchecked),
    ``cbm_len`` ways per L3 domain (None: unchecked), memory bandwidth
    allocation down to ``mb_min`` percent (None: no MBA) taking caps of
    ``mb_field`` (``mb_percent`` or ``mb_mbps``; ``mb_kind`` says why, see
    :func:`check_mb`).
    """
    if req.pool is not None and pools is not None:
        configured_pool(req.pool, pools, req.label(POOL))
    if cbm_len is not None and req.l3_ways is not None and \
            req.l3_ways > cbm_len:
        raise refuse(req.label(L3_WAYS), str(req.l3_ways), 'is more than '
                     'the %d ways of this host\'s L3 cache' % cbm_len)
    for field in MB_FIELDS:
        value = getattr(req, field)
        if value is not None:
            check_mb(field, value, req.label(field), mb_min, mb_field,
                     mb_kind, {f: req.label(f) for f in MB_FIELDS})


def l3_ways_on(req: CacheRequest, cbm_len: int, way_bytes: int) -> int:
    """The ways ``req`` (a dedicated CLOS) takes on a cache domain of
    ``cbm_len`` ways of ``way_bytes`` bytes each (0: size unknown).

    ``l3_ways`` as it is; ``l3_kib`` the fewest ways that hold that much,
    so a VM asking by size keeps at least that cache on every node, whatever
    its way size (:func:`ovs_rdt.core.ways.ways_holding`).
    """
    if req.l3_kib is None:
        if req.l3_ways is None:
            raise AssertionError('l3_ways_on() needs a dedicated-CLOS request')
        return req.l3_ways
    label, value = req.label(L3_KIB), str(req.l3_kib)
    if way_bytes <= 0:
        raise refuse(label, value, 'cannot be met on this host: the size of '
                     'its L3 cache is unknown (no cache/index3/size in sysfs)')
    ways = ways_holding(req.l3_kib, way_bytes)
    if ways > cbm_len:
        raise refuse(label, value, 'is more than this host\'s L3 cache: %d '
                     'ways of %d KiB (%d KiB)' % (
                         cbm_len, way_bytes // 1024,
                         cbm_len * way_bytes // 1024))
    return ways


def check_mb(field: str, value: int, label: str, mb_min: int | None,
             mb_field: str = MB_PERCENT, mb_kind: str = '',
             labels: Mapping[str, str] | None = None) -> None:
    """A memory bandwidth cap of kind ``field`` against the host: the one
    rule for VMs (the hook, the agent's knobs), pools (the configuration)
    and every request the allocator plans.

    The host takes ``mb_field`` only: ``mb_percent`` on Intel MBA,
    ``mb_mbps`` where resctrl is mounted with ``mba_MBps`` and on AMD, none
    (``''``) on a non-linear Intel MBA, whose every value the kernel
    refuses (:attr:`ovs_rdt.core.model.MBInfo.field`, ``mb_kind`` its
    :attr:`~ovs_rdt.core.model.MBInfo.kind`).  ``labels`` names each kind
    on this surface, for the hint.  ``mb_min`` (percent) is None without
    memory bandwidth allocation.
    """
    if mb_min is None:
        raise refuse(label, str(value), 'cannot be met: this host has no '
                     'memory bandwidth allocation (no info/MB in resctrl)')
    if mb_field not in MB_FIELDS:
        raise refuse(label, str(value), 'cannot be met on this host: %s'
                     % (mb_kind or 'it takes no memory bandwidth cap'))
    if field != mb_field:
        hint = (labels or {}).get(mb_field, mb_field)
        raise refuse(label, str(value), 'cannot be met on this host: %s; '
                     'give %s instead' % (mb_kind or 'it takes %s' % mb_field,
                                          hint))
    if field == MB_PERCENT and value < mb_min:
        raise refuse(label, str(value), 'is below this host\'s minimum '
                     'memory bandwidth, %d%%' % mb_min)
    top = 100 if field == MB_PERCENT else integers.MAX
    if not 1 <= value <= top:
        raise refuse(label, str(value), 'is outside 1-%d' % top)


#: The MBM events the kernel's software controller can hold a group's
#: ``MB:`` bandwidth to (its ``mba_MBps_event``; resctrl mounted with
#: ``-o mba_MBps``).  The kernel's default is the first.
MB_EVENTS = ('mbm_local_bytes', 'mbm_total_bytes')


def check_mb_event(value: str, label: str, controller: bool,
                   mb_kind: str, mon_features: Collection[str],
                   selectable: bool = True) -> None:
    """An ``mba_MBps_event`` for a group against the host.

    ``controller``: resctrl is mounted with ``mba_MBps`` (the kernel's
    software controller; ``mb_kind`` says what the host takes otherwise);
    ``selectable``: its groups have an ``mba_MBps_event`` file (Linux
    6.14 and later); ``mon_features``: ``info/L3_MON/mon_features`` (the
    kernel refuses an event it does not count).
    """
    if value not in MB_EVENTS:
        raise refuse(label, value, 'is not an event the software controller '
                     'follows (one of: %s)' % ', '.join(MB_EVENTS))
    if not controller:
        raise refuse(label, value, 'cannot be met on this host: %s; the '
                     'event only applies where resctrl is mounted with '
                     '"-o mba_MBps"' % (mb_kind or 'it has no memory '
                                        'bandwidth allocation'))
    if not selectable:
        raise refuse(label, value, 'cannot be met on this host: its kernel '
                     'has no mba_MBps_event (Linux 6.14 and later choose '
                     'the event; before, the controller follows '
                     'mbm_local_bytes)')
    if value not in mon_features:
        raise refuse(label, value, 'cannot be met on this host: L3 '
                     'monitoring does not count it (info/L3_MON/'
                     'mon_features: %s)' % (' '.join(mon_features) or
                                            'none'))
