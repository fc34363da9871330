"""Platform profiles the resctrl emulator can pretend to be.

A profile is the hardware the kernel would have enumerated through CPUID:
socket/core layout, the L3 geometry (CBM length, size, CLOSIDs), MBA and
the monitoring capabilities.  Values come from the seed documents (seed 000:
Gold 6230, seed 001: E7-8890 v4) and Intel's published specifications.
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
    cdp_capable: bool = True
    mon_scale: int = 64          # CPUID.0xF.1:EBX upscaling factor (bytes)
    possible_cpus: int = 0       # nr_cpu_ids; 0 means "= online CPUs"

    # -- derived geometry ---------------------------------------------------
    @property
    def num_cpus(self) -> int:
        return self.sockets * self.cores_per_socket * self.threads_per_core

    @property
    def nr_cpu_ids(self) -> int:
        return max(self.possible_cpus, self.num_cpus)

    @property
    def domains(self) -> list[int]:
        return list(range(self.sockets))

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

    def cpus_of(self, domain: int) -> list[int]:
        return [c for c in range(self.num_cpus) if self.socket_of(c) == domain]

    def siblings_of(self, cpu: int) -> list[int]:
        stride = self.sockets * self.cores_per_socket
        first = cpu % stride
        return [first + i * stride for i in range(self.threads_per_core)]

    def max_threshold_occupancy(self) -> int:
        """x86 default: L3 size / num_rmids, rounded to ``mon_scale``."""
        threshold = self.l3_size // self.num_rmids
        return threshold // self.mon_scale * self.mon_scale

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
        if self.thread_throttle_mode not in ('max', 'per-thread'):
            raise ValueError('thread_throttle_mode must be max or per-thread')


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
)}

DEFAULT_PROFILE = 'xeon-gold-6230'


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError('unknown profile %r (known: %s)'
                         % (name, ', '.join(sorted(PROFILES)))) from None
