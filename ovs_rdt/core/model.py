"""Plain value types shared by the resctrl layer and the allocator (no I/O)."""
from __future__ import annotations

from ovs_rdt.core.bitmask import CBM
from ovs_rdt import GROUP_PREFIX
from ovs_rdt.inputs import uuids

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Callable

ROOT = ''
"""Name of the default (root) resctrl group."""

MODE_SHAREABLE = 'shareable'
MODE_EXCLUSIVE = 'exclusive'


class MBInfo:
    """Memory Bandwidth Allocation capabilities (info/MB)."""

    __slots__ = ('min_bandwidth', 'bandwidth_gran', 'delay_linear', 'domains')

    def __init__(self, min_bandwidth: int, bandwidth_gran: int,
                 delay_linear: bool, domains: tuple[int, ...]) -> None:
        self.min_bandwidth = min_bandwidth
        self.bandwidth_gran = bandwidth_gran
        self.delay_linear = delay_linear
        self.domains = domains

    def round(self, percent: int) -> int:
        """The value the kernel will keep for ``percent`` (rounded up)."""
        gran = self.bandwidth_gran or 1
        return min(100, -(-percent // gran) * gran)


class Platform:
    """What the platform offers, read from ``info/`` and the root group."""

    __slots__ = ('cbm_len', 'min_cbm_bits', 'num_closids', 'shareable_bits',
                 'sparse_masks', 'domains', 'cache_bytes', 'mb', 'mon_features',
                 'num_rmids', '_cpu_domains', '_topology')

    def __init__(self, cbm_len: int, num_closids: int,
                 domains: tuple[int, ...], min_cbm_bits: int = 1,
                 shareable_bits: int = 0, sparse_masks: bool = False,
                 cache_bytes: dict[int, int] | None = None,
                 mb: MBInfo | None = None,
                 mon_features: tuple[str, ...] = (), num_rmids: int = 0,
                 cpu_domains: dict[int, int] | None = None,
                 topology: Callable[[], dict[int, int]] | None = None) -> None:
        self.cbm_len = cbm_len
        self.num_closids = num_closids
        self.domains = domains
        self.min_cbm_bits = min_cbm_bits
        self.shareable_bits = shareable_bits
        self.sparse_masks = sparse_masks
        self.cache_bytes = cache_bytes or {}
        self.mb = mb
        self.mon_features = mon_features
        self.num_rmids = num_rmids
        self._cpu_domains = cpu_domains
        self._topology = topology

    @property
    def cpu_domains(self) -> dict[int, int]:
        """CPU id -> L3 domain id; empty when unknown.

        Read through ``topology`` on first use only: the hook needs it just
        for pinned VMs, and it is a hundred sysfs reads.
        """
        if self._cpu_domains is None:
            self._cpu_domains = self._topology() if self._topology else {}
        return self._cpu_domains

    @property
    def full_mask(self) -> CBM:
        return CBM.full(self.cbm_len)

    def way_bytes(self, domain: int) -> int:
        """Bytes of cache one way holds on ``domain`` (0 when unknown)."""
        return self.cache_bytes.get(domain, 0) // self.cbm_len

    def domains_of_cpus(self, cpus: set[int] | frozenset[int]) -> frozenset[int]:
        """The L3 domains the given CPUs belong to (every domain if unknown)."""
        if not cpus or not self.cpu_domains:
            return frozenset(self.domains)
        found = {self.cpu_domains[c] for c in cpus if c in self.cpu_domains}
        return frozenset(found) if found else frozenset(self.domains)


class Group:
    """One resctrl control group as read from the filesystem."""

    __slots__ = ('name', 'l3', 'mb', 'mode', 'tasks', 'cpus')

    def __init__(self, name: str, l3: dict[int, CBM],
                 mb: dict[int, int] | None = None,
                 mode: str = MODE_SHAREABLE, tasks: list[int] | None = None,
                 cpus: frozenset[int] = frozenset()) -> None:
        self.name = name
        self.l3 = l3
        self.mb = mb or {}
        self.mode = mode
        self.tasks = tasks if tasks is not None else []
        self.cpus = cpus

    @property
    def is_root(self) -> bool:
        return self.name == ROOT

    @property
    def owned(self) -> bool:
        """True for groups ovs-rdt created (name starts with ``ovsrdt-``)."""
        return self.name.startswith(GROUP_PREFIX)

    def __repr__(self) -> str:
        masks = ';'.join('%d=%s' % (d, m) for d, m in sorted(self.l3.items()))
        return 'Group(%r, L3:%s, %s)' % (self.name or '/', masks, self.mode)


VM_GROUP_PREFIX = GROUP_PREFIX + 'vm-'


def vm_group(uuid: str) -> str:
    return VM_GROUP_PREFIX + uuid


def vm_uuid(group: str) -> str | None:
    """The domain UUID in a VM's dedicated group name (:func:`vm_group`).

    None unless the group is named as the hook names them, with a
    canonical UUID.
    """
    if not group.startswith(VM_GROUP_PREFIX):
        return None
    uuid = group[len(VM_GROUP_PREFIX):]
    return uuid if uuids.is_canonical(uuid) else None


def pool_group(pool: str) -> str:
    return GROUP_PREFIX + 'pool-' + pool


PMD_GROUP = GROUP_PREFIX + 'ovs-pmd'


class Request:
    """What one of our groups should hold.

    Either ``ways`` (a count per cache domain: the allocator places it) or
    ``cbm`` (explicit masks per domain).  Domains absent from both hold no
    ways: there the group's mask follows the default group's (the group's
    tasks never run there).  ``exclusive`` sets the kernel mode when the
    group holds ways on every domain.  ``mb`` overrides ``mb_percent`` per
    domain (the dynamic policy's cap on the best-effort pool).
    """

    __slots__ = ('name', 'ways', 'cbm', 'exclusive', 'mb_percent', 'mb')

    def __init__(self, name: str, ways: dict[int, int] | None = None,
                 cbm: dict[int, CBM] | None = None, exclusive: bool = True,
                 mb_percent: int | None = None,
                 mb: dict[int, int] | None = None) -> None:
        self.name = name
        self.ways = ways or {}
        self.cbm = cbm or {}
        self.exclusive = exclusive
        self.mb_percent = mb_percent
        self.mb = mb or {}

    def mb_on(self, domain: int) -> int:
        """The MB percent asked for on ``domain`` (100: no cap)."""
        return self.mb.get(domain, self.mb_percent or 100)

    @property
    def domains(self) -> frozenset[int]:
        return frozenset(self.ways) | frozenset(self.cbm)

    def __repr__(self) -> str:
        return 'Request(%r, ways=%r, cbm=%r)' % (self.name, self.ways,
                                                 self.cbm)


#: The name the root group goes by in metrics, ``top`` and ``profile``.
DEFAULT_LABEL = 'default'


def label_of(name: str) -> str:
    """A group's name for people and metrics: ``default`` for the root."""
    return DEFAULT_LABEL if name == ROOT else name


def group_of(label: str) -> str:
    """The resctrl group name for a label (:func:`label_of` reversed)."""
    return ROOT if label == DEFAULT_LABEL else label
