"""ovs-rdt-agent reading libvirt through its API (a read-only connection
and lifecycle events), against a real private libvirtd with KVM guests, the
hook and the mounted resctrl emulator (xeon-gold-6230: 11 ways, 2 cache
domains).  The agent's periodic reconciliation is 60 s away unless a test
says otherwise: what happens within a second or two happened because of
an event.  Where the hook must not be the one acting, it is disabled (a
wrapper that does nothing) for that part of the test.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Iterator

import pytest

from ovs_rdt.core.model import PMD_GROUP
from ovs_rdt.resctrl import Resctrl
from tests.functional.fixtures.emulator import below_testbed
from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.fixtures.libvirt import Guest, LibvirtTestbed, wait_for
from tests.functional.fixtures.ovs import AgentProcess, OvsTestbed, REPO
from tests.functional.test_metrics import Scrape, free_port

PROFILE = 'xeon-gold-6230'
#: The issue's bound for a dead guest's group with the agent running.
GONE_WITHIN = 2.0


def rdt(body: str) -> str:
    return '<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">%s</rdt:rdt>' % body


class Node:
    """The testbed, the emulator, and an agent on the same config file."""

    def __init__(self, tb: LibvirtTestbed, emu: EmulatorFixture,
                 workdir: str) -> None:
        self.tb = tb
        self.emu = emu
        self.rc = Resctrl(emu.root, emu.sysfs)
        self.workdir = workdir
        self.agent: AgentProcess | None = None

    def configure(self, ovs: OvsTestbed | None = None,
                  reconcile_interval: int = 60, uri: str | None = None,
                  extra: str = '', **libvirt: object) -> None:
        connection = (ovs.connection if ovs is not None else
                      'unix:' + os.path.join(self.workdir, 'no-ovsdb.sock'))
        pidfile = (ovs.vswitchd_pidfile if ovs is not None else
                   os.path.join(self.workdir, 'no-vswitchd.pid'))
        self.tb.configure(
            self.emu.root, self.emu.sysfs, pools={'hp': 2},
            extra='[ovs]\nconnection = %s\nvswitchd_pidfile = %s\n'
            'ovsdb_timeout = 5\nrescan_interval = 30\n'
            '[agent]\nreconcile_interval = %d\n%s'
            % (connection, pidfile, reconcile_interval, extra),
            uri=uri or self.tb.libvirtd.ro_uri, **libvirt)

    def start_agent(self, patches: dict[str, str] | None = None,
                    connected: bool = True,
                    beside_libvirtd: bool = False) -> AgentProcess:
        """Start the agent.

        ``beside_libvirtd``: in the private libvirtd's mount namespace, as
        on a node (where both see the same /run/libvirt).
        """
        self.agent = AgentProcess(
            self.tb.config, os.path.join(self.workdir, 'agent.log'), patches,
            self.tb.libvirtd.enter() if beside_libvirtd else None).start()
        if connected:
            wait_for(lambda: 'connected to libvirt at' in self.agent_log(),
                     timeout=60, what='the agent connected to libvirt')
        return self.agent

    def agent_log(self) -> str:
        return self.agent.log() if self.agent is not None else ''

    def vm_groups(self) -> list[str]:
        return [g for g in self.rc.group_names()
                if g.startswith('ovsrdt-vm-')]

    def tasks(self, group: str) -> set[int]:
        try:
            return set(self.rc.tasks(group))
        except FileNotFoundError:
            return set()

    def exists(self, group: str) -> bool:
        return os.path.isdir(self.rc.path(group))

    def kill_qemu(self, guest: Guest) -> float:
        """``kill -9`` the guest's QEMU; when it was sent."""
        pid = self.tb.pid(guest)
        os.kill(pid, signal.SIGKILL)
        return time.monotonic()

    def wait_gone(self, group: str, since: float, timeout: float) -> float:
        """Seconds from ``since`` until ``group`` is removed."""
        wait_for(lambda: not self.exists(group), timeout=timeout, step=0.01,
                 what='%s removed' % group)
        return time.monotonic() - since


@pytest.fixture(scope='module')
def emulator(libvirt_testbed: LibvirtTestbed) -> Iterator[EmulatorFixture]:
    # Below the shared mount base: the mount reaches libvirtd's namespace.
    with below_testbed(libvirt_testbed, PROFILE) as emu:
        yield emu


@pytest.fixture
def node(libvirt_testbed: LibvirtTestbed, emulator: EmulatorFixture,
         tmp_path: Any) -> Iterator[Node]:
    node = Node(libvirt_testbed, emulator, str(tmp_path))
    node.configure()
    try:
        yield node
    finally:
        if node.agent is not None:
            node.agent.stop()
        libvirt_testbed.remove_guests()
        # A test that failed half-way may leave a killed guest's group.
        rc = node.rc
        for group in node.vm_groups():
            os.rmdir(rc.path(group))


