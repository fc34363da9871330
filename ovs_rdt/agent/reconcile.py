"""Placement logic: knobs + ovs-vswitchd's threads -> CacheManager calls.

:class:`PmdPlacer` keeps ovs-vswitchd's threads where the ``rdt-*`` keys
say.  It remembers the last placement that applied cleanly: a bad value,
or one the platform cannot meet, leaves that placement in force (new PMD
threads still follow it) and turns the status into ``error: ...``.

:class:`NodeReconciler` is the node's janitor: it adopts the ``ovsrdt-``
groups it finds and removes ``ovsrdt-vm-<uuid>`` groups whose QEMU is gone
(no process with ``-uuid <uuid>``) and which hold no task, once seen so on
two passes in a row (the libvirt hook creates the group just before QEMU
starts).  No ovsdbapp, no oslo here.
"""
from __future__ import annotations

import logging
import os
from typing import Any

from ovs_rdt import GROUP_PREFIX, procfs
from ovs_rdt.agent import knobs as knobs_mod
from ovs_rdt.agent.pmd import Scan
from ovs_rdt.bitmask import CBM
from ovs_rdt.exceptions import AnnotationError, RDTError
from ovs_rdt.model import PMD_GROUP, ROOT, Platform, Request, pool_group
from ovs_rdt.model import vm_group

LOG = logging.getLogger(__name__)

VM_PREFIX = vm_group('')
POOL_PREFIX = pool_group('')


def _cpus(cores: frozenset[int]) -> str:
    return ','.join(str(c) for c in sorted(cores)) or '-'


class PmdPlacer:
    """Keeps ovs-vswitchd's threads in the groups the knobs ask for."""

    def __init__(self, manager: Any) -> None:
        #: A CacheManager (``resctrl``, ``settings``, ``allocate``,
        #: ``release``, ``assign``); replaced on SIGHUP.
        self.manager = manager
        self.good: knobs_mod.Placement | None = None
        self.error: str | None = None
        self.status = ''
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
        if fresh:
            try:
                want = knobs_mod.parse(raw, list(self.manager.settings.pools),
                                       platform.cbm_len, platform.mb is not None)
                self._apply(want, raw, scan, platform, force)
            except (AnnotationError, RDTError) as exc:
                self._fail(exc, new=True)
            else:
                if want != self.good:
                    LOG.info('placement now: %s', want.describe())
                self.good, self.error = want, None
                return self._ok(want, scan)
        if self.good is None:
            return self.status
        try:
            self._apply(self.good, raw, scan, platform, False)
        except RDTError as exc:
            self._fail(exc, new=False)
            return self.status
        return self.status if self.error else self._ok(self.good, scan)

    def _fail(self, exc: Exception, new: bool) -> None:
        text = str(exc)
        if text != self.error:
            LOG.error('%s%s', text, '; keeping the previous placement %r'
                      % (self.good,) if new and self.good else '')
        self.error = text
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
        sig = (domains, want.ways, want.mb_percent)
        if not force and sig == self._alloc:
            return False
        assert want.ways is not None
        LOG.info('allocating %s: %d ways on cache domains %s for PMD cores '
                 '%s', PMD_GROUP, want.ways, ','.join(map(str, domains)),
                 _cpus(cores))
        try:
            self.manager.allocate(Request(PMD_GROUP,
                                          ways={d: want.ways for d in domains},
                                          mb_percent=want.mb_percent))
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

    def _ok(self, want: knobs_mod.Placement, scan: Scan) -> str:
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


def running_vm_uuids(proc: str = procfs.PROC) -> set[str]:
    """UUIDs (lower case) of the QEMU processes running on the node."""
    out = set()
    for entry in os.listdir(proc):
        if entry.isdigit():
            guest = procfs.qemu_guest(int(entry), proc)
            if guest and guest[1]:
                out.add(guest[1].lower())
    return out


class NodeReconciler:
    """Adopts our groups and removes VM groups left behind by dead QEMUs."""

    def __init__(self, manager: Any, proc: str = procfs.PROC) -> None:
        self.manager = manager
        self.proc = proc
        self._suspects: set[str] = set()

    def adopt(self) -> list[str]:
        names = [n for n in self.manager.resctrl.group_names()
                 if n.startswith(GROUP_PREFIX)]
        if names:
            LOG.info('adopting existing groups: %s', ', '.join(names))
        return names

    def reconcile(self) -> list[str]:
        """One pass; returns the groups removed."""
        live = running_vm_uuids(self.proc)
        orphans = set()
        for name in self.manager.resctrl.group_names():
            if not name.startswith(VM_PREFIX) or \
                    name[len(VM_PREFIX):].lower() in live:
                continue
            try:
                if self.manager.resctrl.tasks(name):
                    continue
            except FileNotFoundError:
                continue
            orphans.add(name)
        removed = []
        for name in sorted(orphans & self._suspects):
            LOG.warning('removing %s: no QEMU runs with uuid %s (it ended '
                        'without the release hook)', name,
                        name[len(VM_PREFIX):])
            try:
                self.manager.release(name)
                removed.append(name)
            except RDTError as exc:
                LOG.error('could not remove %s: %s', name, exc)
        self._suspects = orphans - set(removed)
        return removed
