"""Plans and applies cache allocations on the node.

Every operation (``apply``, ``allocate``, ``release``) works on the whole
desired state under ``flock(LOCK_EX)``: the configured pools, the default
group's mask, every group of ours that exists, and the change.  The
allocator computes the target; the steps are applied in order and, should
the kernel refuse one, the ones already applied are undone, so nothing is
left half-applied.
"""
from __future__ import annotations

import errno
import time

from ovs_rdt.conf import Settings, located
from ovs_rdt.core import allocator, foreign
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.kernel import is_valid
from ovs_rdt.core.model import MODE_EXCLUSIVE, MODE_SHAREABLE, Group, Platform
from ovs_rdt.core.model import pool_group, Request, MBInfo, UNIT_PERCENT, UNIT_MBPS
from ovs_rdt.core.model import held_masks, mb_terms, uncapped_mb, ROOT
from ovs_rdt.core.plan import RMDIR, Plan, Step
from ovs_rdt.exceptions import AllocationError, ConfigError, InvalidMask
from ovs_rdt.exceptions import InvalidValue, ResctrlError, ResctrlUnavailable
from ovs_rdt.exceptions import RDTError, refuse
from ovs_rdt import GROUP_PREFIX, POOL_GROUP_PREFIX
from ovs_rdt import SELFTEST_GROUP_PREFIX, VM_GROUP_PREFIX
from ovs_rdt.inputs import request
from ovs_rdt.resctrl import Resctrl

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Any


class _Log:
    """``logging.getLogger(__name__)``, imported on first real use.

    The libvirt hook plans through this module at every VM start and
    logging costs it ~10 ms.  Until something imports and configures
    logging, debug and info records would be dropped anyway (Python's
    last-resort handler shows warnings and up), so those are no-ops then.
    """

    #: Called once when this imports logging (the hook then routes the
    #: records to its own log: Python's last resort would print warnings
    #: on standard error, which libvirt shows the operator).
    on_import: Any = None

    def __getattr__(self, name: str) -> Any:
        import sys
        if 'logging' not in sys.modules:
            if name in ('debug', 'info'):
                return _drop
            hook = self.on_import
            import logging
            if hook is not None:
                hook()
            return getattr(logging.getLogger(__name__), name)
        import logging
        return getattr(logging.getLogger(__name__), name)


def _drop(*args: object, **kwargs: object) -> None:
    return None


LOG = _Log()

#: Seconds an operation is planned again while another tool changes
#: resctrl under it without the lock (:meth:`CacheManager._mutate`).
SETTLE = 2.0
#: Seconds between two tries.
SETTLE_STEP = 0.02


def parse_domain_masks(text: str, platform: Platform,
                       field: str) -> dict[int, CBM]:
    """``7f0`` (every domain) or ``0=7f0;1=3f`` (per domain).

    Checked against the platform; ConfigError names ``field``.
    """
    from ovs_rdt.inputs import masks
    try:
        values = masks.domain_masks(text, field, platform.domains,
                                    platform.cbm_len)
        out = {dom: CBM(value, platform.cbm_len)
               for dom, value in values.items()}
        for mask in out.values():
            allocator.validate_mask(platform, mask, field)
    except (InvalidMask, InvalidValue) as exc:
        raise ConfigError(str(exc)) from None
    return out


class _Was:
    """A group as it was before a write (what an undo writes back);
    ``code`` and ``data`` are its CDP masks (else its ``l3``).  A plain
    class: the hook imports this module, and typing costs it 5 ms.
    """

    __slots__ = ('l3', 'mb', 'mode', 'code', 'data')

    def __init__(self, l3: dict[int, CBM], mb: dict[int, int], mode: str,
                 code: dict[int, CBM], data: dict[int, CBM]) -> None:
        self.l3, self.mb, self.mode = l3, mb, mode
        self.code, self.data = code, data

    def _replace(self, **changes: Any) -> '_Was':
        values = {k: getattr(self, k) for k in self.__slots__}
        values.update(changes)
        return _Was(**values)


