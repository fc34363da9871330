"""Plain value types shared by the resctrl layer and the allocator (no I/O)."""
from __future__ import annotations

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core import plan
from ovs_rdt import GROUP_PREFIX, SELFTEST_GROUP_PREFIX, VM_GROUP_PREFIX
from ovs_rdt.inputs import uuids
from ovs_rdt import POOL_GROUP_PREFIX

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Iterable

ROOT = ''
"""Name of the default (root) resctrl group."""

MODE_SHAREABLE = 'shareable'
MODE_EXCLUSIVE = 'exclusive'


#: Units of the values on a schemata ``MB:`` line (:attr:`MBInfo.unit`).
UNIT_PERCENT = 'percent'
"""Intel MBA, resctrl mounted without ``mba_MBps``: a percentage of the
peak bandwidth, ``min_bandwidth``-100 in steps of ``bandwidth_gran``."""
UNIT_MBPS = 'MiB/s'
"""resctrl mounted with ``-o mba_MBps`` (the kernel's software controller):
a bandwidth in MiB/s, any 32-bit number, ``MBA_MAX_MBPS`` (U32_MAX) for no
cap."""
UNIT_AMD = '1/8 GB/s'
"""AMD (``info/MB/delay_linear`` 0 and ``min_bandwidth`` 0; no Intel MBA
the kernel enables has either): a bandwidth limit in units of 1/8 GB/s; the largest value (2048 as
the kernel sets it on a fresh mount) is the "unlimited" bit."""

#: ``MBA_MAX_MBPS`` (include/linux/resctrl.h): an mba_MBps group's value
#: when nobody capped it.
MBA_MAX_MBPS = 0xFFFFFFFF
#: ``MAX_MBA_BW_AMD``: AMD's MB value for "no limit" where the default
#: group does not show it.
MAX_MBA_BW_AMD = 2048
#: Bytes per second in one AMD MB unit (1/8 GB/s).
AMD_UNIT_BYTES = 125000000
MIB = 1 << 20

#: The request field each unit takes (``mb_percent`` / ``mb_mbps``).
UNIT_FIELD = {UNIT_PERCENT: 'mb_percent', UNIT_MBPS: 'mb_mbps', UNIT_AMD: 'mb_mbps'}


