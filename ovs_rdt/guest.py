"""A guest's cache: reserve its group, place its threads, give it back.

The rules the libvirt hook (:mod:`libvirt_hooks.hook`, one process per
event) and ovs-rdt-agent (:mod:`ovs_rdt.agent.guests`, a guest started
without the hook) both apply, so that a domain is placed the same way by
either.  What the domain asks for comes in already resolved
(:func:`ovs_rdt.domain_xml.resolve`): this module reads no XML.

Imported by the hook at every VM start: nothing here imports ``logging``
or ``typing`` at run time; messages go to the ``log(level, text)`` the
caller passes.
"""
from __future__ import annotations

import os

from ovs_rdt.exceptions import Refusal, count, show
from ovs_rdt import vm_group

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    from ovs_rdt.conf import Settings
    from ovs_rdt.core.allocator import Plan
    from ovs_rdt.core.model import Request
    from ovs_rdt.domain_xml import GuestDomain
    from ovs_rdt.inputs.request import CacheRequest
    from ovs_rdt.manager import CacheManager
    from ovs_rdt.resctrl import Resctrl


# libvirt's virPidFileBuildPath names the pidfile after the domain name
# escaped for XML (virBufferEscapeString: control characters dropped), so
# "a'b" has "a&apos;b.pid"; older releases used the name as it is.
_PIDFILE_ESCAPES: dict[int, str | None] = {
    ord('&'): '&amp;', ord('<'): '&lt;', ord('>'): '&gt;', ord('"'): '&quot;',
    ord("'"): '&apos;'}
_PIDFILE_ESCAPES.update((c, None) for c in range(1, 0x1a)
                        if c not in (9, 10, 13))


def pidfiles(run_dir: str, name: str) -> list[str]:
    """Where libvirt keeps the domain's QEMU pid, most likely first."""
    escaped = name.translate(_PIDFILE_ESCAPES)
    return [os.path.join(run_dir, n + '.pid')
            for n in ((escaped, name) if escaped != name else (name,))]


def guest_group(dom: GuestDomain, spec: CacheRequest) -> str:
    """The group the guest's threads go to: its pool's or its own."""
    from ovs_rdt.core.model import pool_group
    return pool_group(spec.pool) if spec.pool else vm_group(dom.uuid)


