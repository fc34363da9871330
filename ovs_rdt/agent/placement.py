"""Where ovs-vswitchd's threads go: the ``rdt-*`` keys and a thread scan in,
CacheManager calls out.

:class:`PmdPlacer` keeps ovs-vswitchd's threads where the ``rdt-*`` keys
say.  It remembers the last placement that applied cleanly: a bad value,
or one the platform cannot meet, leaves that placement in force (new PMD
threads still follow it) and turns the status into ``error: ...``.  No
ovsdbapp, no oslo here.

Between two syncs it remembers, each under its own name:

* the keys it last read and the ovs-vswitchd it last saw (``_knobs``,
  ``_vswitchd_pid``), to do nothing when neither changed;
* what it last applied and to which scan (``_applied``, ``_placed_scan``),
  and the TIDs it placed per kind of thread (``_threads``), so that only
  new threads are moved, without reading a tasks file;
* what the PMD group was allocated (``_allocation``), to allocate again
  only when the cache domains or the request change;
* where the PMD threads last went well (``_pmd_home``), the metrics'
  ``pmd`` label while ovs-vswitchd restarts.
"""
from __future__ import annotations

import logging
from typing import Any, NamedTuple

from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent import knobs as knobs_mod
from ovs_rdt.agent.lasting import LastingError
from ovs_rdt.agent.pmd import Scan
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core import plan
from ovs_rdt.core.model import PMD_GROUP, ROOT, Platform, Request, pool_group
from ovs_rdt.exceptions import RDTError, count
from ovs_rdt.inputs import request
from ovs_rdt.members import pmd_label

LOG = logging.getLogger(__name__)

#: The kinds of ovs-vswitchd threads, placed in this order.
PMD, OTHER = 'pmd', 'other'


def _cpus(cores: frozenset[int]) -> str:
    return ','.join(str(c) for c in sorted(cores)) or '-'


class PmdAllocation(NamedTuple):
    """What the PMD group was last allocated (again only when it changes)."""

    cache_domains: tuple[int, ...]
    ways: int | None
    mb_percent: int | None
    mb_mbps: int | None


class ThreadsPlaced(NamedTuple):
    """The threads of one kind the last sync placed, and where."""

    group: str
    tids: frozenset[int]


class PmdHome(NamedTuple):
    """Where the PMD threads last went well: group and cores."""

    group: str
    cores: frozenset[int]


class GroupTasks:
    """The groups' tasks, each tasks file read at most once per pass and
    kept current with the moves made since.
    """

    def __init__(self, resctrl: Any) -> None:
        self.resctrl = resctrl
        self._tasks: dict[str, set[int] | None] = {}

    def of(self, group: str) -> set[int] | None:
        """The group's TIDs; None if it does not exist."""
        if group not in self._tasks:
            try:
                self._tasks[group] = set(self.resctrl.tasks(group))
            except FileNotFoundError:
                self._tasks[group] = None
        return self._tasks[group]

    def forget(self, group: str) -> None:
        """Read the group again when next asked (it was re-created)."""
        self._tasks.pop(group, None)

    def moved(self, target: str, tids: list[int]) -> None:
        for group, tasks in self._tasks.items():
            if tasks is not None:
                tasks.difference_update(tids)
                if group == target:
                    tasks.update(tids)