def test_killed_qemu_group_is_gone_at_once(node: Node) -> None:
    """kill -9 of a guest's QEMU, the release hook not there to help: the
    STOPPED event has the agent remove the group in under 2 s.
    """
    node.start_agent()
    guest = node.tb.define(rdt('<rdt:l3 ways="2"/>'))
    node.tb.start(guest)
    assert node.tb.vcpu_tids(guest) <= node.tasks(guest.group)
    with node.tb.hook_disabled():
        took = node.wait_gone(guest.group, node.kill_qemu(guest), 10)
        assert took < GONE_WITHIN, took
    assert 'removed group %s' % guest.group not in node.tb.hook_log()
    assert 'removing %s: libvirt does not run its domain' % guest.group \
        in node.agent_log()


def test_without_libvirt_the_orphan_grace_decides(node: Node) -> None:
    """libvirt unreachable: the group of a killed QEMU stays for
    ORPHAN_GRACE (3 s here), then goes, as before the API was used.
    """
    node.configure(reconcile_interval=1,
                   uri='qemu:///system?socket=/nonexistent/libvirt-sock')
    node.start_agent({'ovs_rdt.agent.orphans.ORPHAN_GRACE': '3.0'},
                     connected=False)
    guest = node.tb.define(rdt('<rdt:l3 ways="2"/>'))
    node.tb.start(guest)
    wait_for(lambda: 'libvirt at qemu:///system?socket=/nonexistent/' in
             node.agent_log(), what='the agent tried libvirt')
    # A pass during the start (the group made at "prepare", no QEMU yet)
    # starts the orphan clock; the next pass, seeing the guest run, stops
    # it.  Killed before that pass, the guest would be gone for less than
    # the grace when its group goes (the rule samples once per interval).
    time.sleep(2.5)
    with node.tb.hook_disabled():
        killed = node.kill_qemu(guest)
        time.sleep(1.5)
        assert node.exists(guest.group)
        took = node.wait_gone(guest.group, killed, 15)
    assert took >= 3.0, took
    log = node.agent_log()
    assert 'no QEMU has run with its uuid for 3s' in log
    assert 'Traceback' not in log


def test_guest_started_without_the_hook_is_placed_from_the_event(
        node: Node) -> None:
    node.start_agent()
    guest = node.tb.define(rdt('<rdt:l3 ways="3"/>'))
    with node.tb.hook_disabled():
        node.tb.start(guest)
        started = time.monotonic()
        vcpus = node.tb.vcpu_tids(guest)
        wait_for(lambda: vcpus and vcpus <= node.tasks(guest.group),
                 timeout=5, what='vCPU threads in %s' % guest.group)
        placed_in = time.monotonic() - started
        # Every QEMU thread ([libvirt] include_emulator_threads = true),
        # in a dedicated group of 3 ways no other group overlaps.
        wait_for(lambda: node.tasks(guest.group) ==
                 set(node.tb.threads(guest)), timeout=2,
                 what='every QEMU thread in %s' % guest.group)
        groups = {g.name: g for g in node.rc.groups()}
        for dom, mask in groups[guest.group].l3.items():
            assert mask.count == 3
            assert not [n for n, g in groups.items() if n != guest.group
                        and mask.overlaps(g.l3[dom])]
        assert 'runs without its group %s' % guest.group in node.agent_log()
        assert not [line for line in node.tb.hook_log().splitlines()
                    if 'ovs-rdt-hook[' in line and guest.group in line]
        # Stopped, the hook still disabled: the event removes the group.
        node.tb.destroy(guest)
        node.wait_gone(guest.group, time.monotonic(), GONE_WITHIN)
    assert placed_in < 5


def test_vcpu_hotplug_threads_join_the_group(node: Node) -> None:
    """``virsh setvcpus --live``: the new vCPU thread is born in its
    creator's group (the main thread's: the guest's group by default),
    and without the emulator threads there the agent moves it.
    """
    guest = node.tb.define(rdt('<rdt:l3 ways="2"/>'), vcpus=2,
                           vcpu_attrs=" current='1'")
    node.tb.start(guest)
    assert len(node.tb.vcpu_tids(guest)) == 1
    node.tb.virsh('setvcpus', guest.name, '2', '--live')
    wait_for(lambda: len(node.tb.vcpu_tids(guest)) == 2, what='CPU 1/KVM')
    assert node.tb.vcpu_tids(guest) <= node.tasks(guest.group)
    node.tb.undefine(guest)

    node.configure(reconcile_interval=1, include_emulator_threads=False)
    node.start_agent()
    guest = node.tb.define(rdt('<rdt:l3 ways="2"/>'), vcpus=2,
                           vcpu_attrs=" current='1'")
    node.tb.start(guest)
    assert node.tasks(guest.group) == node.tb.vcpu_tids(guest)
    node.tb.virsh('setvcpus', guest.name, '2', '--live')
    wait_for(lambda: len(node.tb.vcpu_tids(guest)) == 2, what='CPU 1/KVM')
    wait_for(lambda: node.tasks(guest.group) == node.tb.vcpu_tids(guest),
             timeout=10, what='both vCPU threads (only) in %s' % guest.group)
    assert 'moved vCPU threads' in node.agent_log()