class GuestCache:
    """A node's guests' groups, as the configuration ``settings`` says.

    ``manager`` (a :class:`~ovs_rdt.manager.CacheManager`) is made on
    first use unless given, with this ``log(level, text)``
    (:mod:`ovs_rdt.logs`), which takes this module's messages too.
    """

    def __init__(self, settings: Settings, log: Callable[[str, str], None],
                 manager: CacheManager | None = None) -> None:
        self.settings = settings
        self.log = log
        self._manager = manager

    @property
    def manager(self) -> CacheManager:
        if self._manager is None:
            from ovs_rdt.manager import CacheManager
            self._manager = CacheManager(self.make_resctrl(), self.settings,
                                         self.log)
        return self._manager

    def make_resctrl(self) -> Resctrl:
        from ovs_rdt.resctrl import Resctrl
        return Resctrl.from_settings(self.settings)

    @property
    def resctrl(self) -> Resctrl:
        return self.manager.resctrl

    def group_exists(self, group: str) -> bool:
        return os.path.isdir(os.path.join(self.settings.resctrl.root, group))

    def request(self, dom: GuestDomain, spec: CacheRequest) -> Request:
        """The allocator request of a dedicated-CLOS guest."""
        from ovs_rdt.core.model import Request, mb_terms
        from ovs_rdt.inputs.request import check_host, l3_ways_on

        platform = self.resctrl.platform()
        check_host(spec, None, platform.cbm_len, *mb_terms(platform.mb))
        # Unpinned, or pinned to a CPU of unknown cache domain: every domain.
        cpus = dom.vcpu_cpus()
        if cpus:
            platform = self.resctrl.platform(cpus=True)
        domains = platform.domains_of_cpus(cpus)
        known = (platform.cpu_domains or {}) if cpus else {}
        unknown = sorted(c for c in cpus or () if c not in known)
        if unknown:
            from ovs_rdt.inputs.cpulists import to_text
            self.log('warning', 'its vCPUs are pinned to %s %s, which this '
                     'node does not have (no L3 cache domain; its CPUs are '
                     '%s): its ways are reserved on every cache domain; '
                     'check <vcpupin> and <vcpu cpuset>' % (
                         'CPU' if len(unknown) == 1 else 'CPUs',
                         to_text(unknown), to_text(known) or 'unknown'))
        if spec.l3_total is not None:
            ways = self.spread(spec, platform, domains)
        else:
            # By size (l3_kib): the ways of this node's size that hold it.
            ways = {d: l3_ways_on(spec, platform.cbm_len,
                                  platform.way_bytes(d))
                    for d in sorted(domains)}
        return Request(vm_group(dom.uuid), ways=ways,
                       exclusive=True, mb_percent=spec.mb_percent,
                       mb_mbps=spec.mb_mbps)

    def spread(self, spec: CacheRequest, platform: Any,
               domains: frozenset[int]) -> dict[int, int]:
        """Ways per domain of a flavor's ways in all (what Placement
        counted): spread over the node's cache groups the vCPUs span.
        """
        from ovs_rdt.core import topology
        from ovs_rdt.exceptions import refuse
        from ovs_rdt.inputs.request import L3_TOTAL

        groups = topology.cache_groups(topology.from_cpus(
            self.resctrl.cpus.cpu_nodes(),
            self.resctrl.platform(cpus=True).cpu_domains or {}),
            platform.domains)
        assert spec.l3_total is not None
        ways = topology.spread(spec.l3_total, groups, domains)
        most = max(ways.values())
        if most > platform.cbm_len:
            spanned = sum(1 for g in groups if g & domains)
            raise refuse(spec.label(L3_TOTAL), str(spec.l3_total),
                         'is more than this host\'s L3 caches hold: its '
                         'vCPUs span %s, %d ways each'
                         % (count(spanned, 'cache group'), platform.cbm_len))
        return ways

    def ensure(self, dom: GuestDomain, spec: CacheRequest) -> Plan | None:
        """Reserve what the guest asks for; the plan, None if no change.

        A dedicated group is created or resized; for a pool guest, the
        pool's group is created if missing (and a dedicated group left over
        from an earlier definition of the guest removed).
        """
        if spec.pool is None:
            # The platform is read under the lock the plan is made under.
            with self.resctrl.lock():
                return self.manager.allocate(self.request(dom, spec))
        return self._join_pool(dom, spec, self.manager.release)

    def check(self, dom: GuestDomain, spec: CacheRequest) -> Plan | None:
        """Whether this node can take the guest (an incoming migration, a
        restore, ``ovs-rdt check-domain``): raises what :meth:`ensure`
        would; the plan it would make, None if nothing.
        """
        if spec.pool is None:
            with self.resctrl.lock(exclusive=False):
                return self.manager.preview(change=self.request(dom, spec))
        return self._join_pool(dom, spec, lambda name: self.manager.preview(
            remove=name))

    def _join_pool(self, dom: GuestDomain, spec: CacheRequest,
                   release: Callable[[str], Plan]) -> Plan | None:
        """A pool guest: when its dedicated group is left over from an
        earlier definition, or the pool's group is missing, the plan of
        ``release`` (made, or previewed) of that dedicated group: every
        plan is of the whole desired state, so it also creates the pool's
        group.  Refused when the pool's group is not in it.
        """
        group = guest_group(dom, spec)
        if not self.group_exists(vm_group(dom.uuid)) and \
                self.group_exists(group):
            return None
        plan = release(vm_group(dom.uuid))
        if group not in plan.l3:
            raise Refusal('the group %s of pool %s was not created%s'
                          % (group, spec.pool, ': ' + plan.unplaced
                             if plan.unplaced else ''))
        return plan

    def qemu_pid(self, dom: GuestDomain) -> int:
        """The pid of the guest's running QEMU, from libvirt's pidfile,
        checked against its ``-uuid``.
        """
        from ovs_rdt import procfs

        run_dir = self.settings.libvirt.qemu_run_dir
        names = pidfiles(run_dir, dom.name)
        pid = pidfile = None
        for pidfile in names:
            pid = procfs.read_pidfile(pidfile)
            if pid is not None:
                break
        if pid is None:
            raise Refusal('no running QEMU for the domain: %s is missing or '
                          'names no live process' % names[0])
        guest = procfs.qemu_guest(pid)
        if guest is None or guest[1] != dom.uuid:
            raise Refusal('process %d (from %s) is not the QEMU of domain '
                          'uuid %s (it runs %s)'
                          % (pid, pidfile, dom.uuid,
                             show(' '.join(procfs.cmdline(pid)[:1]) or '?')))
        return pid

    def place(self, group: str, pid: int,
              placed: frozenset[int] = frozenset()) -> list[int]:
        """Move QEMU ``pid``'s threads into ``group`` (vCPUs, and the others
        per ``[libvirt] include_emulator_threads``) but those ``placed``
        already; returns the TIDs moved.
        """
        from ovs_rdt import procfs

        vcpus, others = procfs.qemu_threads(
            pid, self.settings.libvirt.include_emulator_threads)
        if not vcpus:
            raise Refusal('QEMU process %d has no vCPU threads (named "CPU '
                          'n/KVM")' % pid)
        tids = [t for t in vcpus + others if t not in placed]
        if not tids:
            return []
        with self.resctrl.lock():
            gone = set(self.resctrl.add_tasks(group, tids))
        moved = [t for t in tids if t not in gone]
        self.log('info', 'moved vCPU threads %s and %d other threads of QEMU '
                 '%d into %s%s' % (
                     ','.join(str(t) for t in vcpus if t in moved) or '-',
                     len([t for t in others if t in moved]), pid, group,
                     ' (%d exited meanwhile)' % len(gone) if gone else ''))
        return moved

    def release(self, uuid: str) -> bool:
        """Remove the guest's dedicated group, if any; whether there was
        one.  Never refused for want of room (the manager logs what it
        kept).
        """
        group = vm_group(uuid)
        if not self.group_exists(group):
            return False
        self.manager.release(group)
        return True
