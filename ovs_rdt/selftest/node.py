"""The selftest's hands on resctrl: it reads anywhere, writes only below its
own groups.

Every group the selftest makes is ``ovsrdt-selftest-<pid>-<tag>``
(:data:`ovs_rdt.SELFTEST_GROUP_PREFIX`); :meth:`Node.write` and
:meth:`Node.rmdir` refuse any other path, so no other group (the default
one, libvirt's, pqos's, ovs-rdt's own) can be written by a mistake in a
check.  The tasks it moves are its own: parked threads (:meth:`Node.thread`)
and child processes that die with it (:meth:`Node.load`).
"""
from __future__ import annotations

from contextlib import AbstractContextManager
import errno
import logging
import os
import subprocess
import sys
import threading

from ovs_rdt.exceptions import NotOwnedError
from ovs_rdt.resctrl import Resctrl
from ovs_rdt import SELFTEST_GROUP_PREFIX

LOG = logging.getLogger(__name__)

#: Entries of the root that are not control groups.
NOT_GROUPS = ('info', 'mon_data', 'mon_groups')
#: ``last_cmd_status`` of a mkdir refused with ENOSPC for want of room:
#: CLOSIDs, RMIDs, or ways for a new group (``No space on L3:1``).
NO_ROOM = ('Out of CLOSIDs\n', 'Out of RMIDs\n', 'No space on ')

#: A child that streams through memory until its parent dies (a killed
#: selftest leaves no load behind: PR_SET_PDEATHSIG).  ``comm`` is
#: ``ovsrdt-load`` (the emulator's footprints file can give it a demand).
LOAD_SCRIPT = r'''
import ctypes, os, sys
ctypes.CDLL(None).prctl(1, 9)
if os.getppid() != int(sys.argv[2]):
    sys.exit(0)
with open('/proc/self/comm', 'w') as fh:
    fh.write('ovsrdt-load')
src, dst = bytearray(int(sys.argv[1])), bytearray(int(sys.argv[1]))
sys.stdout.write('ready\n')
sys.stdout.flush()
while True:
    dst[:] = src
'''


class Mismatch(Exception):
    """The kernel did not do what ovs-rdt expects: the behaviour fails."""


class Skip(Exception):
    """The node lacks what a check needs (no feature, no free ways)."""


def expect(ok: bool, fmt: str, *args: object) -> None:
    if not ok:
        raise Mismatch(fmt % args if args else fmt)


def errname(err: int | None) -> str:
    return errno.errorcode.get(err or 0, str(err))


class _Parked(threading.Thread):
    """A thread of ours that does nothing until told to end."""

    def __init__(self) -> None:
        super().__init__(name='selftest-parked', daemon=True)
        self.stop = threading.Event()
        self.started_up = threading.Event()
        self.tid = 0

    def run(self) -> None:
        self.tid = threading.get_native_id()
        self.started_up.set()
        self.stop.wait()