def test_libvirtd_restart_under_the_agent(node: Node, ovs: OvsTestbed) -> None:
    """libvirtd stops: one log line, OvS work goes on; a guest killed while
    it is away has its group removed once the agent has reconnected.
    """
    node.configure(ovs=ovs)
    agent = node.start_agent()
    guest = node.tb.define(rdt('<rdt:l3 ways="2"/>'))
    node.tb.start(guest)
    lv = node.tb.libvirtd
    with node.tb.hook_disabled():
        pid = lv.pid()
        assert pid is not None
        from ovs_rdt.sandbox import stop_pid
        stop_pid(pid, 30)
        if lv.proc is not None:
            lv.proc.wait(timeout=30)
        wait_for(lambda: 'lost the connection to libvirt' in node.agent_log(),
                 timeout=30, what='the agent noticed')
        # The OvS side does not wait for libvirt.
        ovs.other_config(rdt_pmd_l3_ways='2')
        wait_for(lambda: node.tasks(PMD_GROUP) and
                 set(ovs.pmd_threads()) <= node.tasks(PMD_GROUP),
                 timeout=10, what='PMD threads placed')
        node.kill_qemu(guest)
        time.sleep(1)
        assert node.exists(guest.group)      # no libvirt: the grace holds
        lv.start(die_with_parent=True)
        restarted = time.monotonic()
        wait_for(lambda: 'connected to libvirt at %s again' % lv.ro_uri
                 in node.agent_log(), timeout=60, what='reconnected')
        node.wait_gone(guest.group, restarted, 60)
    assert agent.proc is not None and agent.proc.poll() is None
    log = node.agent_log()
    assert log.count('lost the connection to libvirt') == 1
    assert 'Traceback' not in log


def cli(node: Node, *args: str) -> str:
    res = subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                          '--config-file', node.tb.config, *args],
                         capture_output=True, text=True, timeout=60,
                         cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_status_top_and_metrics_name_vms_as_libvirt_does(node: Node) -> None:
    """A name with a comma: QEMU's command line has it escapped
    (``-name guest=a,,b``), libvirt's API as it is.  Without libvirt,
    status and top say where their names come from.
    """
    port = free_port()
    node.configure(extra='[metrics]\nlisten = 127.0.0.1:%d\n' % port)
    node.start_agent()
    guest = node.tb.define(rdt('<rdt:l3 ways="2"/>'), name_suffix=',web')
    node.tb.start(guest)
    plan = json.loads(cli(node, 'status', '--json'))
    assert plan['vm_names']['source'] == 'libvirt'
    names = [m['name'] for row in plan['domains'][0]['groups']
             for m in row['members'] if m['kind'] == 'vm']
    assert names == [guest.name]
    assert cli(node, 'top', '--once', '--interval', '0.2').rstrip().endswith(
        'VM names: from libvirt at %s' % node.tb.libvirtd.ro_uri)
    scrape = wait_for(lambda: Scrape(port), what='metrics', step=0.1)
    assert scrape.get('ovs_rdt_llc_occupancy_bytes', group=guest.group,
                      domain='0', vm=guest.name) >= 0
    assert scrape.get('ovs_rdt_libvirt_connected') == 1
    assert scrape.get('ovs_rdt_errors', '_total', source='libvirt') == 0

    node.configure(uri='qemu:///system?socket=/nonexistent/sock')
    plan = json.loads(cli(node, 'status', '--json'))
    assert plan['vm_names']['source'] == 'proc'
    text = cli(node, 'status')
    assert 'VM names: from QEMU command lines (libvirt at qemu:///system?' \
        'socket=/nonexistent/sock: ' in text


def hook_pids(node: Node, guest: Guest, what: str) -> list[int]:
    """The pids of the hook log lines about ``guest`` that contain ``what``."""
    return [int(line.split('ovs-rdt-hook[')[1].split(']')[0])
            for line in node.tb.hook_log().splitlines()
            if 'ovs-rdt-hook[' in line and "domain '%s'" % guest.name
            in line and what in line]


