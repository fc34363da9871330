"""Threads and processes from /proc (root injectable for tests)."""
from __future__ import annotations

import os
import time

from ovs_rdt.inputs.integers import whole
from ovs_rdt.inputs import uuids

PROC = '/proc'


#: Process states (``/proc/PID/stat``'s third field) of a process that has
#: exited: a zombie waits for its parent to reap it, but runs nothing more
#: and holds no lock, pidfile or thread.
EXITED_STATES = ('Z', 'X')


def _stat(path: str) -> list[str]:
    """A ``stat`` file's fields after the command name (state first); []
    if gone.
    """
    try:
        with open(path, encoding='ascii', errors='replace') as fh:
            return fh.read().rsplit(')', 1)[1].split()
    except (OSError, IndexError):
        return []


def state_of(pid: int, proc: str = PROC, tid: int | None = None) -> str | None:
    """The state letter of ``pid`` (or of its thread ``tid``); None if gone."""
    fields = _stat(os.path.join(proc, str(pid), 'task', str(tid), 'stat')
                   if tid is not None else os.path.join(proc, str(pid), 'stat'))
    return fields[0] if fields else None


def started(tid: int, proc: str = PROC) -> int | None:
    """When thread ``tid`` started, in clock ticks since boot (``stat``'s
    field 22); None if gone.
    """
    fields = _stat(os.path.join(proc, str(tid), 'stat'))
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def boot_ticks() -> int:
    """Now, in :func:`started`'s clock ticks."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf('SC_CLK_TCK'))


def alive(pid: int | None, proc: str = PROC) -> bool:
    """The one rule for "is this process running": it has a ``/proc``
    entry and is not a zombie (a zombie has exited; only its parent has not
    reaped it yet, and PID 1 in a container may never do it).
    """
    if not pid:
        return False
    state = state_of(pid, proc)
    return state is not None and state not in EXITED_STATES


def selftest_left(group: str, proc: str = PROC) -> bool:
    """Whether ``group`` is what an ``ovs-rdt selftest`` left behind: named
    ``ovsrdt-selftest-<pid>-...`` with no selftest running as that PID now
    (a ``kill -9`` leaves its groups; a PID that has come back as another
    process, or as this one, is not it).  Any ovs-rdt process may remove
    such a group: it is ovs-rdt's own, and nobody's any more.
    """
    from ovs_rdt import SELFTEST_GROUP_PREFIX

    if not group.startswith(SELFTEST_GROUP_PREFIX):
        return False
    pid = whole(group[len(SELFTEST_GROUP_PREFIX):].partition('-')[0])
    if not pid or pid == os.getpid() or not alive(pid, proc):
        return True
    try:
        with open(os.path.join(proc, str(pid), 'cmdline'), 'rb') as fh:
            return b'selftest' not in fh.read()
    except OSError:
        return True


def threads_alive(pid: int, proc: str = PROC) -> bool:
    """True while any thread of ``pid`` runs (:func:`alive`, per thread).

    A killed multi-threaded daemon's main thread turns zombie before its
    other threads are gone.
    """
    try:
        tids = os.listdir(os.path.join(proc, str(pid), 'task'))
    except OSError:
        return False
    return any(state_of(pid, proc, int(tid)) not in EXITED_STATES + (None,)
               for tid in tids if tid.isdigit())


def read_pidfile(path: str, proc: str = PROC) -> int | None:
    """The pid in ``path`` if that process is alive (:func:`alive`)."""
    try:
        with open(path, encoding='utf-8') as fh:
            pid = whole(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if alive(pid, proc) else None


def threads(pid: int, proc: str = PROC) -> list[tuple[int, str]]:
    """``(tid, comm)`` of every thread of ``pid`` (empty if it is gone)."""
    base = os.path.join(proc, str(pid), 'task')
    try:
        tids = sorted(int(t) for t in os.listdir(base) if t.isdigit())
    except OSError:
        return []
    out = []
    for tid in tids:
        comm = comm_of(tid, proc, pid)
        if comm is not None:
            out.append((tid, comm))
    return out


def comm_of(tid: int, proc: str = PROC, pid: int | None = None) -> str | None:
    path = (os.path.join(proc, str(pid), 'task', str(tid), 'comm')
            if pid is not None else os.path.join(proc, str(tid), 'comm'))
    try:
        with open(path, encoding='utf-8', errors='replace') as fh:
            return fh.read().rstrip('\n')
    except OSError:
        return None


def tgid_of(tid: int, proc: str = PROC) -> int | None:
    """The process (thread group) a thread belongs to."""
    try:
        with open(os.path.join(proc, str(tid), 'status'), encoding='ascii',
                  errors='replace') as fh:
            for line in fh:
                if line.startswith('Tgid:'):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def cmdline(pid: int, proc: str = PROC) -> list[str]:
    try:
        with open(os.path.join(proc, str(pid), 'cmdline'), 'rb') as fh:
            raw = fh.read()
    except OSError:
        return []
    return [a.decode('utf-8', 'replace') for a in raw.split(b'\0') if a]


def affinity(tid: int) -> frozenset[int]:
    """CPUs a thread may run on (empty if it is gone)."""
    try:
        return frozenset(os.sched_getaffinity(tid))
    except OSError:
        return frozenset()


def guest_of_cmdline(args: list[str]) -> tuple[str, str] | None:
    """``(name, uuid)`` of a guest's QEMU from its command line, else None.

    The one rule for what a QEMU process is: its command line gives the
    guest's UUID, ``-uuid U`` (``--uuid U`` and ``-uuid=U`` too; the last
    one counts, as for QEMU).  Whatever argv[0] says: libvirt runs what the
    domain's ``<emulator>`` names, e.g. ``/usr/bin/kvm``, a symlink to
    ``qemu-system-x86_64``.  The name is ``-name guest=N,...`` (or ``-name
    N``), else the UUID.
    """
    name = uuid = None
    for i, arg in enumerate(args):
        value = args[i + 1] if i + 1 < len(args) else None
        if arg in ('-uuid', '--uuid') and value is not None:
            uuid = uuids.canonical(value)
        elif arg.startswith(('-uuid=', '--uuid=')):
            uuid = uuids.canonical(arg.split('=', 1)[1])
        elif arg in ('-name', '--name') and value is not None:
            for part in value.split(','):
                if part.startswith('guest='):
                    name = part[len('guest='):]
                elif '=' not in part and not name:
                    name = part
    return (name or uuid, uuid) if uuid else None


def qemu_guest(pid: int, proc: str = PROC) -> tuple[str, str] | None:
    """``(name, uuid)`` if ``pid`` is a guest's QEMU (:func:`guest_of_cmdline`)."""
    return guest_of_cmdline(cmdline(pid, proc))


