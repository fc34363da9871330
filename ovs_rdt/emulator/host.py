"""The host's real threads, read from ``/proc`` (injectable for tests)."""
from __future__ import annotations

from dataclasses import dataclass
import os
import time
from typing import Optional, Protocol


@dataclass(frozen=True)
class TaskInfo:
    ppid: int
    start: int          # clock ticks since boot (/proc/<tid>/stat field 22)


class Host(Protocol):
    def threads(self) -> list[tuple[int, int]]:
        """``(tgid, tid)`` of every live thread."""

    def info(self, tid: int) -> Optional[TaskInfo]:
        """None when no such task exists."""

    def tgid(self, tid: int) -> Optional[int]:
        ...

    def uids(self, tid: int) -> Optional[tuple[int, int, int]]:
        """(real, effective, saved) uid."""

    def comm(self, tid: int) -> Optional[str]:
        ...

    def now_ticks(self) -> int:
        ...

    def last_pid(self) -> Optional[int]:
        """The pid allocated last (``/proc/sys/kernel/ns_last_pid``)."""

    def resident(self, tid: int) -> Optional[int]:
        """Bytes its process has resident while the thread runs (state R),
        else None.
        """


class ProcHost:
    """The real host, read from ``/proc``."""

    def __init__(self, proc: str = '/proc') -> None:
        self.proc = proc
        self.hz = os.sysconf('SC_CLK_TCK')
        self.page = os.sysconf('SC_PAGE_SIZE')

    def threads(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        try:
            pids = [int(p) for p in os.listdir(self.proc) if p.isdigit()]
        except OSError:
            return []
        for pid in pids:
            try:
                out.extend((pid, int(t)) for t in os.listdir('%s/%d/task' % (self.proc, pid)))
            except (OSError, ValueError):
                continue
        return out

    def _read(self, tid: int, name: str) -> Optional[str]:
        try:
            with open('%s/%d/%s' % (self.proc, tid, name), encoding='utf-8',
                      errors='replace') as fh:
                return fh.read()
        except OSError:
            return None

    def _stat(self, tid: int) -> list[str]:
        """``/proc/<tid>/stat`` from field 3 (state) on."""
        stat = self._read(tid, 'stat') if tid > 0 else None
        return stat[stat.rfind(')') + 2:].split() if stat else []

    def info(self, tid: int) -> Optional[TaskInfo]:
        fields = self._stat(tid)
        try:
            return TaskInfo(ppid=int(fields[1]), start=int(fields[19]))
        except (IndexError, ValueError):
            return None

    def resident(self, tid: int) -> Optional[int]:
        fields = self._stat(tid)
        try:
            return int(fields[21]) * self.page if fields[0] == 'R' else None
        except (IndexError, ValueError):
            return None

    def _status(self, tid: int, key: str) -> Optional[list[int]]:
        status = self._read(tid, 'status') or ''
        for line in status.splitlines():
            if line.startswith(key + ':'):
                return [int(v) for v in line.split()[1:]]
        return None

    def tgid(self, tid: int) -> Optional[int]:
        vals = self._status(tid, 'Tgid')
        return vals[0] if vals else None

    def uids(self, tid: int) -> Optional[tuple[int, int, int]]:
        vals = self._status(tid, 'Uid')
        return (vals[0], vals[1], vals[2]) if vals and len(vals) >= 3 else None

    def comm(self, tid: int) -> Optional[str]:
        text = self._read(tid, 'comm')
        return None if text is None else text.rstrip('\n')

    def now_ticks(self) -> int:
        return int(time.clock_gettime(time.CLOCK_BOOTTIME) * self.hz)

    def last_pid(self) -> Optional[int]:
        try:
            with open('%s/sys/kernel/ns_last_pid' % self.proc, encoding='ascii') as fh:
                return int(fh.read())
        except (OSError, ValueError):
            return None
