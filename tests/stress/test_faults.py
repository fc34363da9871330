"""Faults, each injected on the real node and its end state checked.

Kills happen at exact steps through the emulator's ``KILL`` fault (the
process doing that resctrl operation gets SIGKILL, like a ``kill -9`` at
that moment); errnos through its errno faults; daemons are killed with
SIGKILL.  After every fault: the node satisfies the invariants, a running
bystander guest still runs in its group, and once the agent has reconciled
the node holds the same groups and free ways as before (nothing leaked,
nothing half-applied survives).
"""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from typing import Iterator

import pytest

from ovs_rdt.core.model import PMD_GROUP
from ovs_rdt import manager
from ovs_rdt.sandbox.wait import pid_alive
from tests.functional.fixtures.libvirt import Guest
from tests.stress import bed, figures

Base = tuple[list[str], dict[int, int]]


def baseline(node: bed.Node, guests: list[tuple[Guest, str]]) -> Base:
    return node.our_groups(), bed.check_invariants(node, guests)


def back_to(node: bed.Node, base: Base, guests: list[tuple[Guest, str]],
            timeout: float = 30) -> None:
    """The agent repairs the node to ``base`` (groups and free ways)."""
    def same() -> bool:
        return (node.our_groups(), bed.check_invariants(node, guests)) == base
    try:
        bed.wait_for(same, timeout=timeout, step=0.2, what='repair')
    except AssertionError:
        raise AssertionError('not repaired: %s, free %s (before: %s)' % (
            node.our_groups(), bed.check_invariants(node, guests), base)
        ) from None
    figures.add('groups leaked', 0)


def one_line_of_ours(stderr: str) -> str:
    ours = [ln for ln in stderr.splitlines() if 'ovs-rdt' in ln]
    assert len(ours) == 1, stderr
    return ours[0]


@pytest.fixture
def bystander(node: bed.Node) -> Iterator[list[tuple[Guest, str]]]:
    """A running guest with 2 dedicated ways that no fault may disturb."""
    node.emu.set_faults()
    guest = node.tb.define(bed.dedicated(2), vcpus=1, memory_mib=32)
    node.tb.start(guest)
    running = [(guest, guest.group)]
    yield running
    node.emu.set_faults()
    assert node.tb.state(guest) == 'running', 'the bystander was stopped'
    bed.check_invariants(node, running)
    node.tb.remove_guests()
    bed.wait_for(lambda: node.vm_groups() == [], timeout=30, what='no VMs')


def assert_agent_alive(node: bed.Node) -> None:
    assert node.agent is not None and node.agent.proc is not None
    assert node.agent.proc.poll() is None, node.agent.log()[-2000:]


# -- the hook killed at each write of its plan -----------------------------------
@pytest.mark.parametrize('rule', [
    'mkdir /ovsrdt-vm-* KILL 1',                  # prepare: the group
    'write /schemata KILL 1',                     # prepare: shrink the root
    'write /ovsrdt-vm-*/schemata KILL 1',         # prepare: the VM's ways
    'write /ovsrdt-vm-*/tasks KILL 1',            # started: the vCPUs
])
def test_hook_killed_mid_plan(node: bed.Node, bystander: list, rule: str
                              ) -> None:
    base = baseline(node, bystander)
    victim = node.tb.define(bed.dedicated(3), vcpus=1, memory_mib=32)
    # The victim's group only: the agent may write the bystander's tasks
    # meanwhile (a QEMU thread born in the default group while the hook
    # moved the others: its next pass puts it in).
    node.emu.set_faults(rule.replace('ovsrdt-vm-*', victim.group))
    # The agent places a running domain's threads too, every reconcile
    # interval, a QEMU not yet through its started hook included: paused
    # meanwhile, so that the write killed is the hook's (stopped while this
    # test holds the resctrl lock: it holds none the hook would wait for).
    assert node.agent is not None and node.agent.proc is not None
    with node.rc.lock():
        os.kill(node.agent.proc.pid, signal.SIGSTOP)
    try:
        res = node.tb.start(victim, check=False)
    finally:
        node.emu.set_faults()
        os.kill(node.agent.proc.pid, signal.SIGCONT)
    assert res.returncode != 0, 'the hook was not killed (%s)' % rule
    assert 'signal' in res.stderr or 'status' in res.stderr, res.stderr
    assert node.tb.state(victim) == 'shut off'
    assert_agent_alive(node)
    back_to(node, base, bystander)
    figures.add('faults injected and survived')
    # Nothing stale blocks the next start.
    node.tb.start(victim)
    bed.check_invariants(node, bystander + [(victim, victim.group)])
    node.tb.destroy(victim)
    back_to(node, base, bystander)