class PmdPlacer:
    """Keeps ovs-vswitchd's threads in the groups the knobs ask for."""

    def __init__(self, manager: Any, counters: Counters | None = None) -> None:
        #: A CacheManager (``resctrl``, ``settings``, ``allocate``,
        #: ``release``, ``assign``); replaced on SIGHUP.
        self.manager = manager
        #: Each failed attempt counts as errors{source="placement"}.
        self.counters = counters or Counters()
        #: The last placement that applied cleanly (kept in force).
        self.good: knobs_mod.Placement | None = None
        #: Why the keys as they are now cannot be applied (kept until they
        #: change or a forced re-scan applies them).
        self.rejected = LastingError(LOG)
        #: Why the last attempt to keep the good placement failed (cleared
        #: as soon as one succeeds).
        self.keeping = LastingError(LOG)
        #: The status line (``ok: ...`` or ``error: ...``).
        self.status = ''
        self._knobs: dict[str, str] | None = None
        self._vswitchd_pid: int | None = None
        self._applied: knobs_mod.Placement | None = None
        #: The :attr:`Scan.key` the last clean pass placed.
        self._placed_scan: tuple | None = None
        self._threads: dict[str, ThreadsPlaced] = {}
        self._allocation: PmdAllocation | None = None
        self._pmd_home = PmdHome(ROOT, frozenset())

    # -- entry point -----------------------------------------------------
    def sync(self, knobs: dict[str, str] | None, scan: Scan,
             force: bool = False) -> str:
        """Bring the threads in line; returns the status line."""
        if knobs is None:
            return self.status
        relevant = knobs_mod.relevant(knobs)
        new_keys = force or relevant != self._knobs
        if not new_keys and scan.key == self._placed_scan and self.status:
            return self.status          # nothing changed since
        platform = self.manager.resctrl.platform(cpus=True)
        self._knobs = relevant
        self._follow_vswitchd(scan)
        if new_keys:
            status = self._take_keys(relevant, scan, platform, force)
            if status is not None:
                return status
        return self._keep_good(relevant, scan, platform)

    def _follow_vswitchd(self, scan: Scan) -> None:
        if scan.pid != self._vswitchd_pid:
            # Another ovs-vswitchd (or none): TIDs seen placed in the old
            # one say nothing about the new one's (the kernel reuses TIDs).
            self._threads.clear()
            self._vswitchd_pid = scan.pid

    def _take_keys(self, knobs: dict[str, str], scan: Scan,
                   platform: Platform, force: bool) -> str | None:
        """Apply the keys as they are now; the status, None if refused."""
        try:
            want = self._parse(knobs, platform)
            self._apply(want, knobs, scan, platform, force)
        except RDTError as exc:
            self._fail(exc, new=True)
            return None
        if want != self.good:
            LOG.info('placement now: %s', want.describe())
        self.good = want
        self.rejected.recover()
        self.keeping.recover()
        return self._ok(want, scan)

    def _keep_good(self, knobs: dict[str, str], scan: Scan,
                   platform: Platform) -> str:
        """Keep the last good placement (new threads follow it)."""
        if self.good is None:
            return self.status
        try:
            self._apply(self.good, knobs, scan, platform, False)
        except RDTError as exc:
            self._fail(exc, new=False)
            return self.status
        self.keeping.recover('ovs-vswitchd threads placed again')
        if self.rejected.text:
            self.status = 'error: ' + self.rejected.text
            return self.status
        return self._ok(self.good, scan)

    def _parse(self, knobs: dict[str, str], platform: Platform
               ) -> knobs_mod.Placement:
        mba = platform.mb
        return knobs_mod.parse(
            knobs, list(self.manager.settings.pools), platform.cbm_len,
            mba.min_bandwidth if mba else None,
            mba.field if mba else request.MB_PERCENT,
            mba.kind if mba else '')

    def _fail(self, exc: Exception, new: bool) -> None:
        """``new``: the keys cannot be applied; else keeping them failed."""
        self.counters.inc('errors', source='placement')
        text = str(exc)
        if new:
            self.rejected.fail(text, '%s%s', text,
                               '; keeping the previous placement: %s'
                               % self.good.describe() if self.good else '')
        else:
            self.keeping.fail(text)
        self._placed_scan = self._applied = None
        self.status = 'error: ' + text

    # -- doing it --------------------------------------------------------
    def _apply(self, want: knobs_mod.Placement, knobs: dict[str, str],
               scan: Scan, platform: Platform, force: bool) -> None:
        """Allocate the PMD group if needed, then move the threads.

        Full check: read every group concerned.  Otherwise (same
        placement, only threads changed) no tasks file is read: TIDs
        already placed are trusted, and new ones are written straight into
        their target unless the kernel put them there already (a new
        thread starts in its creator's group: ovs-vswitchd's main thread,
        one of the "other" threads).
        """
        tasks = GroupTasks(self.manager.resctrl)
        full = force or want != self._applied
        if want.ways is not None:
            must = force or (full and tasks.of(PMD_GROUP) is None)
            if self._allocate(want, knobs, scan, platform, must):
                tasks.forget(PMD_GROUP)
                full = True
        if full:
            self._threads.clear()
        # PMD threads first: they are the ones that matter.
        for kind, tids, target in ((PMD, scan.pmd_tids, want.pmd_group),
                                   (OTHER, scan.others, want.other_group)):
            move = self._to_move(kind, tids, target, want, tasks)
            if move:
                self._move(kind, target, move, tasks)
            self._threads[kind] = ThreadsPlaced(target, frozenset(tids))
        if want.ways is None and tasks.of(PMD_GROUP) is not None:
            LOG.info('removing %s', PMD_GROUP)
            self.manager.release(PMD_GROUP)
            self._allocation = None
        self._applied = want
        self._placed_scan = scan.key

    def _to_move(self, kind: str, tids: list[int], target: str,
                 want: knobs_mod.Placement, tasks: GroupTasks) -> list[int]:
        """The threads of ``kind`` not in ``target`` yet."""
        placed = self._threads.get(kind)
        if placed is not None and placed.group == target:
            # Trusted: only threads new since the last pass.
            inherited = target == ROOT and want.other_group == ROOT
            return [] if inherited else [t for t in tids
                                         if t not in placed.tids]
        if target == ROOT:
            ours = sorted(self._our_groups(want) - {ROOT})
            return [t for t in tids
                    if any(t in (tasks.of(g) or ()) for g in ours)]
        members = tasks.of(target)
        if members is None:
            raise RDTError('%s does not exist in %s: is the pool '
                           'configured and applied ("ovs-rdt apply")?'
                           % (target, self.manager.resctrl.root))
        return [t for t in tids if t not in members]

    def _our_groups(self, want: knobs_mod.Placement) -> set[str]:
        """The groups ovs-vswitchd's threads may be in by our doing."""
        return {PMD_GROUP, want.pmd_group, want.other_group} | {
            pool_group(p) for p in self.manager.settings.pools}

    def _move(self, kind: str, target: str, tids: list[int],
              tasks: GroupTasks) -> None:
        LOG.info('moving %s %s to %s', count(
            len(tids), 'PMD thread' if kind == PMD else 'other ovs-vswitchd '
            'thread'), ','.join(map(str, tids)), target or 'the default group')
        gone = self.manager.assign(target, tids)
        if gone:
            LOG.debug('threads %s exited meanwhile', gone)
        tasks.moved(target, tids)

    def _allocate(self, want: knobs_mod.Placement, knobs: dict[str, str],
                  scan: Scan, platform: Platform, force: bool) -> bool:
        """Create or resize the PMD group if needed; True if it did."""
        cores = scan.cores | knobs_mod.parse_cpu_mask(
            knobs.get(knobs_mod.KEY_CPU_MASK))
        if cores:
            cache_domains = tuple(sorted(platform.domains_of_cpus(cores)))
        elif self._allocation is not None:
            cache_domains = self._allocation.cache_domains
        else:
            cache_domains = tuple(platform.domains)
        allocation = PmdAllocation(cache_domains, want.ways, want.mb_percent,
                                   want.mb_mbps)
        if not force and allocation == self._allocation:
            return False
        assert want.ways is not None
        try:
            done = self.manager.allocate(Request(
                PMD_GROUP, ways={d: want.ways for d in cache_domains},
                mb_percent=want.mb_percent, mb_mbps=want.mb_mbps))
        except RDTError as exc:
            raise RDTError('%s=%d: %s' % (knobs_mod.KEY_WAYS, want.ways, exc)
                           ) from exc
        # At a forced re-scan this only checks: said when it wrote.
        LOG.log(logging.INFO if allocation != self._allocation or done.steps
                else logging.DEBUG, 'allocated %s: %s on cache domains %s for '
                'PMD cores %s (%s)', PMD_GROUP, count(want.ways, 'way'),
                ','.join(map(str, cache_domains)), _cpus(cores),
                count(len(done.steps), 'resctrl write'))
        self._allocation = allocation
        return True

    # -- status ------------------------------------------------------------
    def _where(self, group: str) -> str:
        if group == ROOT:
            return 'the default group'
        try:
            l3: dict[int, CBM] = self.manager.resctrl.group(
                group, with_tasks=False).l3
        except (OSError, RDTError):
            return group
        if group == PMD_GROUP and self._allocation is not None:
            l3 = {d: m for d, m in l3.items()
                  if d in self._allocation.cache_domains}
        counts = {m.count for m in l3.values()}
        masks = plan.domain_text(l3)
        ways = ' (%s)' % count(counts.pop(), 'way') if len(counts) == 1 \
            else ''
        return '%s L3 %s%s' % (group, masks, ways)

    def pmd_groups(self) -> dict[str, str]:
        """{group: cores} where the PMD threads are placed (``0,1``)."""
        group, cores = self._pmd_home
        return {group: pmd_label(sorted(cores))} if group and cores else {}

    def _ok(self, want: knobs_mod.Placement, scan: Scan) -> str:
        if scan.cores or want.pmd_group != self._pmd_home.group:
            self._pmd_home = PmdHome(want.pmd_group,
                                     scan.cores or self._pmd_home.cores)
        if not want.active:
            text = 'no rdt-* keys set; ovs-vswitchd runs in the default group'
        elif scan.pid is None:
            text = 'PMD threads -> %s; %s' % (self._where(want.pmd_group),
                                              scan.why)
        else:
            text = 'PMD cores %s (%s) in %s' % (
                _cpus(scan.cores), count(len(scan.pmds), 'thread'),
                self._where(want.pmd_group))
        if want.active:
            other = ('the same group' if want.other_group == want.pmd_group
                     else self._where(want.other_group))
            text += '; other ovs-vswitchd threads in %s' % other
        self.status = 'ok: ' + text
        return self.status
