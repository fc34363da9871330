"""``ovs-rdt demo --keep``: seed 000 Table 4 on real parts, then teardown."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

WORKDIR = '/run/ovs-rdt-demo-test'
HOOK = '/etc/libvirt/hooks/qemu.d/50-ovs-rdt'

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which('libvirtd')
    or not shutil.which('ovs-vswitchd') or not os.path.exists('/dev/fuse'),
    reason='needs root, libvirtd, ovs-vswitchd and /dev/fuse')


def demo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main', 'demo',
                           '--workdir', WORKDIR, '--top-seconds', '1', *args],
                          capture_output=True, text=True, timeout=300)


def read(*parts: str) -> str:
    with open(os.path.join(WORKDIR, 'resctrl', *parts)) as fh:
        return fh.read()


def l3(group: str) -> str:
    return [ln.strip() for ln in read(group, 'schemata').splitlines()
            if ln.strip().startswith('L3:')][0]


def qemu_threads(name: str) -> tuple[set[int], set[int]]:
    with open('/run/libvirt/qemu/%s.pid' % name) as fh:
        pid = int(fh.read())
    tids = set()
    vcpus = set()
    for tid in os.listdir('/proc/%d/task' % pid):
        with open('/proc/%d/task/%s/comm' % (pid, tid)) as fh:
            comm = fh.read().strip()
        tids.add(int(tid))
        if comm.startswith('CPU ') and comm.endswith('/KVM'):
            vcpus.add(int(tid))
    return tids, vcpus


def vswitchd_threads() -> tuple[set[int], set[int]]:
    with open(os.path.join(WORKDIR, 'ovs', 'ovs-vswitchd.pid')) as fh:
        pid = int(fh.read())
    pmds, others = set(), set()
    for tid in os.listdir('/proc/%d/task' % pid):
        with open('/proc/%d/task/%s/comm' % (pid, tid)) as fh:
            comm = fh.read().strip()
        (pmds if comm.startswith('pmd-c') else others).add(int(tid))
    return pmds, others


def daemons() -> set[str]:
    """Live (not zombie: PID 1 here may not reap) daemons of interest."""
    out = subprocess.run(['ps', '-eo', 'stat=,comm='], capture_output=True,
                         text=True).stdout.splitlines()
    return {line.split()[1] for line in out if len(line.split()) == 2
            and not line.split()[0].startswith('Z')
            and line.split()[1] in ('ovs-vswitchd', 'ovsdb-server',
                                    'libvirtd', 'virtlogd')}


def test_demo_reproduces_table4_and_leaves_nothing_behind():
    before_daemons = daemons()
    assert not os.path.exists(HOOK)
    result = demo('--keep')
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        out = result.stdout
        assert 'ovsrdt-pool-hp' in out and 'Seed 000 Table 4' in out
        # The plan, read from the emulator's own files.
        assert l3('ovsrdt-pool-hp') == 'L3:0=7f0;1=7f0'
        assert l3('ovsrdt-pool-noisy') == 'L3:0=2;1=2'
        assert l3('') == 'L3:0=c;1=c'
        assert read('ovsrdt-pool-hp', 'mode').strip() == 'exclusive'
        dedicated = [g for g in os.listdir(os.path.join(WORKDIR, 'resctrl'))
                     if g.startswith('ovsrdt-vm-')]
        assert len(dedicated) == 1
        assert l3(dedicated[0]) == 'L3:0=1;1=1'
        hp = {int(t) for t in read('ovsrdt-pool-hp', 'tasks').split()}
        noisy = {int(t) for t in read('ovsrdt-pool-noisy', 'tasks').split()}
        # PMD threads, ovs-vswitchd and the VM under test share one CLOS.
        pmds, others = vswitchd_threads()
        assert len(pmds) == 2 and pmds <= hp and others <= hp
        sut, sut_vcpus = qemu_threads('ovsrdt-demo-sut')
        assert len(sut_vcpus) == 2 and sut_vcpus <= hp
        for name in ('ovsrdt-demo-noisy1', 'ovsrdt-demo-noisy2'):
            tids, vcpus = qemu_threads(name)
            assert vcpus and vcpus <= noisy and not tids & hp
        _, ded_vcpus = qemu_threads('ovsrdt-demo-dedicated')
        ded = {int(t) for t in read(dedicated[0], 'tasks').split()}
        assert ded_vcpus <= ded and not ded & (hp | noisy)
    finally:
        down = demo('--teardown')
    assert down.returncode == 0, down.stdout + down.stderr
    assert not os.path.exists(WORKDIR)
    assert not os.path.exists(HOOK)
    with open('/proc/self/mounts') as fh:
        assert WORKDIR not in fh.read()
    virsh = subprocess.run(['virsh', 'list', '--all', '--name'],
                           capture_output=True, text=True)
    assert 'ovsrdt-demo' not in virsh.stdout
    assert daemons() == before_daemons


def test_ctrl_c_mid_demo_tears_everything_down():
    before_daemons = daemons()
    proc = subprocess.Popen([sys.executable, '-m', 'ovs_rdt.cmd.main', 'demo',
                             '--workdir', WORKDIR], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith('[7/9]'):   # guests being defined and started
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    out = ''.join(seen) + rest
    assert proc.returncode == 130, out
    assert 'interrupted: tearing down' in out and 'Torn down' in out
    assert not os.path.exists(WORKDIR)
    assert not os.path.exists(HOOK)
    virsh = subprocess.run(['virsh', 'list', '--all', '--name'],
                           capture_output=True, text=True)
    assert 'ovsrdt-demo' not in virsh.stdout
    assert daemons() == before_daemons


def test_missing_prerequisite_is_one_line(monkeypatch):
    from ovs_rdt import demo as demo_mod
    monkeypatch.setattr(demo_mod.os, 'access', lambda path, mode: False)
    problems = demo_mod.missing_prerequisites(tcg=False)
    assert any('/dev/kvm' in p and '--tcg' in p for p in problems)
    assert not any('/dev/kvm' in p
                   for p in demo_mod.missing_prerequisites(tcg=True))
