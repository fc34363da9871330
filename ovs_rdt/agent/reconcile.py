"""Placement logic: knobs + ovs-vswitchd's threads -> CacheManager calls.

:class:`PmdPlacer` keeps ovs-vswitchd's threads where the ``rdt-*`` keys
say.  It remembers the last placement that applied cleanly: a bad value,
or one the platform cannot meet, leaves that placement in force (new PMD
threads still follow it) and turns the status into ``error: ...``.

:class:`NodeReconciler` is the node's janitor: it removes
``ovsrdt-vm-<uuid>`` groups which hold no task and whose domain libvirt
does not run (its API: :mod:`ovs_rdt.agent.virt`) at once; while libvirt
does not answer, once no process has run with ``-uuid <uuid>`` for
:data:`ORPHAN_GRACE` seconds (the libvirt hook creates the group at
``prepare``, QEMU comes later).  Pool and PMD groups are never its
business.  No ovsdbapp, no oslo here.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable

from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent import knobs as knobs_mod
from ovs_rdt.agent.lasting import LastingError
from ovs_rdt.agent.pmd import Scan
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import PMD_GROUP, ROOT, Platform, Request, pool_group
from ovs_rdt.core.model import vm_group, vm_uuid
from ovs_rdt.exceptions import RDTError
from ovs_rdt.inputs import request
from ovs_rdt.members import pmd_label
from ovs_rdt import procfs

LOG = logging.getLogger(__name__)

VM_PREFIX = vm_group('')
POOL_PREFIX = pool_group('')


def _cpus(cores: frozenset[int]) -> str:
    return ','.join(str(c) for c in sorted(cores)) or '-'


class PmdPlacer:
    """Keeps ovs-vswitchd's threads in the groups the knobs ask for."""

    def __init__(self, manager: Any, counters: Counters | None = None) -> None:
        #: A CacheManager (``resctrl``, ``settings``, ``allocate``,
        #: ``release``, ``assign``); replaced on SIGHUP.
        self.manager = manager
        #: Each failed attempt counts as errors{source="placement"}.
        self.counters = counters or Counters()
        #: (group, cores) of the last good placement of PMD threads, kept
        #: while ovs-vswitchd restarts (the metrics' ``pmd`` label).
        self._pmd_where: tuple[str, frozenset[int]] = (ROOT, frozenset())
        self.good: knobs_mod.Placement | None = None
        #: Why the keys as they are now cannot be applied (kept until they
        #: change or a forced re-scan applies them).
        self.rejected = LastingError(LOG)
        #: Why the last attempt to keep the good placement failed (cleared
        #: as soon as one succeeds).
        self.keeping = LastingError(LOG)
        self.status = ''
        self._pid: int | None = None
        self._raw: dict[str, str] | None = None
        self._alloc: tuple | None = None
        self._placed: tuple | None = None
        self._applied: knobs_mod.Placement | None = None
        #: 'pmd'/'other' -> (group, TIDs placed there by the last sync)
        self._known: dict[str, tuple[str, frozenset[int]]] = {}

    # -- entry point -----------------------------------------------------
    def sync(self, knobs: dict[str, str] | None, scan: Scan,
             force: bool = False) -> str:
        """Bring the threads in line; returns the status line."""
        if knobs is None:
            return self.status
        raw = knobs_mod.relevant(knobs)
        fresh = force or raw != self._raw
        if not fresh and scan.key == self._placed and self.status:
            return self.status
        platform = self.manager.resctrl.platform()
        self._raw = raw
        if scan.pid != self._pid:
            # Another ovs-vswitchd (or none): TIDs seen placed in the old
            # one say nothing about the new one's (the kernel reuses TIDs).
            self._known.clear()
            self._pid = scan.pid
        if fresh:
            try:
                mba = platform.mb
                want = knobs_mod.parse(
                    raw, list(self.manager.settings.pools), platform.cbm_len,
                    mba.min_bandwidth if mba else None,
                    mba.field if mba else request.MB_PERCENT,
                    mba.kind if mba else '')
                self._apply(want, raw, scan, platform, force)
            except RDTError as exc:
                self._fail(exc, new=True)
            else:
                if want != self.good:
                    LOG.info('placement now: %s', want.describe())
                self.good = want
                self.rejected.recover()
                self.keeping.recover()
                return self._ok(want, scan)
        if self.good is None:
            return self.status
        try:
            self._apply(self.good, raw, scan, platform, False)
        except RDTError as exc:
            self._fail(exc, new=False)
            return self.status
        self.keeping.recover('ovs-vswitchd threads placed again')
        if self.rejected.text:
            self.status = 'error: ' + self.rejected.text
            return self.status
        return self._ok(self.good, scan)

    def _fail(self, exc: Exception, new: bool) -> None:
        """``new``: the keys cannot be applied; else keeping them failed."""
        self.counters.inc('errors', source='placement')
        text = str(exc)
        if new:
            self.rejected.fail(text, '%s%s', text,
                               '; keeping the previous placement %r'
                               % (self.good,) if self.good else '')
        else:
            self.keeping.fail(text)
        self._placed = self._applied = None
        self.status = 'error: ' + text

    # -- doing it --------------------------------------------------------
    def _apply(self, want: knobs_mod.Placement, raw: dict[str, str],
               scan: Scan, platform: Platform, force: bool) -> None:
        cache: dict[str, set[int] | None] = {}

        def members(group: str) -> set[int] | None:
            if group not in cache:  # each tasks file read once, if needed
                cache[group] = self._tasks(group)
            return cache[group]

        # Full check: read every group concerned.  Otherwise (same
        # placement, only threads changed) no tasks file is read: TIDs
        # already placed are trusted, and new ones are written straight
        # into their target unless the kernel put them there already (a
        # new thread starts in its creator's group: ovs-vswitchd's main
        # thread, one of the "other" threads).
        full = force or want != self._applied
        if want.ways is not None:
            must = force or (full and members(PMD_GROUP) is None)
            if self._allocate(want, raw, scan, platform, must):
                cache.pop(PMD_GROUP, None)
                full = True
        if full:
            self._known.clear()
        ours = {PMD_GROUP, want.pmd_group, want.other_group} | {
            pool_group(p) for p in self.manager.settings.pools}
        managed = sorted(ours - {ROOT})
        # PMD threads first: they are the ones that matter.
        for kind, tids, target in (('pmd', scan.pmd_tids, want.pmd_group),
                                   ('other', scan.others, want.other_group)):
            known = self._known.get(kind)
            if known is not None and known[0] == target:
                inherited = target == ROOT and want.other_group == ROOT
                move = [] if inherited else [t for t in tids
                                             if t not in known[1]]
            elif target == ROOT:
                move = [t for t in tids
                        if any(t in (members(g) or ()) for g in managed)]
            elif members(target) is None:
                raise RDTError('%s does not exist in %s: is the pool '
                               'configured and applied ("ovs-rdt apply")?'
                               % (target, self.manager.resctrl.root))
            else:
                move = [t for t in tids if t not in (members(target) or ())]
            if move:
                self._move(target, move, cache)
            self._known[kind] = (target, frozenset(tids))
        if want.ways is None and members(PMD_GROUP) is not None:
            LOG.info('removing %s', PMD_GROUP)
            self.manager.release(PMD_GROUP)
            self._alloc = None
        self._applied = want
        self._placed = scan.key

    def _move(self, target: str, tids: list[int],
              cache: dict[str, set[int] | None]) -> None:
        LOG.info('moving ovs-vswitchd threads %s to %s',
                 ','.join(map(str, tids)), target or 'the default group')
        gone = self.manager.assign(target, tids)
        if gone:
            LOG.debug('threads %s exited meanwhile', gone)
        for group, tasks in cache.items():
            if tasks is not None:
                tasks.difference_update(tids)
                if group == target:
                    tasks.update(tids)

    def _allocate(self, want: knobs_mod.Placement, raw: dict[str, str],
                  scan: Scan, platform: Platform, force: bool) -> bool:
        """Create or resize the PMD group if needed; True if it did."""
        cores = scan.cores | knobs_mod.parse_cpu_mask(
            raw.get(knobs_mod.KEY_CPU_MASK))
        if cores:
            domains = tuple(sorted(platform.domains_of_cpus(cores)))
        elif self._alloc is not None:
            domains = self._alloc[0]
        else:
            domains = tuple(platform.domains)
        sig = (domains, want.ways, want.mb_percent, want.mb_mbps)
        if not force and sig == self._alloc:
            return False
        assert want.ways is not None
        LOG.info('allocating %s: %d ways on cache domains %s for PMD cores '
                 '%s', PMD_GROUP, want.ways, ','.join(map(str, domains)),
                 _cpus(cores))
        try:
            self.manager.allocate(Request(PMD_GROUP,
                                          ways={d: want.ways for d in domains},
                                          mb_percent=want.mb_percent,
                                          mb_mbps=want.mb_mbps))
        except RDTError as exc:
            raise RDTError('%s=%d: %s' % (knobs_mod.KEY_WAYS, want.ways, exc)
                           ) from exc
        self._alloc = sig
        return True

    def _tasks(self, group: str) -> set[int] | None:
        try:
            return set(self.manager.resctrl.tasks(group))
        except FileNotFoundError:
            return None

    # -- status ------------------------------------------------------------
    def _where(self, group: str) -> str:
        if group == ROOT:
            return 'the default group'
        try:
            l3: dict[int, CBM] = self.manager.resctrl.group(
                group, with_tasks=False).l3
        except (OSError, RDTError):
            return group
        if group == PMD_GROUP and self._alloc is not None:
            l3 = {d: m for d, m in l3.items() if d in self._alloc[0]}
        counts = {m.count for m in l3.values()}
        masks = ';'.join('%d=%s' % (d, m) for d, m in sorted(l3.items()))
        ways = ' (%d ways)' % counts.pop() if len(counts) == 1 else ''
        return '%s L3 %s%s' % (group, masks, ways)

    def pmd_groups(self) -> dict[str, str]:
        """{group: cores} where the PMD threads are placed (``0,1``)."""
        group, cores = self._pmd_where
        return {group: pmd_label(sorted(cores))} if group and cores else {}

    def _ok(self, want: knobs_mod.Placement, scan: Scan) -> str:
        if scan.cores or want.pmd_group != self._pmd_where[0]:
            self._pmd_where = (want.pmd_group, scan.cores or
                               self._pmd_where[1])
        if not want.active:
            text = 'no rdt-* keys set; ovs-vswitchd runs in the default group'
        elif scan.pid is None:
            text = 'PMD threads -> %s; %s' % (self._where(want.pmd_group),
                                              scan.why)
        else:
            text = 'PMD cores %s (%d threads) in %s' % (
                _cpus(scan.cores), len(scan.pmds),
                self._where(want.pmd_group))
        if want.active:
            other = ('the same group' if want.other_group == want.pmd_group
                     else self._where(want.other_group))
            text += '; other ovs-vswitchd threads in %s' % other
        self.status = 'ok: ' + text
        return self.status


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

