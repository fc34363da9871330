"""The node's cache plan: lock, read, plan, apply (what every caller calls).

Every operation (``apply``, ``allocate``, ``release``) works on the whole
desired state (:mod:`ovs_rdt.desired`) under ``flock(LOCK_EX)``: the
configured pools, the default group's mask, every group of ours that
exists, and the change.  The allocator computes the target; the steps are
applied in order and, should the kernel refuse one, the ones already
applied are undone (:mod:`ovs_rdt.transaction`), so nothing is left
half-applied.
"""
from __future__ import annotations

import errno
import time

from ovs_rdt.conf import Settings, located
from ovs_rdt.core import allocator, foreign
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Group, Platform, Request, pool_group
from ovs_rdt.core.plan import RMDIR, Plan, Step
from ovs_rdt.exceptions import AllocationError, ConfigError, InvalidMask
from ovs_rdt.exceptions import RDTError, ResctrlError, ResctrlUnavailable
from ovs_rdt import GROUP_PREFIX, SELFTEST_GROUP_PREFIX, VM_GROUP_PREFIX
from ovs_rdt import desired
from ovs_rdt.logs import to_logger
from ovs_rdt.resctrl import Resctrl
from ovs_rdt.transaction import Transaction

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Any

    from ovs_rdt.logs import Log


#: Seconds an operation is planned again while another tool changes
#: resctrl under it without the lock (:meth:`CacheManager._mutate`).
SETTLE = 2.0
#: Seconds between two tries.
SETTLE_STEP = 0.02


#: The kernel's ``last_cmd_status`` when another group is in the way.
CROWDED = ('Overlaps with', 'Schemata overlaps', 'Out of CLOSIDs',
           'Out of RMIDs', 'No space on')


def in_progress(platform: Platform, groups: list[Group],
                exc: RDTError) -> str:
    """Why a refusal may be another tool's change in progress ('' if not).

    Under ``LOCK_EX`` no tool that takes the lock writes, so the kernel
    refusing a write because another group is in the way (:data:`CROWDED`),
    which the plan checked it was not, means one that does not changed
    resctrl since the read (when ``last_cmd_status`` says nothing any more,
    its next command cleared it); and a refusal naming a group of theirs
    with the mask ``mkdir`` gives names one its tool has not written yet
    (libvirt and pqos write theirs right after, a tool may remove it just
    as soon).
    """
    if isinstance(exc, ResctrlError):
        crowded = exc.errno in (errno.EINVAL, errno.ENOSPC) and (
            exc.status is None or exc.status.startswith(CROWDED))
        return 'resctrl changed under the lock' if crowded else ''
    bare = [name for name in foreign.unwritten_groups(platform, groups)
            if name in str(exc)]
    return 'not written yet: %s' % ', '.join(bare) if bare else ''


def without_leftovers(groups: list[Group]) -> tuple[list[Group], list[str]]:
    """``groups`` less what a selftest that is gone left
    (:func:`ovs_rdt.procfs.selftest_left`), which every plan removes
    first, and those groups' names.
    """
    from ovs_rdt import procfs

    left = [g.name for g in groups if procfs.selftest_left(g.name)]
    return [g for g in groups if g.name not in left], left


