"""Platform profiles the resctrl emulator can pretend to be.

A profile is the hardware the kernel would have enumerated through CPUID:
socket/core layout, the L3 geometry (CBM length, size, CLOSIDs), MBA and
the monitoring capabilities.  Values come from the documents in the README's
References (the application note: Gold 6230; the resctrl tutorial: E7-8890
v4), Intel's and AMD's published specifications
and the kernel's x86 resctrl code (``arch/x86/kernel/cpu/resctrl/core.c``);
doc/emulator.md names the source of every profile.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterable

MiB = 1024 * 1024


@dataclass(frozen=True)
class Profile:
    """The emulated platform.  Every field can be overridden (``--set``)."""

    name: str
    description: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    l3_size: int                 # bytes per L3 cache (= per socket)
    cbm_len: int                 # ways in the capacity bitmask
    l3_num_closids: int
    num_rmids: int
    mem_bw: int                  # peak memory bandwidth per socket, bytes/s
    mba: bool = True
    mb_num_closids: int = 16
    min_bandwidth: int = 10
    bandwidth_gran: int = 10
    delay_linear: bool = True
    thread_throttle_mode: str = 'max'
    min_cbm_bits: int = 1
    shareable_bits: int = 0
    sparse_masks: bool = False
    #: A new group keeps every shareable and unused way, however sparse
    #: (tip's cbm_ensure_valid() on sparse_masks platforms); else the lowest run.
    sparse_new_group: bool = False
    cdp_capable: bool = True
    mon_scale: int = 64          # CPUID.0xF.1:EBX upscaling factor (bytes)
    possible_cpus: int = 0       # nr_cpu_ids; 0 means "= online CPUs"
    # -- platforms after Cascade Lake (issue 14) ------------------------------
    vendor: str = 'intel'        # 'intel' or 'amd' (rdt_init_res_defs_*)
    kernel: str = '6.15'         # fs/resctrl generation emulated (files present)
    l3_per_socket: int = 1       # AMD: one L3 per CCD/CCX
    snc_nodes: int = 1           # Intel Sub-NUMA Clustering: nodes per L3
    mb_max: int = 100            # r->membw.max_bw (AMD: 1 << CPUID 0x80000020 EAX)
    smba: bool = False           # AMD slow-memory bandwidth allocation
    io_alloc: bool = False       # io_alloc_capable (AMD SDCIAE)
    mbm_cntrs: int = 0           # assignable MBM counters per domain (AMD ABMC)
    l2_size: int = 0             # bytes per core; AMD: boot_cpu_data.x86_cache_size

    # -- derived geometry ---------------------------------------------------
    @property
    def num_cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    @property
    def nr_cpu_ids(self) -> int:
        return max(self.possible_cpus, self.num_cpus)

    @property
    def domains(self) -> list[int]:
        """L3 cache ids: the control (and, without SNC, monitoring) domains."""
        return list(range(self.sockets * self.l3_per_socket))

    @property
    def nodes(self) -> list[int]:
        """NUMA node ids (SNC: several per L3; otherwise one per socket)."""
        return list(range(self.sockets * self.snc_nodes))

    @property
    def arch_needs_linear(self) -> bool:
        return self.vendor == 'intel'

    @property
    def mon_num_rmids(self) -> int:
        """``r->mon.num_rmid``: SNC splits the hardware RMIDs between nodes."""
        return self.num_rmids // self.snc_nodes

    @property
    def hw_mon_scale(self) -> int:
        """``hw_res->mon_scale``: CPUID's factor divided by the SNC nodes."""
        return max(self.mon_scale // self.snc_nodes, 1)

    def version(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.kernel.split('.') if p.isdigit())

    @property
    def cbm_mask(self) -> int:
        return (1 << self.cbm_len) - 1

    @property
    def way_size(self) -> int:
        return self.l3_size // self.cbm_len

    @property
    def num_closids(self) -> int:
        """The kernel uses the smallest CLOSID count of all resources."""
        if self.mba:
            return min(self.l3_num_closids, self.mb_num_closids)
        return self.l3_num_closids

    def socket_of(self, cpu: int) -> int:
        """Linux numbering: first threads of all sockets, then siblings."""
        return (cpu // self.cores_per_socket) % self.sockets

    def core_of(self, cpu: int) -> int:
        return cpu % self.cores_per_socket

    def l3_of(self, cpu: int) -> int:
        """The L3 id of a CPU: its socket's, or its CCD's (cores split evenly)."""
        per = self.l3_per_socket
        return self.socket_of(cpu) * per + self.core_of(cpu) * per // self.cores_per_socket

    def node_of(self, cpu: int) -> int:
        """NUMA node: under SNC the socket's cores are cut into ``snc_nodes``
        runs as even as possible (128 cores / 3 = 43 + 43 + 42).
        """
        snc = self.snc_nodes
        return self.socket_of(cpu) * snc + self.core_of(cpu) * snc // self.cores_per_socket

    def l3_of_node(self, node: int) -> int:
        return self.l3_of(self.cpus_of_node(node)[0])

    def cpus_of(self, domain: int) -> list[int]:
        """CPUs sharing L3 ``domain``."""
        return [c for c in range(self.num_cpus) if self.l3_of(c) == domain]

    def cpus_of_socket(self, socket: int) -> list[int]:
        return [c for c in range(self.num_cpus) if self.socket_of(c) == socket]

    def cpus_of_node(self, node: int) -> list[int]:
        return [c for c in range(self.num_cpus) if self.node_of(c) == node]

    def siblings_of(self, cpu: int) -> list[int]:
        stride = self.sockets * self.cores_per_socket
        first = cpu % stride
        return [first + i * stride for i in range(self.threads_per_core)]

    @property
    def realloc_limit(self) -> int:
        """``resctrl_rmid_realloc_limit``: ``boot_cpu_data.x86_cache_size``
        in bytes, which only Intel's cacheinfo sets to the L3; on AMD it stays
        the L2 of ``cpu_detect_cache_sizes()`` (CPUID 0x80000006).
        """
        if self.vendor == 'amd' and self.l2_size:
            return self.l2_size
        return self.l3_size

    def round_mon_val(self, val: int) -> int:
        """``resctrl_arch_round_mon_val()``: CPUID's scale, not the SNC one."""
        return val // self.mon_scale * self.mon_scale

    def max_threshold_occupancy(self) -> int:
        """x86 default: realloc limit / num_rmid, rounded to CPUID's scale."""
        return self.round_mon_val(self.realloc_limit // self.mon_num_rmids)

    def with_overrides(self, overrides: Iterable[tuple[str, str]]) -> 'Profile':
        """A copy with ``field=value`` pairs applied (values as text)."""
        types = {f.name: f.type for f in dataclasses.fields(self)}
        changes: dict[str, object] = {}
        for key, text in overrides:
            if key not in types or key in ('name', 'description'):
                raise ValueError('unknown profile field %r' % key)
            kind = str(types[key])
            if kind == 'bool':
                if text.lower() not in ('0', '1', 'true', 'false', 'yes', 'no'):
                    raise ValueError('%s must be a boolean, not %r' % (key, text))
                changes[key] = text.lower() in ('1', 'true', 'yes')
            elif kind == 'int':
                changes[key] = int(text, 0)
            else:
                changes[key] = text
        profile = dataclasses.replace(self, **changes)  # type: ignore[arg-type]
        profile.validate()
        return profile

    def validate(self) -> None:
        if not 1 <= self.cbm_len <= 32:
            raise ValueError('cbm_len must be 1-32')
        if self.sockets < 1 or self.cores_per_socket < 1 or self.threads_per_core < 1:
            raise ValueError('sockets, cores_per_socket and threads_per_core must be >= 1')
        if self.l3_num_closids < 1 or (self.mba and self.mb_num_closids < 1):
            raise ValueError('num_closids must be >= 1')
        if self.num_rmids < 1 or self.mon_scale < 1:
            raise ValueError('num_rmids and mon_scale must be >= 1')
        if self.shareable_bits >> self.cbm_len:
            raise ValueError('shareable_bits beyond the CBM')
        if self.thread_throttle_mode not in ('max', 'per-thread', ''):
            raise ValueError('thread_throttle_mode must be max, per-thread or empty')
        if self.vendor not in ('intel', 'amd'):
            raise ValueError('vendor must be intel or amd')
        if self.l3_per_socket < 1 or self.snc_nodes < 1 or self.mb_max < 1:
            raise ValueError('l3_per_socket, snc_nodes and mb_max must be >= 1')
        if self.l3_per_socket > 1 and self.snc_nodes > 1:
            raise ValueError('SNC needs one L3 per socket')
        if self.cores_per_socket % self.l3_per_socket:
            raise ValueError('cores_per_socket must split evenly between the L3s')
        if self.snc_nodes > self.cores_per_socket or self.num_rmids < self.snc_nodes:
            raise ValueError('too many SNC nodes')
        if self.l2_size < 0:
            raise ValueError('l2_size must be >= 0')
        if not self.version() or self.mbm_cntrs < 0:
            raise ValueError('kernel must look like 6.18, mbm_cntrs >= 0')


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile(
        name='xeon-gold-6230',
        description='2nd gen Xeon Scalable (Cascade Lake), 2 sockets x 20 cores, '
                    'HT off; seed 000',
        sockets=2, cores_per_socket=20, threads_per_core=1,
        l3_size=28835840, cbm_len=11, l3_num_closids=16,
        num_rmids=176, mem_bw=140_800_000_000,   # 6 x DDR4-2933
        mba=True, mb_num_closids=16,
    ),
    Profile(
        name='xeon-e7-8890-v4',
        description='Xeon E7 v4 (Broadwell-EX), 4 sockets x 24 cores, HT off; seed 001',
        sockets=4, cores_per_socket=24, threads_per_core=1,
        l3_size=60 * MiB, cbm_len=20, l3_num_closids=16,
        num_rmids=176, mem_bw=51_200_000_000,    # 4 x DDR4-1600
        mba=True, mb_num_closids=16,
    ),
    Profile(
        name='xeon-d-1540',
        description='Xeon D-1540 (Broadwell-DE), 1 socket, 8 cores / 16 threads, no MBA',
        sockets=1, cores_per_socket=8, threads_per_core=2,
        l3_size=12 * MiB, cbm_len=12, l3_num_closids=16,
        num_rmids=64, mem_bw=34_100_000_000,     # 2 x DDR4-2133
        mba=False, mb_num_closids=0,
    ),
    Profile(
        name='xeon-6-granite-rapids-snc3',
        description='Xeon 6 6980P (Granite Rapids-AP), 2 sockets x 128 cores / 256 '
                    'threads, Sub-NUMA Clustering SNC3 (3 NUMA nodes per socket)',
        sockets=2, cores_per_socket=128, threads_per_core=2,
        l3_size=504 * MiB, cbm_len=16, l3_num_closids=16,
        num_rmids=256, mem_bw=614_400_000_000,   # 12 x DDR5-6400
        mba=True, mb_num_closids=16, thread_throttle_mode='per-thread',
        snc_nodes=3, kernel='6.18',
    ),
    Profile(
        name='epyc-9654',
        description='AMD EPYC 9654 (Zen 4 Genoa), 2 sockets x 96 cores / 192 threads, '
                    '12 CCDs per socket, one 32 MiB L3 per CCD, MBA in 1/8 GB/s, SMBA',
        sockets=2, cores_per_socket=96, threads_per_core=2, l3_per_socket=12,
        l3_size=32 * MiB, cbm_len=16, l3_num_closids=16,
        num_rmids=256, mem_bw=460_800_000_000,   # 12 x DDR5-4800
        vendor='amd', mba=True, mb_num_closids=16, mb_max=2048,
        min_bandwidth=0, bandwidth_gran=1, delay_linear=False,
        thread_throttle_mode='', min_cbm_bits=0, sparse_masks=True,
        smba=True, kernel='6.18', l2_size=1 * MiB,
    ),
    Profile(
        name='epyc-9575f',
        description='AMD EPYC 9575F (Zen 5 Turin), 2 sockets x 64 cores / 128 threads, '
                    '8 CCDs per socket, one 32 MiB L3 per CCD, SMBA, io_alloc (SDCIAE), '
                    'assignable MBM counters (ABMC)',
        sockets=2, cores_per_socket=64, threads_per_core=2, l3_per_socket=8,
        l3_size=32 * MiB, cbm_len=16, l3_num_closids=16,
        num_rmids=256, mem_bw=614_400_000_000,   # 12 x DDR5-6400
        vendor='amd', mba=True, mb_num_closids=16, mb_max=2048,
        min_bandwidth=0, bandwidth_gran=1, delay_linear=False,
        thread_throttle_mode='', min_cbm_bits=0, sparse_masks=True,
        smba=True, io_alloc=True, mbm_cntrs=32, kernel='6.18', l2_size=1 * MiB,
    ),
)}

DEFAULT_PROFILE = 'xeon-gold-6230'


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError('unknown profile %r (known: %s)'
                         % (name, ', '.join(sorted(PROFILES)))) from None
