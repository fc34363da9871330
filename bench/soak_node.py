"""One node of the soak (bench/soak.py): the sandbox's node (emulator,
private libvirtd, the hook), a private OvS and ovs-rdt-agent, and the
lifecycle events and faults the soak drives through them.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable
import uuid

from ovs_rdt import POOL_GROUP_PREFIX, procfs, vm_group
from ovs_rdt.resctrl import Resctrl
from ovs_rdt.sandbox import emulator as sandbox_emulator
from ovs_rdt.sandbox import kvm_problem
from ovs_rdt.sandbox.libvirtd import PrivateLibvirtd
from ovs_rdt.sandbox import ovs as sandbox_ovs
from ovs_rdt.sandbox.node import Node, migrate
from ovs_rdt.sandbox.ovs import PrivateOvs
from ovs_rdt.sandbox.wait import SandboxError, stop_pid, wait_for

import soak_checks

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
POOL, HP = 'noisy', 'hp'
#: The node's configuration: pools hp (the PMD thread's, isolated) and
#: noisy under the dynamic policy, and the metrics endpoint.
CONFIG = """\
[DEFAULT]
log_file = {log}
debug = {debug}
[allocation]
system_min_ways = 2
pools = hp,noisy
[pool:hp]
l3_ways = 3
isolated = true
[pool:noisy]
l3_ways = 1
[policy]
enabled = true
interval = 1
high_priority = hp
best_effort = noisy
hp_min_ways = 1
hp_max_ways = 3
be_min_ways = 1
[libvirt]
uri = {libvirt_uri}
qemu_run_dir = {qemu_run_dir}
[ovs]
connection = {connection}
vswitchd_pidfile = {vswitchd_pidfile}
ovsdb_timeout = 5
rescan_interval = 1
[agent]
reconcile_interval = 5
[metrics]
listen = 127.0.0.1:{port}
"""
#: How the hook's refusals for want of room lead (libvirt_hooks.hook.remedy).
REFUSALS = ('free cache ways on this host', 'free a CLOSID on this host')
#: ... and those an injected resctrl fault may bring.
FAULT_REFUSALS = ('check resctrl on this host',)
#: Sizes asked by ``kib``: one and two ways on both profiles.
KIBS = (2048, 4096)


def missing() -> str | None:
    """Why the soak cannot run here, or None."""
    if os.geteuid() != 0:
        return 'needs root (private libvirtds, FUSE mounts)'
    for tool in ('virsh', 'libvirtd', 'qemu-system-x86_64'):
        if shutil.which(tool) is None:
            return '%s is not installed: run tools/setup.sh' % tool
    return (sandbox_ovs.missing() or sandbox_emulator.missing() or
            kvm_problem())


class Guest:
    """One KVM guest of the soak and what it asks for."""

    def __init__(self, node: 'SoakNode', serial: int, kind: str,
                 vcpus: int, rng: random.Random) -> None:
        self.node = node
        self.name = 'soak-%05d' % serial
        self.uuid = str(uuid.uuid4())
        self.kind = kind
        self.vcpus = vcpus
        self.max_vcpus = 2
        #: The ways it asks for by count (None: by size, pool or none).
        self.ways: int | None = None
        if kind == 'ways':
            self.ways = rng.choice((1, 2))
            self.ask = '<rdt:l3 ways="%d"/>' % self.ways
        elif kind == 'size':
            self.ask = '<rdt:l3 kib="%d"/>' % rng.choice(KIBS)
        elif kind == 'pool':
            self.ask = '<rdt:pool name="%s"/>' % POOL
        else:
            self.ask = ''

    def __str__(self) -> str:
        return '%s (%s%s)' % (self.name, self.kind, ' ' + self.ask.split(
            ' ', 1)[1].rstrip('/>') if self.ask else '')

    @property
    def group(self) -> str | None:
        """The group its threads belong in (None: the default group)."""
        if self.kind in ('ways', 'size'):
            return vm_group(self.uuid)
        if self.kind == 'pool':
            return POOL_GROUP_PREFIX + POOL
        return None

    def xml(self) -> str:
        meta = ('<metadata><rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">%s'
                '</rdt:rdt></metadata>' % self.ask) if self.ask else ''
        return ("<domain type='kvm'><name>%s</name><uuid>%s</uuid>%s"
                "<memory unit='MiB'>32</memory>"
                "<vcpu current='%d'>%d</vcpu><os><type arch='x86_64' "
                "machine='pc'>hvm</type></os><devices><emulator>"
                "/usr/bin/qemu-system-x86_64</emulator></devices></domain>"
                % (self.name, self.uuid, meta, self.vcpus, self.max_vcpus))


class SoakNode:
    """A node: the sandbox's Node, OvS with one PMD thread, the agent."""

    def __init__(self, workdir: str, name: str, profile: str, port: int,
                 restartable: bool) -> None:
        self.name = name
        self.workdir = workdir
        self.port = port
        #: Whether the soak kills this node's agent (the other's runs on).
        self.restartable = restartable
        self.node = Node(workdir, name, profile)
        self.ovs = PrivateOvs(os.path.join(workdir, 'ovs'), '0x1', 1)
        self.hook_log = os.path.join(workdir, 'hook.log')
        self.agent_log = os.path.join(workdir, 'agent.log')
        self.agent_conf = os.path.join(workdir, 'agent.conf')
        self.agent: subprocess.Popen | None = None
        self.rc = Resctrl(self.node.emulator.root, self.node.emulator.sysfs)
        #: Wall seconds of each ``virsh start`` since the last sample.
        self.start_times: list[float] = []
        #: Groups at start (the default group and the pools').
        self.base: set[str] = set()
        self.started = False
        #: What virsh's errors showed that is not a refusal (defects).
        self.defects: list[str] = []

    @property
    def lv(self) -> PrivateLibvirtd:
        return self.node.libvirtd

    def config(self, log: str, debug: bool) -> str:
        return CONFIG.format(
            log=log, debug=str(debug).lower(), libvirt_uri=self.lv.ro_uri,
            qemu_run_dir=self.lv.qemu_run_dir, connection=self.ovs.connection,
            vswitchd_pidfile=self.ovs.vswitchd_pidfile, port=self.port)

    # -- life cycle ----------------------------------------------------------
    def start(self) -> None:
        os.makedirs(self.workdir)
        self.started = True
        self.ovs.start()
        self.ovs.other_config(rdt_pmd_pool=HP)
        # The hook logs its own time per event at debug level.
        self.node.start(self.config(self.hook_log, True),
                        die_with_parent=True)
        with open(self.agent_conf, 'w', encoding='utf-8') as fh:
            fh.write(self.config(self.agent_log, False) +
                     self.node.resctrl_section())
        self.start_agent()
        wait_for(lambda: soak_checks.pmds_placed(self.rc, self.pmd_tids()),
                 30, 'node %s: the PMD thread in pool hp' % self.name)
        self.base = set(self.rc.group_names())

    def start_agent(self) -> None:
        env = dict(os.environ, PYTHONPATH=REPO)
        out = open(os.path.join(self.workdir, 'agent.out'), 'ab')
        try:
            self.agent = subprocess.Popen(
                [sys.executable, '-m', 'ovs_rdt.agent.service',
                 '--config-file', self.agent_conf], stdout=out, stderr=out,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        finally:
            out.close()
        wait_for(self.metrics_up, 30,
                 'node %s: the agent\'s metrics endpoint' % self.name)

    def metrics_up(self) -> bool:
        import urllib.request
        try:
            with urllib.request.urlopen('http://127.0.0.1:%d/metrics'
                                        % self.port, timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def stop(self) -> list[str]:
        if not self.started:
            return []
        problems = []
        if self.agent is not None:
            self.agent.send_signal(signal.SIGTERM)
            try:
                self.agent.wait(30)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                problems.append('node %s: the agent did not stop' % self.name)
        problems += self.node.stop()
        try:
            self.ovs.stop()
        except SandboxError as exc:
            problems.append('node %s: OvS: %s' % (self.name, exc))
        return problems

    # -- what the checks read ------------------------------------------------
    def pmd_tids(self) -> set[int]:
        return set(self.ovs.pmd_threads())

    def qemu_pid(self, guest: Guest) -> int | None:
        return procfs.read_pidfile(os.path.join(self.lv.qemu_run_dir,
                                                guest.name + '.pid'))

    def vcpu_tids(self, guest: Guest) -> set[int]:
        pid = self.qemu_pid(guest)
        if pid is None:
            return set()
        return {tid for tid, comm in procfs.threads(pid)
                if procfs.is_vcpu_thread(comm)}

    def problems(self, guests: list[Guest]) -> list[str]:
        return soak_checks.problems(
            self.rc, {g: self.vcpu_tids(g) for g in guests}, self.pmd_tids(),
            self.base)

    def settle(self, guests: list[Guest], timeout: float) -> list[str]:
        """The invariants' problems that last ``timeout`` seconds (what
        the agent repairs on its own, e.g. new PMD threads, is given that
        long); [] when they all hold.
        """
        deadline = time.monotonic() + timeout
        while True:
            found = self.problems(guests)
            if not found or time.monotonic() > deadline:
                return found
            time.sleep(0.2)

    def leaks(self) -> list[str]:
        """What is left once every guest is gone."""
        found = []
        try:
            wait_for(lambda: set(self.rc.group_names()) == self.base, 30,
                     'groups back to the start')
        except SandboxError:
            left = set(self.rc.group_names()) ^ self.base
            found.append('node %s: groups %s' % (self.name, sorted(left)))
        names = self.lv.virsh('list', '--all', '--name', check=False).stdout
        if names.strip():
            found.append('node %s: guests still defined: %s'
                         % (self.name, names.split()))
        try:
            wait_for(lambda: not self.lv.qemu_pids(), 30, 'no QEMU')
        except SandboxError:
            found.append('node %s: QEMUs still running: %s' % (
                self.name, self.lv.qemu_pids()))
        return found

    # -- lifecycle events ----------------------------------------------------
    def define(self, serial: int, kind: str, vcpus: int,
               rng: random.Random) -> Guest:
        return Guest(self, serial, kind, vcpus, rng)

    def _define(self, guest: Guest) -> None:
        path = os.path.join(self.workdir, 'guest.xml')
        with open(path, 'w', encoding='utf-8') as fh:
            fh.write(guest.xml())
        self.lv.virsh('define', path)

    def start_guest(self, guest: Guest, fault: bool = False) -> bool:
        """Define and start it; False (and undefined) when refused."""
        guest.node = self
        self._define(guest)
        began = time.monotonic()
        res = self.lv.virsh('start', '--paused', guest.name, check=False)
        self.start_times.append(time.monotonic() - began)
        if res.returncode == 0:
            return True
        self.lv.virsh('undefine', guest.name, check=False)
        self.refused(res, 'start of %s' % guest, fault)
        return False

    def refused(self, res: subprocess.CompletedProcess, what: str,
                fault: bool = False) -> None:
        """A failed virsh command: ovs-rdt's refusal for want of ways or
        CLOSIDs (or, under an injected ``fault``, of resctrl), or
        SandboxError (not ovs-rdt's).  Any other line of ours (a bad
        value, the configuration, a bug, a traceback) is a defect, kept
        for the checks.
        """
        text = res.stderr.strip()
        if 'ovs-rdt: ' not in text:
            raise SandboxError('node %s: %s failed, not by the hook: %s'
                               % (self.name, what, text))
        if 'Traceback' in text or not any(lead in text for lead in (
                REFUSALS + (FAULT_REFUSALS if fault else ()))):
            self.defects.append('%s: not a refusal for want of room: %s'
                                % (what, text))

    def take_defects(self) -> list[str]:
        """The defects seen since the last call, and a dead agent."""
        out, self.defects = self.defects, []
        if self.agent is not None and self.agent.poll() is not None:
            out.append('the agent exited (status %s): %s' % (
                self.agent.returncode, self.agent_log))
        return out

    def running(self, guest: Guest) -> bool:
        return self.lv.virsh('domstate', guest.name, check=False
                             ).stdout.strip() in ('running', 'paused')

    def remove(self, guest: Guest) -> None:
        self.lv.virsh('destroy', guest.name, check=False)
        self.lv.virsh('undefine', guest.name, check=False)

    def migrate(self, guest: Guest, dst: 'SoakNode', live: bool) -> bool:
        """Live, or cold (stopped, the definition moved, started there);
        False when refused (a cold one's guest is gone then).
        """
        if live:
            res = migrate(self.lv, dst.lv, guest.name, True,
                          ['--persistent', '--undefinesource'])
            if res.returncode != 0:
                self.refused(res, 'live migration of %s' % guest)
                return False
            guest.node = dst
            return True
        self.lv.virsh('destroy', guest.name)
        res = migrate(self.lv, dst.lv, guest.name, False,
                      ['--offline', '--persistent', '--undefinesource'])
        if res.returncode != 0:
            self.lv.virsh('undefine', guest.name, check=False)
            self.refused(res, 'cold migration of %s' % guest)
            return False
        guest.node = dst
        res = dst.lv.virsh('start', '--paused', guest.name, check=False)
        if res.returncode == 0:
            return True
        dst.lv.virsh('undefine', guest.name, check=False)
        dst.refused(res, 'start of %s after a cold migration' % guest)
        return False

    def setvcpus(self, guest: Guest, count: int) -> None:
        self.lv.virsh('setvcpus', guest.name, str(count), '--live')
        guest.vcpus = count
        wait_for(lambda: len(self.vcpu_tids(guest)) == count, 30,
                 '%s: %d vCPU threads' % (guest.name, count))

    def toggle_pmds(self) -> str:
        """Re-create the PMD thread on the other core; the new mask."""
        mask = '0x2' if self.ovs.pmd_cpu_mask == '0x1' else '0x1'
        self.ovs.pmd_cpu_mask = mask
        self.ovs.other_config(pmd_cpu_mask=mask)
        self.ovs.wait_pmds(self.ovs.mask_cores(mask))
        return mask

    # -- faults --------------------------------------------------------------
    def restart_agent(self) -> None:
        """SIGKILL, then start again."""
        assert self.agent is not None
        self.agent.kill()
        self.agent.wait(30)
        self.start_agent()

    def restart_libvirtd(self) -> None:
        """libvirtd alone stops (guests run on) and starts again."""
        stop_pid(self.lv.pid(), 30)
        if self.lv.proc is not None:
            self.lv.proc.wait(timeout=30)
        # Not die_with_parent: the parent-death signal comes when the
        # thread that forked it ends (a worker), not the soak.
        self.lv.start()

    def kill_qemu(self, guest: Guest) -> None:
        """SIGKILL its QEMU; libvirt sees it die and runs the release hook."""
        pid = self.qemu_pid(guest)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: 'shut off' in self.lv.virsh(
            'domstate', guest.name, check=False).stdout, 30,
            '%s shut off after its QEMU was killed' % guest.name)
        self.lv.virsh('undefine', guest.name, check=False)

    def start_under_fault(self, guest: Guest, rule: str) -> bool:
        """Start ``guest`` while the emulator fails ``rule``'s operation."""
        self.node.emulator.set_faults(rule)
        try:
            return self.start_guest(guest, fault=True)
        finally:
            self.node.emulator.set_faults()

    def foreign_group(self, meanwhile: Callable[[], object]) -> None:
        """Another tool's group (a bare ``mkdir``) while ``meanwhile`` runs."""
        path = self.rc.path('soak-foreign')
        os.mkdir(path)
        try:
            meanwhile()
        finally:
            os.rmdir(path)

    def pqos(self) -> bool:
        """Intel's real ``pqos -I -s``, then its classes removed; False
        when pqos is not installed.
        """
        from tests.functional.fixtures import pqos as real
        if real.pqos_missing():
            return False
        emu = self.node.emulator
        tmp = os.path.join(self.workdir, 'pqos')
        os.makedirs(tmp, exist_ok=True)
        run = real.Pqos(emu.root, emu.sysfs, tmp)
        res = run('-s')
        made = run.groups()
        run.remove_groups()
        # With our groups there pqos runs out of CLOSIDs at start (its
        # classes stay: the operator removes them, as done here).
        if res.returncode not in (0, 1) or not made:
            raise SandboxError('node %s: pqos -I -s: status %d, classes %s: '
                               '%s' % (self.name, res.returncode, made,
                                       (res.stdout + res.stderr)[-500:]))
        return True