class MBInfo:
    """Memory Bandwidth Allocation capabilities (info/MB) and MB unit."""

    __slots__ = ('min_bandwidth', 'bandwidth_gran', 'delay_linear', 'domains',
                 'unit', 'max_value', 'event_file')

    def __init__(self, min_bandwidth: int, bandwidth_gran: int,
                 delay_linear: bool, domains: tuple[int, ...],
                 unit: str = UNIT_PERCENT, max_value: int | None = None,
                 event_file: bool = False) -> None:
        #: mba_MBps mounts: groups have ``mba_MBps_event`` (Linux 6.14+;
        #: before, the software controller always follows mbm_local_bytes).
        self.event_file = event_file
        self.min_bandwidth = min_bandwidth
        self.bandwidth_gran = bandwidth_gran
        self.delay_linear = delay_linear
        self.domains = domains
        self.unit = unit
        if max_value is None:
            max_value = {UNIT_MBPS: MBA_MAX_MBPS,
                         UNIT_AMD: MAX_MBA_BW_AMD}.get(unit, 100)
        self.max_value = max_value

    @property
    def field(self) -> str:
        """The request field this platform takes: mb_percent or mb_mbps;
        '' on a non-linear Intel MBA, whose every value the kernel refuses.
        """
        if self.unit == UNIT_PERCENT and not self.delay_linear:
            return ''
        return UNIT_FIELD[self.unit]

    @property
    def kind(self) -> str:
        """What the MB values are here, for messages and ``status``."""
        if self.unit == UNIT_MBPS:
            return ('MB values are MiB/s (resctrl is mounted with '
                    'mba_MBps)')
        if self.unit == UNIT_AMD:
            return ('MB values are AMD bandwidth limits in 1/8 GB/s '
                    '(info/MB/delay_linear is 0)')
        if not self.delay_linear:
            return ('MB values cannot be set: the kernel refuses every value '
                    'of a non-linear Intel MBA (info/MB/delay_linear is 0)')
        return ('MB values are percentages (resctrl is mounted without '
                'mba_MBps)')

    def round(self, percent: int) -> int:
        """The value the kernel will keep for ``percent`` (rounded up)."""
        gran = self.bandwidth_gran or 1
        return min(100, -(-percent // gran) * gran)

    def value(self, percent: int | None = None,
              mbps: int | None = None) -> int:
        """The ``MB:`` value for a cap (the platform's maximum for none).

        ``percent`` counts on a percent platform only and ``mbps`` on the
        others (:func:`ovs_rdt.inputs.request.check_host` refuses the
        other kind before a plan is made).  On AMD a MiB/s cap becomes
        1/8 GB/s units, rounded up (never a tighter cap than asked), at
        least 1, at most the maximum.
        """
        if self.unit == UNIT_PERCENT:
            return self.round(percent) if percent is not None else 100
        if mbps is None:
            return self.max_value
        if self.unit == UNIT_AMD:
            units = -(-mbps * MIB // AMD_UNIT_BYTES)
            return max(1, min(self.max_value, units))
        return min(self.max_value, mbps)

    def mbps_of(self, value: int) -> int:
        """The MiB/s a non-percent ``value`` stands for (rounded down)."""
        if self.unit == UNIT_AMD:
            return value * AMD_UNIT_BYTES // MIB
        return value


def mb_terms(mba: MBInfo | None) -> tuple[int | None, str, str]:
    """What :func:`ovs_rdt.inputs.request.check_mb` checks a cap against:
    ``(min percent or None without MBA, the field the host takes, why)``.
    """
    if mba is None:
        return None, UNIT_FIELD[UNIT_PERCENT], ''
    return mba.min_bandwidth, mba.field, mba.kind


def uncapped_mb(mba: MBInfo | None) -> int:
    """The ``MB:`` value of a group without a cap, in the platform's unit.

    100 percent, ``MBA_MAX_MBPS``, AMD's maximum.
    """
    return mba.max_value if mba is not None else 100


class Platform:
    """What the platform offers, read from ``info/`` and the root group."""

    __slots__ = ('cbm_len', 'min_cbm_bits', 'num_closids', 'shareable_bits',
                 'sparse_masks', 'domains', 'cache_bytes', 'mb', 'mon_features',
                 'num_rmids', 'cpu_domains', 'cdp', 'smba',
                 'io_alloc', 'io_alloc_cbm', 'mbm_assign_mode')

    def __init__(self, cbm_len: int, num_closids: int,
                 domains: tuple[int, ...], min_cbm_bits: int = 1,
                 shareable_bits: int = 0, sparse_masks: bool = False,
                 cache_bytes: dict[int, int] | None = None,
                 mb: MBInfo | None = None,
                 mon_features: tuple[str, ...] = (), num_rmids: int = 0,
                 cpu_domains: dict[int, int] | None = None,
                 cdp: bool = False, smba: bool = False,
                 io_alloc: str | None = None,
                 io_alloc_cbm: dict[int, CBM] | None = None,
                 mbm_assign_mode: str | None = None) -> None:
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
        #: CPU id -> L3 domain id (empty when unknown); None: not read
        #: (the resctrl layer reads it only when asked,
        #: ``Resctrl.platform(cpus=True)``: it is a hundred sysfs reads,
        #: and the hook needs it just for pinned VMs).
        self.cpu_domains = cpu_domains
        #: L3 code/data prioritisation (mounted ``-o cdp``): every group
        #: has an ``L3CODE`` and an ``L3DATA`` mask, ``num_closids`` is
        #: already halved by the kernel.
        self.cdp = cdp
        #: AMD slow-memory bandwidth allocation (``info/SMBA``): ovs-rdt
        #: never writes ``SMBA:`` lines, the kernel keeps them.
        self.smba = smba
        #: ``info/L3/io_alloc``: None (no such file), ``enabled`` or
        #: ``disabled``.
        self.io_alloc = io_alloc
        #: Ways I/O may fill per domain (``io_alloc_cbm``) while enabled.
        self.io_alloc_cbm = io_alloc_cbm or {}
        #: ``info/L3_MON/mbm_assign_mode``'s active mode (``mbm_event`` or
        #: ``default``), None on kernels without the file.
        self.mbm_assign_mode = mbm_assign_mode

    def hw_shared(self, domain: int) -> int:
        """Ways of ``domain`` the hardware also fills: ``shareable_bits``
        and, while io_alloc is enabled, ``io_alloc_cbm``.  The kernel
        refuses them to an exclusive group; isolated requests never get
        them.
        """
        io = self.io_alloc_cbm.get(domain)
        return self.shareable_bits | (io.value if io is not None else 0)

    def io_ways(self, domain: int) -> CBM:
        """The ways of ``domain`` reserved for I/O (io_alloc; else none)."""
        return self.io_alloc_cbm.get(domain) or CBM.empty(self.cbm_len)

    def hw_shared_source(self, domain: int) -> str:
        """Where :meth:`hw_shared` comes from, for messages."""
        parts = []
        if self.shareable_bits:
            parts.append('info/L3/shareable_bits %x' % self.shareable_bits)
        if self.io_alloc_cbm.get(domain):
            parts.append('io_alloc_cbm %s' % self.io_alloc_cbm[domain])
        return ', '.join(parts) or 'info/L3/shareable_bits 0'

    @property
    def full_mask(self) -> CBM:
        return CBM.full(self.cbm_len)

    @property
    def mb_uncapped(self) -> int:
        """The ``MB:`` value of a group without a cap (:func:`uncapped_mb`)."""
        return uncapped_mb(self.mb)

    def way_bytes(self, domain: int) -> int:
        """Bytes of cache one way holds on ``domain`` (0 when unknown)."""
        return self.cache_bytes.get(domain, 0) // self.cbm_len

    def domains_of_cpus(self, cpus: Iterable[int] | None) -> frozenset[int]:
        """The L3 domains a group whose threads run on ``cpus`` holds ways on.

        The one rule (a VM's vCPUs in the hook, the PMD threads in the
        agent, the dynamic policy): the domains of those CPUs; every domain
        when ``cpus`` is None or empty (unpinned) or when one of them has
        no known domain (an offline CPU has no ``cache/`` in sysfs; it may
        come online in a domain not reserved), as
        :func:`ovs_rdt.core.topology.l3_of` does for a NUMA node it does
        not know.
        """
        if cpus and self.cpu_domains is None:
            raise RuntimeError('the CPUs\' cache domains were not read: '
                               'Resctrl.platform(cpus=True)')
        known = self.cpu_domains if cpus and self.cpu_domains else {}
        every = frozenset(self.domains)
        found = set()
        for cpu in cpus or ():
            if cpu not in known:
                return every
            found.add(known[cpu])
        return frozenset(found) or every


class Group:
    """One resctrl control group as read from the filesystem.

    Under CDP ``l3`` is what the group uses, its ``L3CODE`` and ``L3DATA``
    masks together (a way either of them has is in use), and ``l3code`` /
    ``l3data`` are the two masks as read; without CDP those are empty.
    """

    __slots__ = ('name', 'l3', 'mb', 'mode', 'tasks', 'cpus', 'l3code',
                 'l3data', 'mb_event')

    def __init__(self, name: str, l3: dict[int, CBM],
                 mb: dict[int, int] | None = None,
                 mode: str = MODE_SHAREABLE, tasks: list[int] | None = None,
                 cpus: frozenset[int] = frozenset(),
                 l3code: dict[int, CBM] | None = None,
                 l3data: dict[int, CBM] | None = None,
                 mb_event: str | None = None) -> None:
        #: ``mba_MBps_event`` (mba_MBps mounts, Linux 6.14+; else None).
        self.mb_event = mb_event
        self.name = name
        self.l3 = l3
        self.mb = mb or {}
        self.mode = mode
        self.tasks = tasks if tasks is not None else []
        self.cpus = cpus
        self.l3code = l3code or {}
        self.l3data = l3data or {}

    @property
    def cdp_split(self) -> bool:
        """Whether its code and data masks differ somewhere (CDP)."""
        return self.l3code != self.l3data

    @property
    def is_root(self) -> bool:
        return self.name == ROOT

    @property
    def owned(self) -> bool:
        """True for groups ovs-rdt created (name starts with ``ovsrdt-``)
        and manages: not ``ovs-rdt selftest``'s temporary ones, which the
        plans leave alone like another tool's.
        """
        return (self.name.startswith(GROUP_PREFIX)
                and not self.name.startswith(SELFTEST_GROUP_PREFIX))

    def __repr__(self) -> str:
        return 'Group(%r, L3:%s, %s)' % (self.name or '/',
                                         plan.domain_text(self.l3), self.mode)


def held(mask: CBM | None, root: CBM | None) -> bool:
    """Whether a group of ours holds ``mask`` as its own ways.

    A group that holds no ways on a domain has the default group's mask
    there; every mask that holds ways is disjoint from it.
    """
    if not mask:
        return False
    return root is None or not mask.overlaps(root)


def held_masks(group: Group, root: Group | None) -> dict[int, CBM]:
    """The masks a group of ours holds as its own ways, per domain
    (:func:`held`; where the default group has no mask, every non-empty
    mask is held).  Elsewhere the group follows the default group.
    """
    root_l3 = root.l3 if root is not None else {}
    return {d: m for d, m in group.l3.items() if held(m, root_l3.get(d))}


def vm_uuid(group: str) -> str | None:
    """The domain UUID in a VM's dedicated group name (:func:`ovs_rdt.vm_group`).

    None unless the group is named as the hook names them, with a
    canonical UUID.
    """
    if not group.startswith(VM_GROUP_PREFIX):
        return None
    uuid = group[len(VM_GROUP_PREFIX):]
    return uuid if uuids.is_canonical(uuid) else None


def pool_group(pool: str) -> str:
    return POOL_GROUP_PREFIX + pool


PMD_GROUP = GROUP_PREFIX + 'ovs-pmd'


class Request:
    """What one of our groups should hold.

    Either ``ways`` (a count per cache domain: the allocator places it) or
    ``cbm`` (explicit masks per domain).  Domains absent from both hold no
    ways: there the group's mask follows the default group's (the group's
    tasks never run there).  ``exclusive`` sets the kernel mode when the
    group holds ways on every domain.  ``mb`` overrides ``mb_percent`` per
    domain (the dynamic policy's cap on the best-effort pool).
    ``mb_mbps`` is the cap in MiB/s, for platforms whose MB values are
    bandwidths (:data:`UNIT_MBPS`, :data:`UNIT_AMD`).  ``mb_event`` is the
    ``mba_MBps_event`` to write (None: the group's is left as it is).
    Under CDP, ``code`` and ``data`` are explicit masks for the two lines
    (``cbm`` is then what they use together); empty: both get the mask.
    """

    __slots__ = ('name', 'ways', 'cbm', 'exclusive', 'mb_percent', 'mb',
                 'mb_mbps', 'mb_event', 'code', 'data')

    def __init__(self, name: str, ways: dict[int, int] | None = None,
                 cbm: dict[int, CBM] | None = None, exclusive: bool = True,
                 mb_percent: int | None = None,
                 mb: dict[int, int] | None = None,
                 mb_mbps: int | None = None,
                 mb_event: str | None = None,
                 code: dict[int, CBM] | None = None,
                 data: dict[int, CBM] | None = None) -> None:
        self.mb_event = mb_event
        self.code = code or {}
        self.data = data or {}
        self.name = name
        self.ways = ways or {}
        self.cbm = cbm or {}
        self.exclusive = exclusive
        self.mb_percent = mb_percent
        self.mb = mb or {}
        self.mb_mbps = mb_mbps

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


def group_of_label(label: str) -> str:
    """The resctrl group name for a label (:func:`label_of` reversed)."""
    return ROOT if label == DEFAULT_LABEL else label