#: () -> the UUIDs of the domains libvirt runs, or None when libvirt does
#: not answer (then /proc and ORPHAN_GRACE decide).
LiveDomains = Callable[[], 'set[str] | None']


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

    ``domains`` gives libvirt's running domains (:data:`LiveDomains`): an
    empty ``ovsrdt-vm-<uuid>`` group whose domain libvirt does not run is
    removed at once.  While libvirt does not answer, the rule is the one of
    before: no process with its UUID in ``/proc`` for :data:`ORPHAN_GRACE`.
    """

    def __init__(self, manager: Any, proc: str = procfs.PROC,
                 domains: LiveDomains | None = None,
                 grace: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 counters: Counters | None = None) -> None:
        self.manager = manager
        self.proc = proc
        #: A group it fails to remove counts as errors{source="reconcile"}.
        self.counters = counters or Counters()
        self.domains: LiveDomains = domains or (lambda: None)
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
        live = self.domains()
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
        live = self.domains()
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
            if not self._orphaned(name, live):
                continue
            LOG.warning('removing %s: %s (it ended without the release '
                        'hook)', name, why)
            try:
                self.manager.release(name)
                removed.append(name)
            except RDTError as exc:
                LOG.error('could not remove %s: %s', name, exc)
                self.counters.inc('errors', source='reconcile')
        return removed