# -- the agent killed mid-decision -------------------------------------------------
@pytest.mark.parametrize('rule, change', [
    ('write /ovsrdt-ovs-pmd/schemata KILL 1', {'rdt-pmd-l3-ways': '3'}),
    # 6 more ways than the free ones next to the PMD group can hold
    # (groups stay where they are): the default group gives some up.
    ('write /schemata KILL 1', {'rdt-pmd-l3-ways': '8'}),
    ('write /ovsrdt-ovs-pmd/tasks KILL 1', {'pmd-cpu-mask': '0x3'}),
])
def test_agent_killed_mid_decision(node: bed.Node, bystander: list,
                                   rule: str, change: dict) -> None:
    assert node.ovs is not None and node.agent is not None
    old = {key: node.ovs.vsctl('get', 'Open_vSwitch', '.',
                               'other_config:%s' % key).strip('"')
           for key in change}
    node.emu.set_faults(rule)
    node.ovs.other_config(**change)
    try:
        bed.wait_for(lambda: node.agent.proc.poll() is not None, timeout=30,
                     what='the agent killed at %s' % rule)
        assert node.agent.proc.returncode == -signal.SIGKILL
        node.emu.set_faults()
        bed.check_invariants(node, bystander)   # even half-way
        node.start_agent()
        node.wait_agent_ok()
        bed.wait_for(node.pmd_in_group, timeout=30,
                     what='PMDs in their group')
        ways = int(change.get('rdt-pmd-l3-ways', old.get('rdt-pmd-l3-ways')
                              or bed.PMD_WAYS))
        bed.wait_for(lambda: node.groups()[PMD_GROUP].l3[0].count == ways,
                     timeout=30, what='%d PMD ways after the restart (%s, %r)'
                     % (ways, node.groups()[PMD_GROUP].l3[0], node.status()))
        bed.check_invariants(node, bystander)
        figures.add('faults injected and survived')
    finally:
        # Whatever failed, the next test starts from the knobs it expects.
        node.emu.set_faults()
        node.ovs.other_config(**old)
        if node.agent.proc.poll() is not None:
            node.start_agent()
    node.wait_agent_ok()
    bed.wait_for(node.pmd_in_group, timeout=30, what='PMDs in their group')


# -- errnos from resctrl ---------------------------------------------------------
@pytest.mark.parametrize('err', ['EIO', 'ENOSPC', 'EBUSY'])
def test_resctrl_errors_under_the_agent(node: bed.Node, bystander: list,
                                        err: str) -> None:
    assert node.ovs is not None
    node.emu.set_faults('write /ovsrdt-ovs-pmd/schemata %s' % err)
    try:
        node.ovs.other_config(**{'rdt-pmd-l3-ways': '3'})
        status = bed.wait_for(lambda: (lambda s: s if s.startswith('error')
                                       else None)(node.status()), timeout=30,
                              what='an error status')
        assert '\n' not in status and status.isprintable(), status
        # ENOSPC with nothing in last_cmd_status may be another tool's:
        # each try of the agent plans it again for SETTLE.  It lasts over
        # two more tries (re-scans: [ovs] rescan_interval = 1 here) and
        # reads beside it keep getting the lock (one timed out while the
        # agent held it back to back).
        end = time.monotonic() + (2 * (manager.SETTLE + 1)
                                  if err == 'ENOSPC' else 0)
        while time.monotonic() < end:
            node.groups()
            time.sleep(0.1)
        assert_agent_alive(node)
        bed.check_invariants(node, bystander)
        node.emu.set_faults()
        bed.wait_for(lambda: node.status().startswith('ok') and
                     node.groups()[PMD_GROUP].l3[0].count == 3, timeout=30,
                     what='the agent to recover (status %r)' % node.status())
        bed.check_invariants(node, bystander)
    finally:
        # Whatever failed, the next test starts from the knobs it expects.
        node.emu.set_faults()
        node.ovs.other_config(**{'rdt-pmd-l3-ways': str(bed.PMD_WAYS)})
    node.wait_agent_ok()
    figures.add('faults injected and survived')


@pytest.mark.parametrize('rule', ['mkdir /ovsrdt-vm-* ENOSPC',
                                  'write /ovsrdt-vm-*/schemata EIO',
                                  'write /ovsrdt-vm-*/tasks EBUSY'])
def test_resctrl_errors_under_the_hook(node: bed.Node, bystander: list,
                                       rule: str) -> None:
    base = baseline(node, bystander)
    victim = node.tb.define(bed.dedicated(3), vcpus=1, memory_mib=32)
    node.emu.set_faults(rule)
    res = node.tb.start(victim, check=False)
    node.emu.set_faults()
    assert res.returncode != 0
    line = one_line_of_ours(res.stderr)
    assert rule.split()[-1] in line or os.strerror(
        getattr(__import__('errno'), rule.split()[-1])) in line, line
    assert node.tb.state(victim) == 'shut off'
    back_to(node, base, bystander)
    figures.add('faults injected and survived')


