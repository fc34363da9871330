"""The ``rdt-*`` keys of ``Open_vSwitch . other_config``: pure parsing.

:func:`parse` turns the keys into a :class:`Placement` (where PMD threads
and ovs-vswitchd's other threads belong, and what the PMD group holds) or
raises :class:`~ovs_rdt.exceptions.AnnotationError` with one specific,
operator-ready message per fault.  No I/O, no ovsdbapp.
"""
from __future__ import annotations

from typing import Collection, Mapping

from ovs_rdt.exceptions import AnnotationError
from ovs_rdt.model import PMD_GROUP, ROOT, pool_group

KEY_WAYS = 'rdt-pmd-l3-ways'
KEY_POOL = 'rdt-pmd-pool'
KEY_VSWITCHD = 'rdt-vswitchd'
KEY_MB = 'rdt-pmd-mb-percent'
KEY_CPU_MASK = 'pmd-cpu-mask'
#: Every other_config key the agent reads.
KEYS = (KEY_WAYS, KEY_POOL, KEY_VSWITCHD, KEY_MB, KEY_CPU_MASK)

VSWITCHD_PMD = 'pmd'
VSWITCHD_DEFAULT = 'default'
VSWITCHD_POOL = 'pool:'


class Placement:
    """Where the threads of ovs-vswitchd belong (comparable, hashable)."""

    __slots__ = ('ways', 'pool', 'mb_percent', 'vswitchd')

    def __init__(self, ways: int | None = None, pool: str | None = None,
                 mb_percent: int | None = None,
                 vswitchd: str = VSWITCHD_PMD) -> None:
        self.ways = ways
        self.pool = pool
        self.mb_percent = mb_percent
        self.vswitchd = vswitchd

    def describe(self) -> str:
        """For operators: ``PMD threads -> ovsrdt-ovs-pmd (4 ways), ...``."""
        if self.ways is not None:
            pmd = '%s (%d ways%s)' % (PMD_GROUP, self.ways,
                                      ', MB %d%%' % self.mb_percent
                                      if self.mb_percent else '')
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
        return (self.ways, self.pool, self.mb_percent, self.vswitchd)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Placement) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return 'Placement(ways=%r, pool=%r, mb=%r, vswitchd=%r)' % self._key()


def relevant(other_config: Mapping[str, str]) -> dict[str, str]:
    """Only the keys the agent reads (to tell whether anything changed)."""
    return {k: other_config[k] for k in KEYS if k in other_config}


def _int(key: str, raw: str, low: int, high: int | None, hint: str) -> int:
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise AnnotationError('%s=%r is not a whole number%s'
                              % (key, raw, hint)) from None
    if value < low:
        raise AnnotationError('%s=%d must be at least %d%s'
                              % (key, value, low, hint))
    if high is not None and value > high:
        raise AnnotationError('%s=%d must be at most %d%s'
                              % (key, value, high, hint))
    return value


def _pool(key: str, raw: str, pools: Collection[str],
          prefix: str = '') -> str:
    configured = ', '.join(sorted(pools)) or 'none'
    name = raw.strip()
    if not name:
        raise AnnotationError('%s=%s names no pool: name one of [allocation] '
                              'pools (configured: %s)'
                              % (key, prefix, configured))
    if name not in pools:
        raise AnnotationError('%s=%s%s: no such pool (configured: %s; pools '
                              'are declared in [allocation] pools and '
                              '[pool:NAME])' % (key, prefix, name, configured))
    return name


def parse(other_config: Mapping[str, str], pools: Collection[str],
          cbm_len: int | None = None, has_mba: bool = True) -> Placement:
    """The placement the keys ask for; AnnotationError names the fault.

    ``pools`` are the configured pool names, ``cbm_len`` the ways of the
    platform's L3 (None: unchecked), ``has_mba`` whether it has MBA.
    """
    ways = pool = mb = None
    raw_ways = other_config.get(KEY_WAYS)
    raw_pool = other_config.get(KEY_POOL)
    if raw_ways is not None and raw_pool is not None:
        raise AnnotationError('%s=%s and %s=%s are both set: choose one (a '
                              'dedicated group or a shared pool)'
                              % (KEY_WAYS, raw_ways, KEY_POOL, raw_pool))
    if raw_ways is not None:
        ways = _int(KEY_WAYS, raw_ways, 1, None,
                    ' (the number of L3 cache ways for the PMD threads)')
        if cbm_len is not None and ways > cbm_len:
            raise AnnotationError('%s=%d is more than the %d ways of this '
                                  'platform\'s L3 cache'
                                  % (KEY_WAYS, ways, cbm_len))
    if raw_pool is not None:
        pool = _pool(KEY_POOL, raw_pool, pools)
    raw_mb = other_config.get(KEY_MB)
    if raw_mb is not None:
        mb = _int(KEY_MB, raw_mb, 1, 100, ' (a percentage, 1-100)')
        if pool is not None:
            raise AnnotationError('%s=%d cannot cap a shared pool: set '
                                  'mb_percent in [pool:%s] instead'
                                  % (KEY_MB, mb, pool))
        if ways is None:
            raise AnnotationError('%s=%d needs %s (it caps the dedicated PMD '
                                  'group)' % (KEY_MB, mb, KEY_WAYS))
        if not has_mba:
            raise AnnotationError('%s=%d: this platform has no memory '
                                  'bandwidth allocation (no info/MB in '
                                  'resctrl)' % (KEY_MB, mb))
    vswitchd = other_config.get(KEY_VSWITCHD, VSWITCHD_PMD).strip()
    if vswitchd.startswith(VSWITCHD_POOL):
        vswitchd = VSWITCHD_POOL + _pool(
            KEY_VSWITCHD, vswitchd[len(VSWITCHD_POOL):], pools, VSWITCHD_POOL)
    elif vswitchd not in (VSWITCHD_PMD, VSWITCHD_DEFAULT):
        raise AnnotationError('%s=%r is not one of pmd, default, pool:<name>'
                              % (KEY_VSWITCHD, vswitchd))
    return Placement(ways, pool, mb, vswitchd)


def parse_cpu_mask(text: str | None) -> frozenset[int]:
    """The cores of ``pmd-cpu-mask`` (hex, ``0x`` optional).

    Empty if unset or unreadable (ovs-vswitchd then picks its own cores).
    """
    if not text:
        return frozenset()
    raw = text.strip().lower()
    if raw.startswith('0x'):
        raw = raw[2:]
    try:
        value = int(raw, 16)
    except ValueError:
        return frozenset()
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)
