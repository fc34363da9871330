"""ovs_rdt.procfs: what a guest's QEMU is (the hook's and the agent's rule)."""
from __future__ import annotations

import os

import pytest

from ovs_rdt import procfs

UUID = '0b0580e0-4511-437a-855b-3e988e147bd5'
LIBVIRT = ['-name', 'guest=vm1,debug-threads=on', '-S', '-uuid', UUID,
           '-no-user-config']


@pytest.mark.parametrize('argv0', ['/usr/bin/qemu-system-x86_64',
                                   '/usr/bin/kvm', '/opt/emu/wrapper', ''])
def test_known_by_its_uuid_whatever_argv0(argv0: str) -> None:
    assert procfs.guest_of_cmdline([argv0] + LIBVIRT) == ('vm1', UUID)


@pytest.mark.parametrize('args, guest', [
    (['kvm', '-name', 'vm1', '--uuid', UUID.upper()], ('vm1', UUID)),
    (['kvm', '-uuid=' + UUID.replace('-', '')], (UUID, UUID)),
    (['kvm', '-uuid', 'x', '-uuid', UUID], (UUID, UUID)),    # the last counts
    (['kvm', '-name', 'guest=vm1'], None),                   # no -uuid
    (['kvm', '-uuid', 'not-a-uuid'], None),
    (['kvm', '-uuid'], None),
    ([], None),
])
def test_command_lines(args: list[str], guest: tuple | None) -> None:
    assert procfs.guest_of_cmdline(args) == guest


def _process(proc: str, pid: int, state: str, threads: dict[int, str]
             ) -> None:
    base = os.path.join(proc, str(pid))
    os.makedirs(base, exist_ok=True)
    with open(os.path.join(base, 'stat'), 'w') as fh:
        fh.write('%d (a b) c) %s 1 2 3\n' % (pid, state))
    for tid, tstate in threads.items():
        os.makedirs(os.path.join(base, 'task', str(tid)), exist_ok=True)
        with open(os.path.join(base, 'task', str(tid), 'stat'), 'w') as fh:
            fh.write('%d (x) %s 1\n' % (tid, tstate))


@pytest.mark.parametrize('state,running', [('S', True), ('R', True),
                                           ('D', True), ('Z', False),
                                           ('X', False)])
def test_a_zombie_is_dead_for_every_caller(tmp_path, state: str,
                                           running: bool) -> None:
    """One rule (procfs.alive): the pidfile reader, the sandbox's waits and
    the PMD scan all count a zombie as exited (read_pidfile counted it
    alive before).
    """
    from ovs_rdt.agent import pmd
    from ovs_rdt.sandbox import wait
    proc = str(tmp_path / 'proc')
    _process(proc, 42, state, {42: state})
    pidfile = tmp_path / 'x.pid'
    pidfile.write_text('42\n')
    assert procfs.alive(42, proc) is running
    expected = 42 if running else None
    assert procfs.read_pidfile(str(pidfile), proc) == expected
    with open(os.path.join(proc, '42', 'comm'), 'w') as fh:
        fh.write('ovs-vswitchd\n')
    assert (pmd.find_vswitchd(str(pidfile), proc)[0] == 42) is running
    assert procfs.alive(None, proc) is False
    assert procfs.alive(7, proc) is False     # no /proc entry
    # The sandbox asks the same rule of the real /proc.
    assert wait.pid_alive(os.getpid()) and not wait.pid_alive(None)
    # ovs-rdt status shows the policy state only while its writer runs.
    import json

    from ovs_rdt.agent import policy
    state_dir = str(tmp_path / 'run')
    os.makedirs(state_dir)
    with open(policy.state_path('/sys/fs/resctrl', state_dir), 'w') as fh:
        json.dump(_policy_state(42), fh)
    shown = policy.read_state('/sys/fs/resctrl', state_dir, proc)
    assert (shown is not None) is running


def _policy_state(pid: int) -> dict:
    from ovs_rdt.agent.policy_state import PolicyState
    return PolicyState(pid, 0.0, 'hp', 'be', 3, 8, 2, 10, 1.0).to_dict()


def test_the_policy_state_of_a_zombie_agent_is_not_shown(tmp_path) -> None:
    """A real zombie (exited, not reaped): its /proc entry is there, and
    the policy state it wrote is not shown (the policy checked that
    /proc/<pid> exists).
    """
    import json
    import subprocess
    import time

    from ovs_rdt.agent import policy
    child = subprocess.Popen(['true'])
    try:
        deadline = time.monotonic() + 30
        while procfs.state_of(child.pid) != 'Z':
            assert time.monotonic() < deadline, 'the child never exited'
            time.sleep(0.01)
        assert os.path.exists('/proc/%d' % child.pid)
        path = policy.state_path('/sys/fs/resctrl', str(tmp_path))
        with open(path, 'w') as fh:
            json.dump(_policy_state(child.pid), fh)
        assert policy.read_state('/sys/fs/resctrl', str(tmp_path)) is None
        with open(path, 'w') as fh:
            json.dump(_policy_state(os.getpid()), fh)
        assert policy.read_state('/sys/fs/resctrl', str(tmp_path)) is not None
    finally:
        child.wait()


def test_threads_alive_until_the_last_thread_exits(tmp_path) -> None:
    proc = str(tmp_path / 'proc')
    _process(proc, 50, 'Z', {50: 'Z', 51: 'S'})
    assert procfs.threads_alive(50, proc) and not procfs.alive(50, proc)
    _process(proc, 50, 'Z', {50: 'Z', 51: 'Z'})
    assert not procfs.threads_alive(50, proc)


def test_started_in_boot_ticks() -> None:
    # the selftest's guard tells a thread that was there before a check
    # from one born meanwhile under a reused TID
    mine = procfs.started(os.getpid())
    assert mine is not None and 0 < mine <= procfs.boot_ticks()
    with open('/proc/sys/kernel/pid_max') as fh:
        assert procfs.started(int(fh.read()) + 1) is None