def qemu_pids(proc: str = PROC) -> dict[str, int]:
    """uuid -> pid of every guest's QEMU running (:func:`qemu_guest`)."""
    out: dict[str, int] = {}
    try:
        entries = os.listdir(proc)
    except OSError:
        return out
    for entry in entries:
        if entry.isdigit():
            guest = qemu_guest(int(entry), proc)
            if guest is not None:
                out[guest[1]] = int(entry)
    return out


def qemu_threads(pid: int, with_others: bool,
                 proc: str = PROC) -> tuple[list[int], list[int]]:
    """(vCPU TIDs, the other TIDs or none) of a QEMU process.

    What goes into a VM's group: its vCPU threads and, ``with_others``
    (``[libvirt] include_emulator_threads``), every other thread.
    """
    threads_ = threads(pid, proc)
    vcpus = [tid for tid, comm in threads_ if is_vcpu_thread(comm)]
    others = [tid for tid, comm in threads_
              if with_others and not is_vcpu_thread(comm)]
    return vcpus, others


def is_vcpu_thread(comm: str) -> bool:
    """QEMU names vCPU threads ``CPU n/KVM`` (``CPU n/TCG`` without KVM)."""
    return comm.startswith('CPU ') and (comm.endswith('/KVM')
                                        or comm.endswith('/TCG'))


def parse_pmd_comm(comm: str) -> int | None:
    """The core of an OvS PMD thread named ``pmd-c03/id:7``, else None."""
    if not comm.startswith('pmd-c'):
        return None
    digits = comm[5:].split('/', 1)[0]
    return int(digits) if digits.isdigit() else None


def busy_cpus(proc: str = PROC) -> dict[int, str]:
    """CPU -> the thread pinned there that a benchmark must leave alone:
    an OvS PMD thread (``pmd-c03/id:7``) or a pinned vCPU (``CPU 1/KVM``
    whose ``Cpus_allowed_list`` is not every CPU).
    """
    from ovs_rdt.exceptions import RDTError
    from ovs_rdt.inputs import cpulists

    every = os.cpu_count() or 1
    out: dict[int, str] = {}
    try:
        pids = [int(p) for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return out
    for pid in pids:
        for tid, comm in threads(pid, proc):
            pmd = parse_pmd_comm(comm) is not None
            if not pmd and not is_vcpu_thread(comm):
                continue
            path = os.path.join(proc, str(pid), 'task', str(tid), 'status')
            try:
                with open(path, encoding='ascii', errors='replace') as fh:
                    text = [line.split(':', 1)[1] for line in fh
                            if line.startswith('Cpus_allowed_list:')][0]
                cpus = cpulists.parse(text.strip(), path)
            except (OSError, IndexError, RDTError):
                continue            # gone meanwhile
            if pmd or len(cpus) < every:
                out.update(dict.fromkeys(cpus, comm))
    return out
