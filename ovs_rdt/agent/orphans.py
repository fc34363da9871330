"""VM groups left behind: found and removed.

:class:`NodeReconciler` is the node's janitor: it removes
``ovsrdt-vm-<uuid>`` groups which hold no task and whose libvirt domain
does not run (libvirt's API: :mod:`ovs_rdt.agent.virt`) at once; while
libvirt does not answer, once no process has run with ``-uuid <uuid>`` for
:data:`ORPHAN_GRACE` seconds (the libvirt hook creates the group at
``prepare``, QEMU comes later).  Pool and PMD groups are never its
business.  No ovsdbapp, no oslo here.

("Domain" here is libvirt's word for a guest: :data:`RunningGuests` gives
the UUIDs of the guests libvirt runs.  Cache domains are not this
module's business.)
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable

from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent.lasting import LastingError
from ovs_rdt.core.model import vm_uuid
from ovs_rdt.exceptions import RDTError
from ovs_rdt import procfs, vm_group

LOG = logging.getLogger(__name__)

VM_PREFIX = vm_group('')


#: Without libvirt's answer, a VM group must be seen orphaned (no task, no
#: process with its UUID) for this long, on two passes at least, before it
#: is removed.  The libvirt hook creates the group at "prepare" and fills
#: it at "started": in between, a start can stall for a long time (other
#: hooks, storage, host devices) with no QEMU process yet.  A VM group left
#: behind is rare and harmless for minutes; removing a starting VM's group
#: gives its reserved ways away.  With libvirt's answer (its list of
#: running domains, which holds a domain from before its "prepare" hook
#: until its QEMU is gone) there is no such wait.
ORPHAN_GRACE = 600.0

#: () -> the UUIDs of the guests libvirt runs, or None when libvirt does
#: not answer (then /proc and ORPHAN_GRACE decide).
RunningGuests = Callable[[], 'set[str] | None']


def running_vm_uuids(proc: str = procfs.PROC) -> set[str]:
    """UUIDs of the guests whose QEMU runs on the node, from ``/proc``.

    By :func:`ovs_rdt.procfs.guest_of_cmdline`, the rule the libvirt hook
    uses too: any process whose command line gives ``-uuid``, whatever its
    argv[0] (an emulator reached through a symlink such as
    ``/usr/bin/kvm``); a false positive only keeps a group a while longer.
    """
    return set(procfs.qemu_pids(proc))


def sees_all_tasks(proc: str = procfs.PROC) -> bool:
    """False in a nested PID namespace (a container without the host's).

    There ``/proc`` lacks the host's QEMU processes and resctrl's ``tasks``
    files list only the tasks this namespace can see: every VM group would
    look orphaned.
    """
    try:
        with open(os.path.join(proc, 'self', 'status'), encoding='ascii',
                  errors='replace') as fh:
            for line in fh:
                if line.startswith('NSpid:'):
                    return len(line.split()) <= 2
    except OSError:
        pass
    return True    # no NSpid (a kernel before 4.1, a fake /proc): assume so


class NodeReconciler:
    """Removes VM groups left behind by dead QEMUs.

    ``guests`` gives the guests libvirt runs (:data:`RunningGuests`): an
    empty ``ovsrdt-vm-<uuid>`` group whose guest libvirt does not run is
    removed at once.  While libvirt does not answer, the rule is the one of
    before: no process with its UUID in ``/proc`` for :data:`ORPHAN_GRACE`.
    """

    def __init__(self, manager: Any, proc: str = procfs.PROC,
                 guests: RunningGuests | None = None,
                 grace: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 counters: Counters | None = None) -> None:
        self.manager = manager
        self.proc = proc
        #: A group it fails to remove counts as errors{source="reconcile"}.
        self.counters = counters or Counters()
        self.guests: RunningGuests = guests or (lambda: None)
        self.grace = ORPHAN_GRACE if grace is None else grace
        self.clock = clock
        #: group -> when it was first seen orphaned (continuously since).
        self._suspects: dict[str, float] = {}
        #: It cannot see every task (a nested PID namespace): said once.
        self._blind = LastingError(LOG, logging.WARNING)
        #: Groups of domains libvirt no longer runs that still held tasks
        #: at the last pass (a QEMU not reaped yet): worth another look soon.
        self.pending: list[str] = []

    def _live(self) -> tuple[set[str], bool]:
        """(UUIDs of running guests, whether libvirt said so)."""
        live = self.guests()
        if live is not None:
            return live, True
        return running_vm_uuids(self.proc), False

    def _tasks(self, name: str) -> list[int] | None:
        try:
            return self.manager.resctrl.tasks(name)
        except FileNotFoundError:
            return None

    def _orphaned(self, name: str, live: set[str] | None = None) -> bool:
        """No task in it (and, given ``live``, no VM with its UUID)."""
        uuid = vm_uuid(name)
        if uuid is None or (live is not None and uuid in live):
            return False     # not a name the hook gives, or its VM runs
        return self._tasks(name) == []

    def reconcile(self) -> list[str]:
        """One pass; returns the groups removed."""
        self.pending = []
        if not sees_all_tasks(self.proc):
            self._blind.fail('nested PID namespace', 'not removing VM '
                             'groups: this agent runs in a nested PID '
                             'namespace, it cannot see every QEMU nor every '
                             'task (run it with the host\'s PID namespace)')
            self._suspects.clear()
            return []
        self._blind.recover()
        vms = [name for name in self.manager.resctrl.group_names()
               if name.startswith(VM_PREFIX) and vm_uuid(name)]
        if not vms:
            self._suspects.clear()
            return []
        # Asked after the groups were listed: a group made by a "prepare"
        # hook since is a domain libvirt already runs.
        live = self.guests()
        if live is not None:
            gone = [n for n in vms if n[len(VM_PREFIX):] not in live]
            empty = [n for n in gone if self._orphaned(n)]
            self.pending = [n for n in gone if n not in empty
                            and self._tasks(n) is not None]
            self._suspects.clear()
            return self._remove(sorted(empty), 'libvirt does not run its '
                                'domain', True)
        # Without libvirt, every command line is read, and only when a VM
        # group is empty: reading one blocks while its process is stuck
        # holding its memory map.
        empty = [n for n in vms if self._orphaned(n)]
        procs = running_vm_uuids(self.proc) if empty else set()
        now = self.clock()
        orphans = {name: self._suspects.get(name, now) for name in empty
                   if name[len(VM_PREFIX):] not in procs}
        due = sorted(name for name, since in orphans.items()
                     if name in self._suspects and now - since >= self.grace)
        removed = self._remove(due, 'no QEMU has run with its uuid for %ds'
                               % self.grace, False)
        self._suspects = {n: t for n, t in orphans.items()
                          if n not in removed}
        return removed

    def _remove(self, due: list[str], why: str, api: bool) -> list[str]:
        removed: list[str] = []
        if not due:
            return removed
        live, again = self._live()   # once more, just before removing
        if again != api:
            return removed           # libvirt came or went meanwhile
        for name in due:
            try:
                # Checked again under the lock: the release hook may have
                # removed it meanwhile, or the domain started again.
                with self.manager.resctrl.lock():
                    if not self._orphaned(name, live):
                        continue
                    LOG.warning('removing %s: %s, and no release hook '
                                'removed it (none installed, one that '
                                'failed: see the hook\'s log, or libvirtd '
                                'ended first)', name, why)
                    self.manager.release(name)
                removed.append(name)
            except RDTError as exc:
                LOG.error('could not remove %s: %s', name, exc)
                self.counters.inc('errors', source='reconcile')
        return removed