def serving_again(node: Node, guest: Guest, count: int) -> AgentProcess:
    """A new agent beside libvirtd (its ``count``-th hook server) serves
    the guest's start and stop.
    """
    agent = node.start_agent(beside_libvirtd=True)
    wait_for(lambda: agent.log().count('serving the libvirt hook on')
             == count, timeout=30, what='the hook server')
    node.tb.start(guest)
    for what in ('prepare begin: reserved', 'started begin: moved vCPU'):
        assert hook_pids(node, guest, what)[-1] == agent.proc.pid
    node.tb.destroy(guest)
    wait_for(lambda: hook_pids(node, guest, 'release end: removed group')
             [-1:] == [agent.proc.pid], timeout=30, what='the served release')
    return agent


def test_the_agent_serves_the_hook_s_events(node: Node) -> None:
    """[libvirt] hook_server (the default): the wrapper hands libvirt's
    events to the agent, which runs them as the hook would; with the agent
    killed, the wrapper does them itself, and the next agent serves again.
    An agent that does not see libvirtd's /run (another mount namespace)
    serves nothing, and says why.
    """
    from libvirt_hooks import install
    from libvirt_hooks import protocol
    from libvirt_hooks.server import socket_path

    sock = socket_path(node.emu.root)
    install.install(node.tb.hook, node.tb.config, socket=sock)
    guest = node.tb.define(rdt('<rdt:l3 ways="2"/>'))
    try:
        # Outside libvirtd's namespace (the test's own): not served.
        agent = node.start_agent()
        wait_for(lambda: 'serving the libvirt hook on %s' % sock
                 in node.agent_log(), timeout=30, what='the hook server')
        assert os.stat(sock).st_mode & 0o777 == 0o600
        node.tb.start(guest)
        assert node.tb.vcpu_tids(guest) <= node.tasks(guest.group)
        assert agent.proc.pid not in hook_pids(node, guest, '')
        assert 'runs in another mnt namespace' in node.agent_log()
        node.tb.destroy(guest)
        agent.stop()
        assert not os.path.exists(sock)

        agent = node.start_agent(beside_libvirtd=True)
        wait_for(lambda: agent.log().count('serving the libvirt hook on')
                 == 2, timeout=30, what='the hook server')
        node.tb.start(guest)
        assert node.tb.vcpu_tids(guest) <= node.tasks(guest.group)
        assert node.rc.group(guest.group).l3[0].count == 2
        pid = agent.proc.pid
        assert hook_pids(node, guest, 'prepare begin: reserved')[-1] == pid
        assert hook_pids(node, guest, 'started begin: moved vCPU')[-1] == pid
        node.tb.destroy(guest)
        # release end (libvirt ignores its status) is answered first and
        # done right after, in the agent.
        wait_for(lambda: hook_pids(node, guest, 'release end: removed group')
                 [-1:] == [pid], timeout=30, what='the served release')
        assert guest.group not in node.vm_groups()

        agent.proc.kill()                  # its socket stays, dead
        agent.proc.wait()
        node.tb.start(guest)
        assert node.tb.vcpu_tids(guest) <= node.tasks(guest.group)
        assert hook_pids(node, guest, 'started begin: moved vCPU')[-1] \
            not in (pid, os.getpid())
        node.tb.destroy(guest)
        assert guest.group not in node.vm_groups()

        agent = serving_again(node, guest, 3)           # replaces it

        # Killed mid-event, once it has taken the request (its prepare
        # waits for the resctrl lock this test holds): netcat has sent
        # libvirt's XML, and the wrapper does the event itself from the
        # agent's spool.
        spools = protocol.spool_dir(sock)
        done: list[subprocess.CompletedProcess] = []
        with node.rc.lock():
            thread = threading.Thread(target=lambda: done.append(
                node.tb.start(guest, check=False)))
            thread.start()
            wait_for(lambda: os.listdir(spools), timeout=30,
                     what='the agent keeping the event')
            agent.proc.kill()
            agent.proc.wait()
        thread.join(120)
        assert done and done[0].returncode == 0, done and done[0].stderr
        assert node.tb.vcpu_tids(guest) <= node.tasks(guest.group)
        assert hook_pids(node, guest, 'prepare begin: reserved')[-1] \
            not in (agent.proc.pid, os.getpid())
        assert os.listdir(spools) == []
        node.tb.destroy(guest)
        assert guest.group not in node.vm_groups()

        agent = serving_again(node, guest, 4)           # and again
        agent.stop()
        assert not os.path.exists(sock) and not os.path.exists(spools)
        assert 'Traceback' not in node.agent_log()
    finally:
        install.install(node.tb.hook, node.tb.config)
        if os.path.exists(sock):
            os.unlink(sock)
        shutil.rmtree(protocol.spool_dir(sock), ignore_errors=True)
