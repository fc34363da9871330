"""Resource groups and which group each host thread is in."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ovs_rdt.emulator.host import Host, TaskInfo

SHAREABLE = 'shareable'
EXCLUSIVE = 'exclusive'
LOCKSETUP = 'pseudo-locksetup'
LOCKED = 'pseudo-locked'
CTRL = 'ctrl'
MON = 'mon'


@dataclass(eq=False)
class Group:
    name: str
    kind: str                    # CTRL or MON
    closid_: int
    rmid: int
    parent: Optional['Group'] = None
    mode: str = SHAREABLE
    perm: int = 0o755
    uid: int = 0
    gid: int = 0
    ctime: float = 0.0
    cpus: set[int] = field(default_factory=set)
    mon_groups: dict[str, 'Group'] = field(default_factory=dict)
    alive: bool = True
    moved_to: Optional['Group'] = None
    mba_event: str = ''          # mba_MBps_event of a control group (mba_MBps mounts)

    @property
    def closid(self) -> int:
        return self.parent.closid if self.kind == MON and self.parent else self.closid_

    @property
    def ctrl(self) -> 'Group':
        return self.parent if self.kind == MON and self.parent else self

    def effective(self) -> 'Group':
        grp = self
        while not grp.alive and grp.moved_to is not None:
            grp = grp.moved_to
        return grp


class _Record:
    """A thread's group history: (tick, last pid allocated then, group)."""

    __slots__ = ('start', 'history')

    def __init__(self, start: int, birth: Group) -> None:
        self.start = start
        self.history: list[tuple[int, Optional[int], Group]] = [(start, None, birth)]

    @property
    def group(self) -> Group:
        return self.history[-1][2].effective()

    def group_at(self, tick: int, tid: int) -> Group:
        """The group when thread ``tid`` was born at ``tick``.

        ``/proc`` start times have 10 ms resolution; within the tick of a move
        the pid allocated last at the move tells older threads from newer ones.
        """
        grp = self.history[0][2]
        for when, last_pid, where in self.history[1:]:
            if when < tick or (when == tick and (last_pid is None or tid > last_pid)):
                grp = where
        return grp


class TaskTable:
    """Which group each host thread is in (closid/rmid of a task_struct)."""

    def __init__(self, host: Host, root: Group) -> None:
        self.host = host
        self.root = root
        self.known: dict[int, int] = {}         # tid -> start, birth resolved
        self.records: dict[int, _Record] = {}   # tids not born into root

    def _resolve(self, tid: int, tgid: int, info: TaskInfo, depth: int = 0) -> None:
        """Find the group a thread was born into (its creator's, at birth)."""
        if self.known.get(tid) == info.start:
            return
        self.records.pop(tid, None)
        creator = tgid if tgid != tid else info.ppid
        birth = self.root
        if depth < 16 and creator > 0 and creator != tid:
            if creator not in self.known:
                cinfo = self.host.info(creator)
                if cinfo is not None and cinfo.start <= info.start:
                    self._resolve(creator, creator, cinfo, depth + 1)
            crec = self.records.get(creator)
            if crec is not None and crec.start <= info.start:
                birth = crec.group_at(info.start, tid)
        self.known[tid] = info.start
        if birth is not self.root:
            self.records[tid] = _Record(info.start, birth)

    def current(self, tid: int, info: TaskInfo) -> Group:
        if self.known.get(tid) != info.start:
            tgid = self.host.tgid(tid) or tid
            self._resolve(tid, tgid, info)
        rec = self.records.get(tid)
        return rec.group if rec else self.root

    def move(self, tid: int, info: TaskInfo, group: Group) -> None:
        self.current(tid, info)
        rec = self.records.get(tid)
        if rec is None:
            rec = self.records[tid] = _Record(info.start, self.root)
        rec.history.append((self.host.now_ticks(), self.host.last_pid(), group))

    def snapshot(self) -> dict[int, tuple[int, Group]]:
        """tid -> (tgid, effective group) for every live thread."""
        live = self.host.threads()
        result: dict[int, tuple[int, Group]] = {}
        for tgid, tid in live:
            if tid not in self.known:
                info = self.host.info(tid)
                if info is None:
                    continue
                self._resolve(tid, tgid, info)
            rec = self.records.get(tid)
            result[tid] = (tgid, rec.group if rec else self.root)
        for tid in [t for t in self.known if t not in result]:
            del self.known[tid]
            self.records.pop(tid, None)
        return result