class CacheManager:
    """The node's cache plan: what the CLI, the hook and the agent call."""

    def __init__(self, resctrl: Resctrl, settings: Settings,
                 log: Log | None = None) -> None:
        self.resctrl = resctrl
        self.settings = settings
        #: ``log(level, text)`` (:mod:`ovs_rdt.logs`); by default
        #: ``logging.getLogger('ovs_rdt.manager')``.
        self.log = log if log is not None else to_logger(__name__)

    @classmethod
    def from_settings(cls, settings: Settings,
                      log: Log | None = None) -> CacheManager:
        """The manager of ``[resctrl] root`` as ``settings`` say."""
        return cls(Resctrl.from_settings(settings), settings, log)

    # -- operations -------------------------------------------------------
    def read(self, with_tasks: bool = False
             ) -> tuple[Platform, list[Group]]:
        """The platform and every group, read under ``LOCK_SH``: one state
        for several looks at it (:meth:`preview`'s ``state``).
        """
        with self.resctrl.lock(exclusive=False):
            return self._read(with_tasks)

    def preview(self, change: Request | None = None,
                remove: str | None = None, prune: bool = False,
                state: tuple[Platform, list[Group]] | None = None) -> Plan:
        """The plan an operation would apply, without applying it, from
        ``state`` (:meth:`read`) or from resctrl now.
        """
        platform, groups = state or self.read()
        return self._target(platform, groups, change, remove, prune)

    def _plan(self, platform: Platform, groups: list[Group],
              change: Request | None, remove: str | None,
              prune: bool = False,
              split: dict[str, Request] | None = None) -> Plan:
        requests, kept, floor, masks = self._wanted(platform, groups, prune,
                                                    split)
        requests = [r for r in requests if r.name != remove and
                    (change is None or r.name != change.name)]
        if change is not None:
            requests.append(change)
        target = allocator.plan(platform, groups, requests, floor, masks)
        target.kept = kept
        return target

    def room(self, state: tuple[Platform, list[Group]] | None = None,
             isolated: bool = True) -> dict[int, int]:
        """The most ways one more group (a VM's; ``isolated`` false: a
        shared pool) gets on each domain, from ``state`` (:meth:`read`)
        or resctrl now: :func:`ovs_rdt.core.allocator.room` beside what a
        VM start keeps (:func:`ovs_rdt.desired.desired`: the pools, the
        PMD group and the VMs as they are, moved as a VM start would move
        them).  Raises the planning errors when the configuration cannot
        be applied (nothing can be counted then).
        """
        return allocator.room(*self._beside(state), isolated)

    def _beside(self, state: tuple[Platform, list[Group]] | None
                ) -> tuple[Platform, list[Group], list[Request], int,
                           dict[int, CBM] | None]:
        """What one more group is planned beside (:meth:`room`): the
        platform, the groups, every request a VM start keeps, the default
        group's floor and masks.
        """
        platform, groups = state or self.read()
        groups = without_leftovers(groups)[0]   # (the plan removes them)
        wanted, _kept, floor, masks = self._wanted(platform, groups)
        return platform, groups, wanted, floor, masks

    def _wanted(self, platform: Platform, groups: list[Group],
                applying: bool = False,
                split: dict[str, Request] | None = None
                ) -> tuple[list[Request], list[str], int,
                           dict[int, CBM] | None]:
        """:func:`ovs_rdt.desired.desired`, the default group's floor and
        masks; a ConfigError names the file and line.
        """
        try:
            return (*desired.desired(self.settings, platform, groups,
                                     applying, split),
                    desired.system_min_ways(self.settings, platform),
                    desired.system_masks(self.settings, platform))
        except ConfigError as exc:
            raise located(exc, self.settings.sources) from None

    def free_ways(self, state: tuple[Platform, list[Group]] | None = None
                  ) -> dict[int, dict[str, Any]]:
        """Per domain: ``vm_ways``, what one more VM gets (:meth:`room`);
        ``vm_held_ways``, what VMs hold; ``reserved_ways``, the rest of the
        CBM length, which VMs cannot have: the reserve ``provider-config``
        gives Placement, so that Placement's free count is :meth:`room`'s
        (``status`` shows the same sum); ``reserved_by``, what holds it
        (:func:`ovs_rdt.core.allocator.reserve`).
        """
        beside = self._beside(state)
        platform, groups = beside[:2]
        free = allocator.room(*beside)
        parts = allocator.reserve(*beside)
        root = next(g for g in groups if g.is_root)
        held = {d: 0 for d in platform.domains}
        for grp in groups:
            if grp.name.startswith(VM_GROUP_PREFIX):
                for dom, ways in desired.held_ways(grp, root).items():
                    held[dom] = held.get(dom, 0) + ways
        return {d: {'vm_ways': free[d], 'vm_held_ways': held[d],
                    'reserved_ways': max(0, platform.cbm_len - free[d]
                                         - held[d]),
                    'reserved_by': parts[d]}
                for d in platform.domains}

    def apply(self) -> Plan:
        """Create/update the configured pools and the default group's mask.

        Pools no longer configured are removed (their tasks return to the
        default group).
        """
        return self._mutate(None, None, prune=True)

    def allocate(self, request: Request) -> Plan:
        """Add or resize one group of ours (a VM's, the PMD group)."""
        if not request.name.startswith(GROUP_PREFIX):
            raise InvalidMask('group %r is not an ovs-rdt group' % request.name)
        return self._mutate(request, None)

    def release(self, name: str) -> Plan:
        """Remove one group of ours and give its ways back (idempotent).

        Never refused for want of room: when the whole plan is (the pools
        do not fit as configured now, another tool took ways, the
        configuration is broken), the group is removed alone and the plan
        says why in ``unplaced`` (:func:`ovs_rdt.core.allocator.freeing`).
        """
        return self._mutate(None, name)

    def release_alone(self, name: str, why: str) -> Plan:
        """Remove one group of ours alone, every other group as it is,
        when the configuration cannot be read (``why``): releasing never
        needs it (:func:`ovs_rdt.core.allocator.freeing`).
        """
        with self.resctrl.lock():
            platform, groups = self._read()
            target = allocator.freeing(groups, name, why)
            self.execute(target, groups)
        return target

    def assign(self, group: str, tids: list[int]) -> list[int]:
        """Move TIDs into ``group`` (ROOT for the default); returns exited."""
        with self.resctrl.lock():
            return self.resctrl.add_tasks(group, tids)

    def apply_policy_split(self, hp_ways: dict[int, int],
                           be_mb: dict[int, int] | None = None) -> Plan:
        """The dynamic policy's move: the high-priority pool gets
        ``hp_ways`` per domain, the best-effort pool the rest of the budget
        and, where given, the MB percent ``be_mb`` (the other domains keep
        what they hold).  Like every operation: under ``LOCK_EX``, in the
        kernel-safe order, undone if a write fails.
        """
        bounds = desired.policy_bounds(self.settings)
        if bounds is None:
            raise ConfigError('[policy] enabled is false')
        with self.resctrl.lock():
            platform, groups = self._read()
            held = desired.pool_requests(self.settings, platform, groups)
            by_name = {r.name: r for r in held}
            hp = by_name[pool_group(bounds.high_priority)]
            be = by_name[pool_group(bounds.best_effort)]
            ways = {**hp.ways, **hp_ways}
            mb = dict(be.mb)
            for dom, pct in (be_mb or {}).items():
                if pct >= (be.mb_percent or 100):
                    mb.pop(dom, None)
                else:
                    mb[dom] = pct
            split = desired.hp_be_split(hp, be, ways, bounds.budget, mb)
            target = self._plan(platform, groups, None, None, False, split)
            self.execute(target, groups)
        return target

    def _target(self, platform: Platform, groups: list[Group],
                change: Request | None, remove: str | None,
                prune: bool) -> Plan:
        """The plan of an operation; a release whose whole plan is refused
        removes its group alone (:func:`ovs_rdt.core.allocator.freeing`).
        What a selftest left (:func:`ovs_rdt.procfs.selftest_left`) is
        removed first, its ways and CLOSIDs planned as free.
        """
        groups, left = without_leftovers(groups)
        try:
            target = self._plan(platform, groups, change, remove, prune)
        except (AllocationError, ConfigError) as exc:
            if remove is None or change is not None or prune:
                raise
            target = allocator.freeing(groups, remove, str(exc))
        target.steps[:0] = [Step(RMDIR, name) for name in left]
        return target

    def _mutate(self, change: Request | None, remove: str | None,
                prune: bool = False) -> Plan:
        """Plan from what resctrl holds now and apply, under ``LOCK_EX``.

        Tools that take no lock may make and remove groups meanwhile: a
        refusal that may be theirs is planned again from a new read, for
        up to :data:`SETTLE` seconds (:func:`in_progress`).  Each try is a
        whole read, plan and apply under the lock; the pauses between them
        are not: a refusal that lasts (a fault, a kernel unlike our model)
        must not keep the lock from the hook, the CLI, a metrics scrape or
        the agent's other threads for all of SETTLE at every retry.
        """
        deadline = time.monotonic() + SETTLE
        while True:
            with self.resctrl.lock():
                platform, groups = self._read()
                try:
                    target = self._target(platform, groups, change, remove,
                                          prune)
                    if target.unplaced and target.remove:
                        self.log('warning', 'removing %s alone, every other '
                                 'group as it is: %s'
                                 % (remove, target.unplaced))
                    left = [s.group for s in target.steps if s.op == RMDIR
                            and s.group.startswith(SELFTEST_GROUP_PREFIX)]
                    if left:
                        self.log('warning', 'removing what a selftest that '
                                 'is gone left: %s' % ', '.join(left))
                    self.execute(target, groups)
                    return target
                except (AllocationError, ResctrlError) as exc:
                    why = in_progress(platform, groups, exc)
                    if not why or time.monotonic() >= deadline:
                        raise
                    self.log('info', 'planning again (%s): %s' % (why, exc))
            time.sleep(SETTLE_STEP)

    def _read(self, with_tasks: bool = False
              ) -> tuple[Platform, list[Group]]:
        """The platform and every group (the caller holds the lock).

        ``Resctrl.platform()`` is read once per object; a long-running
        agent re-reads it when it no longer describes the mount
        (:meth:`Resctrl.platform_stale`: a socket's CPUs taken offline,
        resctrl remounted with or without CDP or mba_MBps, io_alloc
        switched or its ways changed).
        """
        platform = self.resctrl.platform()
        groups = self.resctrl.groups(with_tasks)
        root = next((g for g in groups if g.is_root), None)
        if root is None:        # (read as gone: unmounted meanwhile)
            raise ResctrlUnavailable('cannot read the default group at %s: '
                                     'is resctrl still mounted there?'
                                     % self.resctrl.root)
        if self.resctrl.platform_stale(root):
            platform = self.resctrl.platform(refresh=True)
            groups = self.resctrl.groups(with_tasks)
        return platform, groups

    def execute(self, target: Plan, groups: list[Group]) -> None:
        """Apply ``target.steps`` (:class:`ovs_rdt.transaction.Transaction`:
        undone if one fails); logs each group that moved, and for whom
        (``target.moves``).
        """
        Transaction(self.resctrl, groups, self.log).commit(target.steps)
        for move in target.moves:
            self.log('info', str(move))