# -- daemons killed ------------------------------------------------------------------
def test_ovs_daemons_killed(node: bed.Node, bystander: list) -> None:
    assert node.ovs is not None
    node.ovs.kill_vswitchd()
    time.sleep(1)
    assert_agent_alive(node)
    node.ovs.start_vswitchd()
    bed.wait_for(node.pmd_in_group, timeout=30, what='new PMDs in the group')
    node.ovs.kill_ovsdb()
    time.sleep(1)
    assert_agent_alive(node)
    node.ovs.start_ovsdb()
    node.ovs.other_config(**{'pmd-cpu-mask': '0x3'})     # new TIDs
    node.ovs.wait_pmds({0, 1})
    bed.wait_for(node.pmd_in_group, timeout=30, what='new PMDs in the group')
    node.wait_agent_ok()
    node.ovs.other_config(**{'pmd-cpu-mask': '0x1'})
    bed.wait_for(node.pmd_in_group, timeout=30, what='PMDs in the group')
    bed.check_invariants(node, bystander)
    figures.add('faults injected and survived', 2)


def test_libvirtd_killed_while_guests_start(node: bed.Node,
                                            bystander: list) -> None:
    base = baseline(node, bystander)
    guests = [node.tb.define(bed.dedicated(1), vcpus=1, memory_mib=32)
              for _ in range(4)]
    pid = node.tb.libvirtd.pid()
    assert pid

    def kill() -> None:
        time.sleep(1.0)         # some QEMUs up, some starting
        os.kill(pid, signal.SIGKILL)

    bed.all_at_once([lambda g=g: node.tb.start(g, check=False)
                     for g in guests] + [kill])
    if node.tb.libvirtd.proc is not None:
        node.tb.libvirtd.proc.wait(timeout=30)
    node.tb.libvirtd.start(die_with_parent=True)
    running = [(g, g.group) for g in guests
               if node.tb.state(g) == 'running']
    assert node.tb.state(bystander[0][0]) == 'running'
    # Guests that run are managed; the others' groups are reconciled away.
    bed.wait_for(lambda: set(node.vm_groups()) == {
        g.group for g, _ in bystander + running}, timeout=30,
        what='only running guests have groups (%s)' % node.vm_groups())
    bed.check_invariants(node, bystander + running)
    for guest, _ in running:
        node.tb.destroy(guest)
    back_to(node, base, bystander)
    figures.add('faults injected and survived')
    figures.record('libvirtd kill: guests running after restart',
                   '%d of %d' % (len(running), len(guests)))


# -- the log on a full disk, a stale lock holder ---------------------------------------
def test_log_on_a_full_disk(node: bed.Node, bystander: list) -> None:
    with open(node.tb.config, encoding='utf-8') as fh:
        text = fh.read()
    node.tb.configure_raw(text.replace('[DEFAULT]\nlog_file = %s\n'
                                       % node.tb.log, '', 1)
                          .replace('[DEFAULT]\n', '[DEFAULT]\nlog_file = '
                                   '/dev/full\n', 1))
    try:
        guest = node.tb.define(bed.dedicated(1), vcpus=1, memory_mib=32)
        node.tb.start(guest)
        bed.check_invariants(node, bystander + [(guest, guest.group)])
        node.tb.destroy(guest)
    finally:
        node.configure()
    figures.add('faults injected and survived')


def test_stale_lock_holder(node: bed.Node, bystander: list) -> None:
    base = baseline(node, bystander)
    node.configure(extra='[resctrl]\nlock_timeout = 2\n')
    holder = subprocess.Popen(
        [sys.executable, '-c', 'import fcntl, os, sys, time\n'
         'fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n'
         'fcntl.flock(fd, fcntl.LOCK_EX)\nprint("held", flush=True)\n'
         'time.sleep(600)', node.emu.root], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == 'held'
        holder.send_signal(signal.SIGSTOP)          # hung, never lets go
        guest = node.tb.define(bed.dedicated(1), vcpus=1, memory_mib=32)
        res = node.tb.start(guest, check=False)
        assert res.returncode != 0
        assert 'waiting for the lock' in one_line_of_ours(res.stderr)
        assert node.tb.state(guest) == 'shut off'
    finally:
        holder.kill()
        holder.wait()
        node.configure()
    fd = os.open(node.emu.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)          # the lock went with it
    finally:
        os.close(fd)
    node.tb.start(guest)
    node.tb.destroy(guest)
    back_to(node, base, bystander)
    assert pid_alive(node.agent.proc.pid) if node.agent and \
        node.agent.proc else True
    figures.add('faults injected and survived')


# -- resctrl unmounted under the agent (last: the remount starts empty) -------------
def test_resctrl_unmounted_under_the_agent(node: bed.Node) -> None:
    assert node.emu.emu is not None
    node.tb.remove_guests()
    subprocess.run(['fusermount3', '-u', node.emu.root], check=True)
    try:
        bed.wait_for(lambda: node.status().startswith('error'), timeout=30,
                     what='an error status (now %r)' % node.status())
        assert_agent_alive(node)
    finally:
        node.emu.emu.start()
        node.emu.pid = node.emu.emu.pid
    bed.wait_for(lambda: node.status().startswith('ok') and
                 node.pmd_in_group(), timeout=60,
                 what='the agent to rebuild (status %r)' % node.status())
    bed.check_invariants(node)
    figures.add('faults injected and survived')
