"""ovs-vswitchd's threads, from its pidfile and ``/proc`` (no ovsdbapp).

A PMD thread is named ``pmd-cNN/id:M`` (``NN`` its core); its core is taken
from the name and, once ovs-vswitchd has pinned it, from its affinity.
Every other thread of the process (the main thread, handlers,
revalidators, urcu...) is an "other" thread.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from ovs_rdt import procfs

VSWITCHD_COMM = 'ovs-vswitchd'


class PmdThread(NamedTuple):
    tid: int
    comm: str
    cores: frozenset[int]


class Scan:
    """One look at ovs-vswitchd: its pid, PMD threads and other threads."""

    def __init__(self, pid: int | None, pmds: list[PmdThread] | None = None,
                 others: list[int] | None = None, why: str = '') -> None:
        self.pid = pid
        self.pmds = pmds or []
        self.others = others or []
        #: Why there is no pid (for the status line).
        self.why = why
        self.key: tuple = (pid, tuple((p.tid, p.comm) for p in self.pmds),
                           tuple(self.others))

    @property
    def cores(self) -> frozenset[int]:
        out: set[int] = set()
        for pmd in self.pmds:
            out |= pmd.cores
        return frozenset(out)

    @property
    def pmd_tids(self) -> list[int]:
        return [p.tid for p in self.pmds]

    def __repr__(self) -> str:
        return 'Scan(pid=%r, pmds=%r, others=%d)' % (self.pid, self.pmds,
                                                     len(self.others))


def find_vswitchd(pidfile: str, proc: str = procfs.PROC) -> tuple[int | None,
                                                                  str]:
    """``(pid, '')`` of the running ovs-vswitchd, else ``(None, why)``."""
    pid = procfs.read_pidfile(pidfile, proc)
    if pid is None:
        return None, 'ovs-vswitchd is not running (no live pid in %s)' % pidfile
    comm = procfs.comm_of(pid, proc)
    if comm != VSWITCHD_COMM or not procfs.alive(pid, proc):
        return None, ('ovs-vswitchd is not running (pid %d from %s is %s)'
                      % (pid, pidfile, 'gone' if comm is None else repr(comm)))
    return pid, ''


def scan(pidfile: str, proc: str = procfs.PROC,
         affinity: Callable[[int], frozenset[int]] = procfs.affinity) -> Scan:
    """Find ovs-vswitchd and sort its threads."""
    pid, why = find_vswitchd(pidfile, proc)
    if pid is None:
        return Scan(None, why=why)
    pmds: list[PmdThread] = []
    others: list[int] = []
    for tid, comm in procfs.threads(pid, proc):
        core = procfs.parse_pmd_comm(comm)
        if core is None:
            others.append(tid)
            continue
        cores = {core}
        pinned = affinity(tid)
        if len(pinned) == 1:  # not yet pinned: the name alone
            cores |= pinned
        pmds.append(PmdThread(tid, comm, frozenset(cores)))
    if not pmds and not others:
        return Scan(None, why='ovs-vswitchd (pid %d) has exited' % pid)
    return Scan(pid, pmds, others)