def split_pair(hp: Request, be: Request, hp_ways: dict[int, int],
               budget: int, be_mb: dict[int, int]) -> dict[str, Request]:
    """The dynamic policy's two pools as one split: the high-priority pool
    ``hp_ways`` per domain, the best-effort pool the rest of ``budget`` and
    the MB percent ``be_mb`` per domain; each keeps its configured caps,
    isolation and event.
    """
    return {hp.name: Request(hp.name, ways=dict(hp_ways),
                             exclusive=hp.exclusive,
                             mb_percent=hp.mb_percent, mb_mbps=hp.mb_mbps,
                             mb_event=hp.mb_event),
            be.name: Request(be.name, ways={d: budget - n
                                            for d, n in hp_ways.items()},
                             exclusive=be.exclusive,
                             mb_percent=be.mb_percent, mb=be_mb,
                             mb_mbps=be.mb_mbps, mb_event=be.mb_event)}


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


def _shape(req: Request) -> str:
    """A pool's size in words: ways per domain, or masks."""
    if req.ways:
        return 'ways %s' % ','.join('%d=%d' % kv for kv in sorted(
            req.ways.items()))
    return 'L3:%s' % ';'.join('%d=%s' % kv for kv in sorted(req.cbm.items()))


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

    def __init__(self, resctrl: Resctrl, settings: Settings) -> None:
        self.resctrl = resctrl
        self.settings = settings

    @classmethod
    def from_settings(cls, settings: Settings) -> CacheManager:
        """The manager of ``[resctrl] root`` as ``settings`` say."""
        return cls(Resctrl.from_settings(settings), settings)

    # -- desired state ----------------------------------------------------
    def pool_requests(self, platform: Platform,
                      groups: list[Group] | None = None,
                      split: dict[str, Request] | None = None
                      ) -> list[Request]:
        """One request per configured pool; ConfigError names the option.

        With ``[policy] enabled``, the two policy pools keep the split they
        hold now (``groups``), so that a VM start or ``apply`` never undoes
        the agent's last decision; ``split`` is a new one (the agent's).
        """
        out = self._pool_requests(platform)
        held = self._policy_split(platform, groups or [], out)
        held.update(split or {})
        if held:
            out = [held.get(r.name, r) for r in out]
            # The high-priority pool first: it packs just below the
            # system's ways, the best-effort pool below it (seed 002
            # Table 6).
            order = [r.name for r in held.values()]
            out.sort(key=lambda r: order.index(r.name) if r.name in order
                     else -1)
        return out

    def policy_bounds(self) -> Any:
        """``[policy]`` checked (None when off); ConfigError if bad."""
        if not self.settings.policy.enabled:
            return None     # the hook's case: no import of the policy (8 ms)
        from ovs_rdt.core.policy import bounds_from
        return bounds_from(self.settings)

    def _policy_split(self, platform: Platform, groups: list[Group],
                      requests: list[Request]) -> dict[str, Request]:
        """The policy pools' requests as they hold now, where valid."""
        bounds = self.policy_bounds()
        if bounds is None:
            return {}
        by_name = {r.name: r for r in requests}
        hp_name = pool_group(bounds.high_priority)
        be_name = pool_group(bounds.best_effort)
        hp, be = by_name[hp_name], by_name[be_name]
        current = {g.name: g for g in groups}
        root = current.get('')
        ways = dict(hp.ways)
        mb: dict[int, int] = {}
        if hp_name in current and be_name in current and root is not None:
            now_hp = self.held_ways(current[hp_name], root)
            now_be = self.held_ways(current[be_name], root)
            for dom, count in now_hp.items():
                if bounds.hp_min <= count <= bounds.hp_max and \
                        now_be.get(dom) == bounds.budget - count:
                    ways[dom] = count
            ceiling = be.mb_percent or 100
            if platform.mb is not None and \
                    platform.mb.unit == UNIT_PERCENT:
                mb = {d: v for d, v in current[be_name].mb.items()
                      if v < ceiling}
        return split_pair(hp, be, ways, bounds.budget, mb)

    def _pool_requests(self, platform: Platform) -> list[Request]:
        out = []
        for name, pool in self.settings.pools.items():
            section = '[pool:%s]' % name
            sizes = [f for f in ('l3_ways', 'l3_cbm', 'l3_code_cbm')
                     if getattr(pool, f) not in (None, '')]
            if len(sizes) > 1:
                raise ConfigError('%s sets both %s and %s; choose one'
                                  % (section, sizes[0], sizes[1]))
            if pool.l3_code_cbm or pool.l3_data_cbm:
                code, data = self._split_masks(section, pool, platform)
                req = Request(pool_group(name),
                              cbm={d: code[d] | data[d] for d in code},
                              exclusive=pool.isolated,
                              mb_percent=pool.mb_percent,
                              mb_mbps=pool.mb_mbps,
                              mb_event=pool.mb_event, code=code, data=data)
            elif pool.l3_cbm:
                cbm = parse_domain_masks(pool.l3_cbm, platform,
                                         '%s l3_cbm' % section)
                req = Request(pool_group(name), cbm=cbm,
                              exclusive=pool.isolated,
                              mb_percent=pool.mb_percent,
                              mb_mbps=pool.mb_mbps,
                              mb_event=pool.mb_event)
            elif pool.l3_ways is not None:
                if pool.l3_ways > platform.cbm_len:
                    raise ConfigError('%s l3_ways = %d is more than the %d '
                                      'ways of this platform'
                                      % (section, pool.l3_ways,
                                         platform.cbm_len))
                req = Request(pool_group(name),
                              ways={d: pool.l3_ways for d in platform.domains},
                              exclusive=pool.isolated,
                              mb_percent=pool.mb_percent,
                              mb_mbps=pool.mb_mbps,
                              mb_event=pool.mb_event)
            else:
                raise ConfigError('%s needs l3_ways, l3_cbm or (under CDP) '
                                  'l3_code_cbm and l3_data_cbm' % section)
            self._check_pool_mb(section, pool, platform)
            out.append(req)
        return out

    @staticmethod
    def _split_masks(section: str, pool: Any, platform: Platform
                     ) -> tuple[dict[int, CBM], dict[int, CBM]]:
        """``l3_code_cbm`` and ``l3_data_cbm``: CDP only, both given, the
        two together one run of ways on every domain.
        """
        given = [f for f in ('l3_code_cbm', 'l3_data_cbm')
                 if getattr(pool, f)]
        if not platform.cdp:
            raise refuse('%s %s' % (section, given[0]), getattr(pool, given[0]),
                         'needs resctrl mounted with -o cdp (this host has '
                         'one L3 mask per group: use l3_cbm)', ConfigError)
        if len(given) < 2:
            missing = ({'l3_code_cbm', 'l3_data_cbm'} - set(given)).pop()
            raise ConfigError('%s %s needs %s too: a code and a data mask'
                              % (section, given[0], missing))
        code = parse_domain_masks(pool.l3_code_cbm, platform,
                                  '%s l3_code_cbm' % section)
        data = parse_domain_masks(pool.l3_data_cbm, platform,
                                  '%s l3_data_cbm' % section)
        odd = sorted(set(code) ^ set(data))
        if odd:
            raise ConfigError('%s l3_code_cbm and l3_data_cbm must name the '
                              'same cache domains (domain %d is in one only)'
                              % (section, odd[0]))
        for dom in sorted(code):
            both = code[dom] | data[dom]
            if not is_valid(platform, both):
                raise ConfigError(
                    '%s l3_code_cbm %s and l3_data_cbm %s on domain %d '
                    'together are not one run of ways (%s): the pool holds '
                    'the ways either uses' % (section, code[dom], data[dom],
                                              dom, both))
        return code, data

    @staticmethod
    def _check_pool_mb(section: str, pool: Any, platform: Platform) -> None:
        """A pool's cap against the platform's MB unit, by the one rule
        (a VM's: refused without MBA too).
        """
        labels = {f: '%s %s' % (section, f) for f in request.MB_FIELDS}
        try:
            request.check_one_cap(pool.mb_percent, pool.mb_mbps,
                                  labels[request.MB_PERCENT],
                                  labels[request.MB_MBPS])
        except InvalidValue as exc:
            raise ConfigError(str(exc)) from None
        mba = platform.mb
        if pool.mb_event is not None:
            try:
                request.check_mb_event(
                    pool.mb_event, '%s mb_event' % section,
                    mba is not None and mba.unit == UNIT_MBPS,
                    mba.kind if mba is not None else '',
                    platform.mon_features,
                    mba is not None and mba.event_file)
            except InvalidValue as exc:
                raise ConfigError(str(exc)) from None
        for field in request.MB_FIELDS:
            value = getattr(pool, field)
            if value is None:
                continue
            try:
                request.check_mb(field, value, labels[field],
                                 *mb_terms(mba), labels)
            except InvalidValue as exc:
                raise ConfigError(str(exc)) from None

    def system_min_ways(self, platform: Platform) -> int:
        """``[allocation] system_min_ways``, checked against the platform
        (ConfigError: more ways than a cache domain has).
        """
        ways = self.settings.allocation.system_min_ways
        if ways > platform.cbm_len:
            raise ConfigError('[allocation] system_min_ways = %d is more than '
                              'the %d ways of this platform\'s cache domains: '
                              'the default group cannot keep them'
                              % (ways, platform.cbm_len))
        return ways

    def system_masks(self, platform: Platform) -> dict[int, CBM] | None:
        raw = self.settings.allocation.system_l3_cbm
        if not raw:
            return None
        return parse_domain_masks(raw, platform,
                                  '[allocation] system_l3_cbm')

    @staticmethod
    def held_ways(group: Group, root: Group) -> dict[int, int]:
        """Ways a group of ours holds per domain
        (:func:`ovs_rdt.core.model.held_masks`; see existing_request).
        """
        return {d: m.count for d, m in held_masks(group, root).items()}

    @staticmethod
    def existing_request(group: Group, root: Group,
                         mba: MBInfo | None = None) -> Request:
        """What an existing group of ours holds, to keep it as it is.

        A domain where its mask does not overlap the default group's is one
        it holds ways on; elsewhere it follows the default group.  The
        allocator's write order keeps this true after every single write,
        so it also holds after a crash half-way through a plan.  It cannot
        tell a group's ways from the default group's if another tool
        rewrote the default group over them (e.g. ``pqos -R``).
        """
        ways = CacheManager.held_ways(group, root)
        top = uncapped_mb(mba)
        mb = [v for v in group.mb.values() if v < top]
        # The cap it has, in the platform's kind of value.
        pct = mbps = None
        if mb and (mba is None or mba.unit == UNIT_PERCENT):
            pct = min(mb)
        elif mb and mba is not None:
            mbps = mba.mbps_of(min(mb)) or 1
        if group.name.startswith(POOL_GROUP_PREFIX):
            # A pool no longer configured: keep its masks until "apply".
            return Request(group.name, cbm=held_masks(group, root),
                           exclusive=group.mode == MODE_EXCLUSIVE,
                           mb_percent=pct, mb_mbps=mbps)
        return Request(group.name, ways=ways, exclusive=True,
                       mb_percent=pct, mb_mbps=mbps)

    def _desired(self, platform: Platform, groups: list[Group],
                 applying: bool = False,
                 split: dict[str, Request] | None = None
                 ) -> tuple[list[Request], list[str]]:
        """Every group of ours as a plan should leave it, and the pools it
        keeps as they are though the files size them otherwise (words).

        Only ``apply`` (``applying``: the command, and the agent at its
        start, its SIGHUP and its repair) makes the pools what the files
        say and removes those no longer configured.  Every other plan (a
        VM start or stop, the agent placing PMD threads or a guest) keeps
        a pool that exists as resctrl holds it (:meth:`held_pools`) and
        creates only a configured one that does not: editing the files
        moves nothing until they are applied.
        """
        requests = self.pool_requests(platform, groups, split)
        kept: list[str] = []
        if not applying:
            requests, kept = self.held_pools(platform, groups, requests)
        configured = {r.name for r in requests}
        root = next(g for g in groups if g.is_root)
        for grp in groups:
            if not grp.owned or grp.name in configured:
                continue
            if grp.name.startswith(POOL_GROUP_PREFIX) and applying:
                continue
            requests.append(self.existing_request(grp, root, platform.mb))
        return requests, kept

    def held_pools(self, platform: Platform, groups: list[Group],
                   requests: list[Request]) -> tuple[list[Request],
                                                     list[str]]:
        """``requests`` (the configured pools) with each pool that holds
        ways of its own as resctrl holds it: its ways (still moved to make
        room, when the files size it by ways) or masks, mode and MB cap.
        The dynamic policy's two pools keep their split already
        (:meth:`pool_requests`).  Also, in words, each pool whose ways the
        files set otherwise.
        """
        bounds = self.policy_bounds()
        policy = set() if bounds is None else {
            pool_group(bounds.high_priority), pool_group(bounds.best_effort)}
        current = {g.name: g for g in groups}
        root = current[ROOT]
        out, kept = [], []
        for req in requests:
            grp = current.get(req.name)
            held = None if grp is None or req.name in policy else \
                self.existing_request(grp, root, platform.mb)
            if grp is None or held is None or not held.cbm:
                out.append(req)     # (none yet: made as the files say)
                continue
            if req.ways:
                held.ways, held.cbm = self.held_ways(grp, root), {}
            elif req.code:
                held.code = {d: grp.l3code[d] for d in held.cbm}
                held.data = {d: grp.l3data[d] for d in held.cbm}
            if (held.ways, held.cbm) != (req.ways, req.cbm):
                kept.append('%s kept as it is (%s), though the files ask %s: '
                            'pools change at "ovs-rdt apply" (with an agent '
                            'running: at its reload)'
                            % (req.name, _shape(held), _shape(req)))
            out.append(held)
        return out, kept

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
        try:
            desired, kept = self._desired(platform, groups, prune, split)
            floor = self.system_min_ways(platform)
            masks = self.system_masks(platform)
        except ConfigError as exc:
            raise located(exc, self.settings.sources) from None
        requests = [r for r in desired if r.name != remove and
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
        VM start keeps (:meth:`_desired`: the pools, the PMD group and the
        VMs as they are, moved as a VM start would move them).  Raises the
        planning errors when the configuration cannot be applied (nothing
        can be counted then).
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
        try:
            return (platform, groups, self._desired(platform, groups)[0],
                    self.system_min_ways(platform),
                    self.system_masks(platform))
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
                for dom, ways in self.held_ways(grp, root).items():
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

    def resplit(self, hp_ways: dict[int, int],
                be_mb: dict[int, int] | None = None) -> Plan:
        """The dynamic policy's move: the high-priority pool gets
        ``hp_ways`` per domain, the best-effort pool the rest of the budget
        and, where given, the MB percent ``be_mb`` (the other domains keep
        what they hold).  Like every operation: under ``LOCK_EX``, in the
        kernel-safe order, undone if a write fails.
        """
        bounds = self.policy_bounds()
        if bounds is None:
            raise ConfigError('[policy] enabled is false')
        with self.resctrl.lock():
            platform, groups = self._read()
            held = self.pool_requests(platform, groups)
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
            target = self._plan(platform, groups, None, None, False,
                                split_pair(hp, be, ways, bounds.budget, mb))
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
                        LOG.warning('removing %s alone, every other group '
                                    'as it is: %s', remove, target.unplaced)
                    left = [s.group for s in target.steps if s.op == RMDIR
                            and s.group.startswith(SELFTEST_GROUP_PREFIX)]
                    if left:
                        LOG.warning('removing what a selftest that is gone '
                                    'left: %s', ', '.join(left))
                    self.execute(target, groups)
                    return target
                except (AllocationError, ResctrlError) as exc:
                    why = in_progress(platform, groups, exc)
                    if not why or time.monotonic() >= deadline:
                        raise
                    LOG.info('planning again (%s): %s', why, exc)
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
        """Apply ``target.steps``; undo the applied ones if one fails.

        Anything that stops the sequence (a refused write, but also a
        signal) undoes what was applied, so nothing is left half-done.
        Logs each group that moved, and for whom (``target.moves``).
        """
        old = {g.name: g for g in groups}
        done: list[Step] = []
        try:
            for step in target.steps:
                self._do(step)
                done.append(step)
        except BaseException as exc:
            LOG.warning('undoing %d applied steps after: %s', len(done), exc)
            self._undo(done, old)
            raise
        for move in target.moves:
            LOG.info('%s', move)

    def _do(self, step: Step) -> None:
        LOG.debug('resctrl %s', step)
        rc = self.resctrl
        if step.op == 'mkdir':
            rc.mkdir(step.group)
        elif step.op == 'rmdir':
            rc.rmdir(step.group)
        elif step.op == 'schemata':
            rc.write_schemata(step.group, step.value)
        elif step.op == 'mode':
            rc.write_mode(step.group, step.value)
        elif step.op == 'event':
            rc.write_mb_event(step.group, step.value)
        else:
            raise AssertionError(step.op)

    def _undo(self, done: list[Step], old: dict[str, Group]) -> None:
        """Write back, newest first, what each applied step replaced.

        The kernel accepted every state on the way, so it accepts them
        again in reverse: each write restores exactly the masks, MB values
        or mode the step overwrote.  A removed group cannot come back (its
        tasks went to the default group); the allocator removes groups as
        late as the CLOSIDs allow.
        """
        state: dict[str, _Was | None]
        state = {name: _Was(dict(g.l3), dict(g.mb), g.mode,
                            dict(g.l3code or g.l3), dict(g.l3data or g.l3))
                 for name, g in old.items()}
        before = []
        for step in done:
            prev = state.get(step.group)
            before.append(prev)
            if step.op == 'mkdir':
                state[step.group] = None     # the kernel's default: unknown
            elif step.op == 'rmdir':
                state.pop(step.group, None)
            elif prev is not None and step.op == 'schemata':
                state[step.group] = prev._replace(
                    l3={**prev.l3, **step.l3}, mb={**prev.mb, **step.mb},
                    code={**prev.code, **step.code},
                    data={**prev.data, **step.data})
            elif prev is not None and step.op == 'mode':
                state[step.group] = prev._replace(mode=step.value)
        for step, prev in zip(reversed(done), reversed(before)):
            try:
                if step.op == 'event':
                    was = old.get(step.group)
                    if was is not None and was.mb_event:
                        self.resctrl.write_mb_event(step.group, was.mb_event)
                    continue
                self._undo_one(step, prev)
            except RDTError as exc:
                LOG.error('could not undo %s of %s: %s', step.op,
                          step.group or '/', exc)

    def _undo_one(self, step: Step, prev: _Was | None) -> None:
        if step.op == 'mkdir':
            self.resctrl.rmdir(step.group)
        elif step.op == 'rmdir':
            LOG.warning('cannot undo the removal of %s', step.group)
        elif step.op == 'mode':
            # Only real changes are planned: before it, the other mode.
            back = prev.mode if prev is not None else (
                MODE_SHAREABLE if step.value == MODE_EXCLUSIVE
                else MODE_EXCLUSIVE)
            self.resctrl.write_mode(step.group, back)
        elif step.op == 'schemata' and prev is not None:
            # What the step overwrote, on the domains it wrote; under CDP
            # code and data each get back its own mask.
            def wrote(was: dict, new: dict) -> dict:
                return {d: was[d] for d in new if d in was}
            cdp = self.resctrl.platform().cdp
            undo = Step.schemata(
                step.group, wrote(prev.l3, step.l3), wrote(prev.mb, step.mb),
                cdp, (wrote(prev.code, step.code), wrote(prev.data, step.data))
                if cdp else None)
            if undo.value:
                self.resctrl.write_schemata(step.group, undo.value)
