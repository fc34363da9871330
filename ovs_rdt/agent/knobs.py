"""The ``rdt-*`` keys of ``Open_vSwitch . other_config``: pure parsing.

:func:`parse` turns the keys into a :class:`Placement` (where PMD threads
and ovs-vswitchd's other threads belong, and what the PMD group holds) or
raises :class:`~ovs_rdt.exceptions.InvalidValue` with one specific,
operator-ready message per fault, by the rules every surface shares
(:mod:`ovs_rdt.inputs.request`): ``other_config:rdt-pmd-l3-ways`` is
checked exactly as ``rdt:l3_ways`` and ``<rdt:l3 ways>`` are.  No I/O, no
ovsdbapp.
"""
from __future__ import annotations

from typing import Collection, Mapping

from ovs_rdt.core.model import PMD_GROUP, ROOT, pool_group
from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.exceptions import count, refuse
from ovs_rdt.inputs import cpulists, names, request

KEY_WAYS = 'rdt-pmd-l3-ways'
KEY_POOL = 'rdt-pmd-pool'
KEY_VSWITCHD = 'rdt-vswitchd'
KEY_MB = 'rdt-pmd-mb-percent'
KEY_MB_MBPS = 'rdt-pmd-mb-mbps'
KEY_CPU_MASK = 'pmd-cpu-mask'
#: Our keys start so; any other key with this prefix is a typo, refused.
PREFIX = 'rdt-'
#: Our keys.
RDT_KEYS = (KEY_WAYS, KEY_POOL, KEY_VSWITCHD, KEY_MB, KEY_MB_MBPS)
#: Every other_config key the agent reads (and any other ``rdt-*``).
KEYS = RDT_KEYS + (KEY_CPU_MASK,)
#: The keys of the request, and its fields.
REQUEST_KEYS = {KEY_WAYS: request.L3_WAYS, KEY_POOL: request.POOL,
                KEY_MB: request.MB_PERCENT, KEY_MB_MBPS: request.MB_MBPS}
#: How messages name a key.
FIELD = 'other_config:%s'

VSWITCHD_PMD = 'pmd'
VSWITCHD_DEFAULT = 'default'
VSWITCHD_POOL = 'pool:'


class Placement:
    """Where the threads of ovs-vswitchd belong (comparable, hashable)."""

    __slots__ = ('ways', 'pool', 'mb_percent', 'vswitchd', 'mb_mbps')

    def __init__(self, ways: int | None = None, pool: str | None = None,
                 mb_percent: int | None = None,
                 vswitchd: str = VSWITCHD_PMD,
                 mb_mbps: int | None = None) -> None:
        self.ways = ways
        self.pool = pool
        self.mb_percent = mb_percent
        self.vswitchd = vswitchd
        self.mb_mbps = mb_mbps

    def describe(self) -> str:
        """For operators: ``PMD threads -> ovsrdt-ovs-pmd (4 ways), ...``."""
        if self.ways is not None:
            pmd = '%s (%s%s%s)' % (
                PMD_GROUP, count(self.ways, 'way'),
                ', MB %d%%' % self.mb_percent if self.mb_percent else '',
                ', MB %d MiB/s' % self.mb_mbps if self.mb_mbps else '')
        else:
            pmd = self.pmd_group or 'the default group'
        return 'PMD threads -> %s, other ovs-vswitchd threads -> %s' % (
            pmd, self.other_group or 'the default group')

    @property
    def pmd_group(self) -> str:
        """The group of the PMD threads (ROOT when no key asks for one)."""
        if self.ways is not None:
            return PMD_GROUP
        if self.pool is not None:
            return pool_group(self.pool)
        return ROOT

    @property
    def other_group(self) -> str:
        """The group of ovs-vswitchd's other threads."""
        if self.vswitchd == VSWITCHD_DEFAULT:
            return ROOT
        if self.vswitchd.startswith(VSWITCHD_POOL):
            return pool_group(self.vswitchd[len(VSWITCHD_POOL):])
        return self.pmd_group

    @property
    def active(self) -> bool:
        return bool(self.pmd_group or self.other_group)

    def _key(self) -> tuple:
        return (self.ways, self.pool, self.mb_percent, self.vswitchd,
                self.mb_mbps)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Placement) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return ('Placement(ways=%r, pool=%r, mb=%r, vswitchd=%r, mbps=%r)'
                % self._key())


def relevant(other_config: Mapping[str, str]) -> dict[str, str]:
    """Only the keys the agent reads (to tell whether anything changed):
    :data:`KEYS` and every other ``rdt-*`` key (refused by :func:`parse`).
    """
    return {k: v for k, v in other_config.items()
            if k in KEYS or k.startswith(PREFIX)}


def parse(other_config: Mapping[str, str], pools: Collection[str],
          cbm_len: int | None = None, mb_min: int | None = 1,
          mb_field: str = request.MB_PERCENT,
          mb_kind: str = '') -> Placement:
    """The placement the keys ask for; InvalidValue names the fault.

    ``pools`` are the configured pool names, ``cbm_len`` the ways of the
    platform's L3 (None: unchecked), ``mb_min`` the platform's minimum
    memory bandwidth in percent (None: it has no MBA), ``mb_field`` the
    kind of cap it takes (``mb_percent`` or ``mb_mbps``, ``mb_kind`` why:
    :func:`ovs_rdt.inputs.request.check_mb`).  An ``rdt-*`` key that is
    not one of ours is refused: a typo must not read as "no keys set".
    """
    for key in sorted(other_config):
        if key.startswith(PREFIX) and key not in RDT_KEYS:
            raise request.unknown_key(FIELD % key, RDT_KEYS)
    raw = {field: other_config[key] for key, field in REQUEST_KEYS.items()
           if key in other_config}
    req = request.parse(raw, {field: FIELD % key
                              for key, field in REQUEST_KEYS.items()},
                        'OvS other_config')
    request.check_host(req, pools, cbm_len, mb_min, mb_field, mb_kind)
    vswitchd = other_config.get(KEY_VSWITCHD, VSWITCHD_PMD)
    field = FIELD % KEY_VSWITCHD
    if vswitchd.startswith(VSWITCHD_POOL):
        name = names.pool_name(vswitchd[len(VSWITCHD_POOL):], field)
        request.configured_pool(name, pools, field, vswitchd)
    elif vswitchd not in (VSWITCHD_PMD, VSWITCHD_DEFAULT):
        raise refuse(field, vswitchd, 'is not one of pmd, default, '
                     'pool:<name>')
    return Placement(req.l3_ways, req.pool, req.mb_percent, vswitchd,
                     req.mb_mbps)


def parse_cpu_mask(text: str | None) -> frozenset[int]:
    """The cores of ``pmd-cpu-mask`` (hex, ``0x`` optional).

    Empty if unset or unreadable (ovs-vswitchd then picks its own cores).
    """
    if not text:
        return frozenset()
    try:
        return cpulists.from_mask(text, FIELD % KEY_CPU_MASK)
    except InvalidValue:
        return frozenset()
