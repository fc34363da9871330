"""The node the stress tests run: real libvirtd + KVM guests with the hook,
the mounted emulator, a private OvS and the real agent, one config file.

:class:`Node` starts what a test asks for and reads the node's state from
the emulator's files; :func:`check_invariants` is what must hold after
every round of load or fault (the issue's list):

* no way held by two isolated groups (``ovsrdt-vm-*``, ``ovsrdt-ovs-pmd``
  and the pools overlap no other group but the root; a dedicated group
  overlaps nothing at all),
* every vCPU TID of a running managed guest in its group,
* the default group never below its floor,
* (refusals only where ways or CLOSIDs truly ran out: :func:`check_refusal`).

That a running guest keeps its ways while others start and stop is the
allocator's property (tests/unit/test_allocator_properties.py) and, through
a real libvirtd, tests/functional/test_libvirt_hook.py.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterable

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import PMD_GROUP, ROOT
from ovs_rdt.resctrl import Resctrl
from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.fixtures.libvirt import Guest, LibvirtTestbed
from tests.functional.fixtures.ovs import AgentProcess, OvsTestbed, wait_for
from tests.stress import figures

PROFILE = 'xeon-e7-8890-v4'     # 4 cache domains x 20 ways, 16 CLOSIDs
WAYS = 20
SYSTEM_MIN_WAYS = 2
POOL = 'noisy'
POOL_WAYS = 2
POOL_GROUP = 'ovsrdt-pool-noisy'
PMD_WAYS = 2
OURS = 'ovsrdt-'
REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

HOOK_TIME = re.compile(r"ovs-rdt-hook\[\d+\] DEBUG domain '(?P<name>.*)' "
                       r"(?P<op>\S+) (?P<sub>\S+): handled in "
                       r"(?P<ms>[0-9.]+) ms$")


def rdt(body: str) -> str:
    return '<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">%s</rdt:rdt>' % body


def dedicated(ways: int) -> str:
    return rdt('<rdt:l3 ways="%d"/>' % ways)


def pooled(name: str = POOL) -> str:
    return rdt('<rdt:pool name="%s"/>' % name)


class Node:
    """One node: testbed (libvirtd + hook), emulator, optional OvS + agent."""

    def __init__(self, testbed: LibvirtTestbed, emu: EmulatorFixture,
                 ovs: OvsTestbed | None = None) -> None:
        self.tb = testbed
        self.emu = emu
        self.ovs = ovs
        self.rc = Resctrl(emu.root, emu.sysfs)
        self.agent: AgentProcess | None = None
        self.agent_log = os.path.join(testbed.workdir, 'agent.log')
        self.configure()

    # -- configuration ----------------------------------------------------
    def configure(self, extra: str = '', **libvirt: object) -> None:
        """One file for the hook, the agent and ``ovs-rdt apply``."""
        if self.ovs is not None:
            extra = ('[ovs]\nconnection = %s\nvswitchd_pidfile = %s\n'
                     'ovsdb_timeout = 5\nrescan_interval = 1\n'
                     '[agent]\nreconcile_interval = 1\n'
                     % (self.ovs.connection, self.ovs.vswitchd_pidfile)
                     ) + extra
        libvirt.setdefault('qemu_run_dir', self.tb.libvirtd.qemu_run_dir)
        libvirt.setdefault('uri', self.tb.libvirtd.ro_uri)
        self.tb.configure(self.emu.root, self.emu.sysfs,
                          pools={POOL: POOL_WAYS},
                          system_min_ways=SYSTEM_MIN_WAYS, extra=extra,
                          **libvirt)

    # -- the agent and the CLI ------------------------------------------------
    def start_agent(self) -> AgentProcess:
        assert self.ovs is not None
        self.agent = AgentProcess(self.tb.config, self.agent_log, {
            'ovs_rdt.agent.orphans.ORPHAN_GRACE': '1.0'}).start()
        return self.agent

    def stop_agent(self) -> None:
        if self.agent is not None:
            self.agent.stop()
            self.agent = None

    def status(self) -> str:
        assert self.ovs is not None
        return self.ovs.external_id('rdt-status') or ''

    def wait_agent_ok(self, timeout: float = 30) -> str:
        return wait_for(lambda: (lambda s: s if s.startswith('ok') else None)(
            self.status()), timeout=timeout, step=0.1,
            what='agent status ok (now %r)' % self.status())

    def pmd_in_group(self) -> bool:
        assert self.ovs is not None
        pmds = set(self.ovs.pmd_threads())
        return bool(pmds) and pmds <= set(self.tasks(PMD_GROUP))

    def apply(self) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=REPO)
        return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                               '--config-file', self.tb.config, 'apply'],
                              capture_output=True, text=True, env=env,
                              timeout=120, check=False)

    # -- state -------------------------------------------------------------
    def groups(self) -> dict[str, Any]:
        return {g.name: g for g in self.rc.groups()}

    def tasks(self, group: str) -> list[int]:
        try:
            return self.rc.tasks(group)
        except FileNotFoundError:
            return []

    def our_groups(self) -> list[str]:
        return sorted(g for g in self.rc.group_names() if g.startswith(OURS))

    def vm_groups(self) -> list[str]:
        return [g for g in self.our_groups() if g.startswith('ovsrdt-vm-')]

    def hook_log_size(self) -> int:
        try:
            return os.path.getsize(self.tb.log)
        except OSError:
            return 0

    def hook_times(self, since: int = 0) -> dict[str, list[float]]:
        """Milliseconds per event ("prepare begin", ...) logged after ``since``."""
        out: dict[str, list[float]] = {}
        with open(self.tb.log, 'rb') as fh:
            fh.seek(since)
            for raw in fh:
                match = HOOK_TIME.search(raw.decode('utf-8', 'replace')
                                         .rstrip('\n'))
                if match:
                    out.setdefault('%s %s' % (match['op'], match['sub']),
                                   []).append(float(match['ms']))
        return out


# -- invariants ----------------------------------------------------------------
def _isolated(name: str) -> bool:
    return name.startswith('ovsrdt-vm-') or name == PMD_GROUP


def holds(name: str, mask: CBM, root_mask: CBM) -> bool:
    """Whether group ``name`` holds ways of its own on this domain.

    A group of ours with nothing to place on a domain (its threads never
    run there) follows the default group: same mask, nothing held.
    """
    return name != ROOT and not (name.startswith(OURS)
                                 and mask.value == root_mask.value)


def check_invariants(node: Node, guests: Iterable[tuple[Guest, str]] = (),
                     foreign: Iterable[str] = ()
                     ) -> dict[str, int]:
    """Assert the issue's invariants; the free ways per domain.

    ``guests``: (guest, group) of every guest that runs managed now;
    ``foreign``: groups of other tools (never ours to judge, but their ways
    count as held).  Even after a plan stopped half-way (a process killed
    between two writes) groups never overlap and the default group keeps
    its floor: groups trading ways write the one giving ways up first.
    Returns the free ways (held by nobody but the root) per domain.
    """
    groups = node.groups()
    root = groups[ROOT]
    free: dict[int, int] = {}
    for dom, root_mask in root.l3.items():
        # The default group keeps its floor.
        assert root_mask.count >= SYSTEM_MIN_WAYS, \
            'domain %d: the default group has %s' % (dom, root_mask)
        held = 0
        for name, group in groups.items():
            if name == ROOT:
                continue
            mask = group.l3[dom]
            if not holds(name, mask, root_mask):
                continue
            held |= mask.value
            if not name.startswith(OURS):
                continue        # another tool's: not ours to judge
            for other_name, other in groups.items():
                if other_name == name or (other_name == ROOT
                                          and not _isolated(name)) or \
                        not holds(other_name, other.l3[dom], root_mask):
                    continue
                assert not mask.overlaps(other.l3[dom]), (
                    'domain %d: %s %s overlaps %s %s' % (
                        dom, name, mask, other_name or '/', other.l3[dom]))
        spare = CBM(((1 << root_mask.width) - 1) & ~held, root_mask.width)
        free[dom] = spare.count
    for guest, group in guests:
        vcpus = node.tb.vcpu_tids(guest)
        assert vcpus, '%s has no vCPU threads' % guest.name
        missing = vcpus - set(node.tasks(group))
        assert not missing, '%s: vCPU TIDs %s are not in %s' % (
            guest.name, sorted(missing), group)
    figures.add('invariant checks passed')
    return free


def check_refusal(node: Node, guest: Guest, asked: int, stderr: str) -> str:
    """A refused start: only because the ways or CLOSIDs ran out.

    Within a round only starts happen, so what ran out then is still out
    now: fewer ways are free than the guest asked (groups move to make a
    run of the free ways when they must), or every CLOSID is taken.  The
    guest is shut off and has no group.
    """
    assert node.tb.state(guest) == 'shut off', guest.name
    assert guest.group not in node.rc.group_names(), guest.name
    platform = node.rc.platform(refresh=True)
    groups = node.groups()
    if 'out of CLOSIDs' in stderr:
        assert len(groups) >= platform.num_closids, (stderr, sorted(groups))
        return 'closids'
    assert 'are free' in stderr or 'contiguous' in stderr, stderr
    runs = []
    for dom in platform.domains:
        held = 0
        root_mask = groups[ROOT].l3[dom]
        for name, group in groups.items():
            if holds(name, group.l3[dom], root_mask):
                held |= group.l3[dom].value
        spare = ((1 << platform.cbm_len) - 1) & ~held
        runs.append(bin(spare).count('1') - SYSTEM_MIN_WAYS)
    assert min(runs) < asked, ('%s refused though %s ways are free: %s'
                               % (guest.name, runs, stderr))
    return 'ways'


# -- concurrency helpers -----------------------------------------------------------
def all_at_once(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run ``jobs`` in threads released together; their results in order."""
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)

    def run(i: int, job: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[i] = job()
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, j))
               for i, j in enumerate(jobs)]
    for thr in threads:
        thr.start()
    for thr in threads:
        thr.join()
    return results


def mount_emulator(testbed: LibvirtTestbed, extra_args: list[str] = ()
                   ) -> EmulatorFixture:
    emu = EmulatorFixture(PROFILE, extra_args=extra_args,
                          rootdir=testbed.mount_base)
    emu.setUp()
    return emu


def private_ovs() -> OvsTestbed:
    return OvsTestbed(tempfile.mkdtemp(prefix='ovsrdt-ovs-'), '0x1')


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.monotonic()
    value = fn()
    return value, time.monotonic() - start