class Node:
    """resctrl at ``root`` as the selftest sees it."""

    def __init__(self, root: str, sysfs_cpu_root: str = '/sys/devices/system/cpu',
                 lock_timeout: float = 30.0, run: int | None = None) -> None:
        self.root = root.rstrip('/') or '/'
        self.resctrl = Resctrl(self.root, sysfs_cpu_root, lock_timeout)
        self.prefix = '%s%d-' % (SELFTEST_GROUP_PREFIX,
                                 os.getpid() if run is None else run)
        self._threads: list[_Parked] = []
        self._procs: list[subprocess.Popen] = []

    # -- reading ------------------------------------------------------------
    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel) if rel else self.root

    def read(self, rel: str) -> str:
        with open(self.path(rel), encoding='latin-1') as fh:
            return fh.read()

    def exists(self, rel: str) -> bool:
        return os.path.exists(self.path(rel))

    def listdir(self, rel: str) -> list[str]:
        return sorted(os.listdir(self.path(rel)))

    def status(self) -> str:
        """``info/last_cmd_status`` as the kernel wrote it (newline kept)."""
        return self.read('info/last_cmd_status')

    def groups(self) -> list[str]:
        """Every control group, the default one ('') first."""
        names = [n for n in os.listdir(self.root) if n not in NOT_GROUPS
                 and os.path.isdir(os.path.join(self.root, n))]
        return [''] + sorted(names)

    def mine(self) -> list[str]:
        return [n for n in self.groups() if n.startswith(self.prefix)]

    def tids(self, group: str) -> set[int]:
        return {int(t) for t in self.read(os.path.join(group, 'tasks')).split()}

    # -- writing: our own groups only -------------------------------------------
    def ours(self, rel: str) -> None:
        """Refuse (a bug in a check) any path outside our groups."""
        top = rel.split('/', 1)[0]
        if not top.startswith(self.prefix) or '..' in rel.split('/'):
            raise NotOwnedError('selftest refuses to touch %s: not one of its '
                                'groups (%s*)' % (self.path(rel), self.prefix))

    def write(self, rel: str, data: str | bytes) -> None:
        """One write(2), as a command to the kernel; OSError on refusal."""
        self.ours(rel)
        raw = data.encode('latin-1') if isinstance(data, str) else data
        fd = os.open(self.path(rel), os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, raw)
        finally:
            os.close(fd)

    def refused(self, rel: str, data: str | bytes, err: int,
                text: str | None) -> None:
        """Write, expecting the kernel to refuse with ``err`` and to say
        ``text`` in ``last_cmd_status`` (None: not checked).
        """
        try:
            self.write(rel, data)
        except OSError as exc:
            expect(exc.errno == err, 'writing %r to %s failed with %s, expected %s',
                   data, rel, errname(exc.errno), errname(err))
            if text is not None:
                said = self.status()
                expect(said == text, 'writing %r to %s: last_cmd_status %r, expected %r',
                       data, rel, said, text)
            return
        raise Mismatch('writing %r to %s was accepted, expected %s%s'
                       % (data, rel, errname(err),
                          '' if text is None else ' and %r' % text))

    def accepted(self, rel: str, data: str | bytes) -> None:
        """Write, expecting the kernel to accept."""
        try:
            self.write(rel, data)
        except OSError as exc:
            raise Mismatch('writing %r to %s failed with %s (last_cmd_status %r), '
                           'expected it to be accepted'
                           % (data, rel, errname(exc.errno), self.status())) from None

    def mkdir(self, tag: str) -> str:
        """A control group of ours; Skip when the kernel has no room for
        it (every CLOSID or RMID taken, maybe by another tool: the closids
        behaviour checks the count; or too few ways for a new group),
        Mismatch when it refuses it otherwise.
        """
        return self._mkdir(self.prefix + tag)

    def mkmon(self, group: str, tag: str) -> str:
        return self._mkdir('%s/mon_groups/%s' % (group, tag))

    def _mkdir(self, rel: str) -> str:
        self.ours(rel)
        try:
            os.mkdir(self.path(rel))
        except OSError as exc:
            said = self.status()
            if exc.errno == errno.ENOSPC and said.startswith(NO_ROOM):
                raise Skip('no room for a group of its own: mkdir %s said %r'
                           % (rel, said.strip())) from None
            raise Mismatch('mkdir %s failed with %s (last_cmd_status %r)'
                           % (rel, errname(exc.errno), said)) from None
        return rel

    def rmdir(self, rel: str) -> None:
        self.ours(rel)
        os.rmdir(self.path(rel))

    def lock(self) -> AbstractContextManager[None]:
        """``flock(LOCK_EX)`` on the root, as libvirt, pqos and ovs-rdt take
        it: no cooperating tool writes while a behaviour runs.
        """
        return self.resctrl.lock()

    # -- our own tasks ------------------------------------------------------------
    def thread(self) -> int:
        """The TID of a new thread of ours that waits until cleanup."""
        parked = _Parked()
        parked.start()
        parked.started_up.wait(10)
        self._threads.append(parked)
        return parked.tid

    def load(self, nbytes: int) -> int:
        """A child that streams through ``2 * nbytes`` of memory until
        cleanup (or our death); its PID once it streams.
        """
        proc = subprocess.Popen([sys.executable, '-c', LOAD_SCRIPT, str(nbytes),
                                 str(os.getpid())], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE)
        self._procs.append(proc)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b'ready':
            raise Mismatch('the memory load (a Python child) did not start')
        return proc.pid

    def end_tasks(self) -> None:
        for proc in self._procs:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        self._procs = []
        for parked in self._threads:
            parked.stop.set()
            parked.join(10)
        self._threads = []

    def cleanup(self) -> list[str]:
        """Remove every group of this run and end its tasks; the problems."""
        problems = []
        self.end_tasks()
        for name in self.mine():
            try:
                os.rmdir(self.path(name))
            except FileNotFoundError:
                pass
            except OSError as exc:
                problems.append('cannot remove %s: %s' % (name, exc.strerror))
        return problems

    def states(self) -> dict[str, tuple[str, str]]:
        """``(mode, schemata)`` of every control group, the default one
        ('') first; one its owner removed meanwhile is left out.
        """
        state = {}
        for name in self.groups():
            try:
                state[name] = (self.read(os.path.join(name, 'mode')),
                               self.read(os.path.join(name, 'schemata')))
            except OSError:
                continue
        return state
