"""The platforms of issue 14 as test cases, and what each should give.

Used by the functional tests (``tests/functional/test_profiles.py``: the
demo, a VM annotation, the OvS knobs and ``ovs-rdt provider-config`` on a
mounted emulator of every case).  Expectations come from the emulator's profile definitions (the
hardware), never from ovs-rdt's own reading of resctrl.
"""
from __future__ import annotations

from typing import NamedTuple

from ovs_rdt.emulator.profiles import PROFILES

#: The hook's and provider-config's configuration in these tests: the
#: default group keeps 2 ways, pool ``noisy`` (not isolated) holds 2.
SYSTEM_MIN_WAYS = 2
NOISY_WAYS = 2
#: io_alloc, where a case enables it: the top 3 ways of every domain.
IO_ALLOC_CBM = 0xe000


class Case(NamedTuple):
    profile: str
    options: tuple[str, ...] = ()
    io_alloc: bool = False

    @property
    def id(self) -> str:
        return self.profile + ''.join('-' + o for o in self.options[1::2]) \
            + ('-io_alloc' if self.io_alloc else '')

    @property
    def cdp(self) -> bool:
        return 'cdp' in self.options

    @property
    def cbm_len(self) -> int:
        return PROFILES[self.profile].cbm_len

    @property
    def domains(self) -> int:
        p = PROFILES[self.profile]
        return p.sockets * p.l3_per_socket

    @property
    def groups(self) -> int:
        """Cache groups (what a Placement way counts on): the L3 caches of
        one socket on every profile here (one NUMA node per socket, or SNC
        nodes sharing its L3).
        """
        return PROFILES[self.profile].sockets

    @property
    def closids(self) -> int:
        """CLOSIDs for groups: the smallest count, halved under CDP, one
        fewer with io_alloc enabled (the kernel gives it the highest).
        """
        p = PROFILES[self.profile]
        n = min(p.l3_num_closids, p.mb_num_closids) if p.mba \
            else p.l3_num_closids
        if self.cdp:
            n //= 2
        return n - (1 if self.io_alloc else 0)

    @property
    def mb(self) -> str | None:
        """How MB caps are given: percent, mbps (mba_MBps) or amd."""
        p = PROFILES[self.profile]
        if not p.mba:
            return None
        if p.vendor == 'amd':
            return 'amd'
        return 'mbps' if 'mba_MBps' in self.options else 'percent'

    @property
    def system_ways(self) -> int:
        """Ways per domain VMs cannot have with the tests' configuration:
        the default group's 2 and pool noisy's 2; with io_alloc the ways
        shared with I/O too, where VMs' isolated groups never go and the
        default group's floor is not counted, but the shareable pool,
        packed from the highest way down, sits.
        """
        if not self.io_alloc:
            return SYSTEM_MIN_WAYS + NOISY_WAYS
        io_ways = bin(IO_ALLOC_CBM).count('1')
        return max(io_ways, NOISY_WAYS) + SYSTEM_MIN_WAYS


#: Every emulated profile, and the mount options where they apply.
CASES = [
    Case('xeon-gold-6230'),
    Case('xeon-gold-6230', ('-o', 'cdp')),
    Case('xeon-gold-6230', ('-o', 'mba_MBps')),
    Case('xeon-e7-8890-v4'),
    Case('xeon-d-1540'),
    Case('xeon-6-granite-rapids-snc3'),
    Case('epyc-9654'),
    Case('epyc-9575f'),
]
#: provider-config also sees io_alloc enabled.
CAPACITY_CASES = CASES + [Case('epyc-9575f', io_alloc=True)]


def ids(cases: list[Case]) -> list[str]:
    return [c.id for c in cases]
