"""libvirt's own <cachetune> beside ovs-rdt, through a real libvirtd.

The private libvirtd sees the emulator as its resctrl: a tmpfs over
/sys/fs inside its mount namespace (the cgroup mount bound back), the
emulator at /sys/fs/resctrl and the emulator's sysfs topology over
/sys/devices/system/cpu.  Nothing of the host's /sys changes.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid as uuidlib

import pytest

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.sandbox import emulator as launcher
from ovs_rdt.sandbox import libvirtd as private
from tests.functional.fixtures.libvirt import LibvirtTestbed, libvirt_missing
from tests import schemata as schemata_text

W = 11                                   # xeon-gold-6230: 11 ways, 2.5 MiB
WAY_KIB = 2560


def cachetune(domain: int) -> str:
    return ("<cputune><cachetune vcpus='0'><cache id='%d' level='3' "
            "type='both' size='%d' unit='KiB'/></cachetune></cputune>"
            % (domain, WAY_KIB))


def l3(text: str) -> dict[int, int]:
    return schemata_text.masks(text)


def read(*parts: str) -> str:
    with open(os.path.join(*parts), encoding='ascii') as fh:
        return fh.read()


@pytest.fixture
def bed():
    why = libvirt_missing()
    if why:
        pytest.fail('real libvirt/KVM unavailable: %s' % why, pytrace=False)
    run_id = os.environ.get('OVS_RDT_TEST_RUN_ID') or uuidlib.uuid4().hex[:6]
    work = tempfile.mkdtemp(prefix='ovsrdt-cachetune-%s-' % run_id,
                            dir='/dev/shm' if os.path.isdir('/dev/shm')
                            else None)
    os.chmod(work, 0o755)
    # below the private libvirtd's parent directory: it keeps only those
    # FUSE mounts (PrivateLibvirtd.script)
    emu = launcher.MountedEmulator(os.path.join(work, 'bed', 'emu'),
                                   'xeon-gold-6230')
    os.makedirs(emu.dir)
    testbed = None
    problems: list[str] = []
    try:
        emu.start()
        keep = os.path.join(work, 'cgroup-keep')
        os.makedirs(keep)
        testbed = LibvirtTestbed(os.path.join(work, 'bed'), run_id)
        testbed.libvirtd = private.PrivateLibvirtd(
            os.path.join(testbed.workdir, 'libvirt'), setup=[
                'mount --rbind /sys/fs/cgroup %s' % keep,
                'mount -t tmpfs -o mode=755 ovsrdt-sysfs /sys/fs',
                'mkdir /sys/fs/cgroup /sys/fs/resctrl',
                'mount --rbind %s /sys/fs/cgroup' % keep,
                'mount --bind %s /sys/fs/resctrl' % emu.root,
                'mount --bind %s /sys/devices/system/cpu' % emu.sysfs])
        testbed.hook = os.path.join(testbed.libvirtd.hooks_dir, '50-ovs-rdt')
        testbed.setup()
        testbed.configure_raw(
            '[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n'
            '[allocation]\nsystem_min_ways = 2\npools = hp\n'
            '[pool:hp]\nl3_ways = 4\nisolated = true\n'
            % (emu.root, emu.sysfs))
        yield testbed, emu
    finally:
        if testbed is not None:
            testbed.remove_guests()
            pid = testbed.libvirtd.pid()
            if pid is not None:
                # its namespace's binds of the emulator, so that the
                # emulator's unmount ends its FUSE connection
                subprocess.run(['nsenter', '-t', str(pid), '-m', 'umount',
                                '-l', '/sys/fs/resctrl',
                                '/sys/devices/system/cpu'],
                               capture_output=True, check=False)
            problems += testbed.cleanup()
        problems += emu.stop()
        shutil.rmtree(work, ignore_errors=True)
    assert not problems, problems


def apply(config: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                           '--config-file', config, 'apply'],
                          capture_output=True, text=True, timeout=120)


def libvirt_groups(root: str) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith('qemu-'))


def test_cachetune_guests_beside_apply(bed):
    testbed, emu = bed
    caps = testbed.virsh('capabilities').stdout
    assert "<bank id='0' level='3'" in caps and '<control ' in caps, caps
    # The operator left libvirt room (libvirt only takes ways that
    # neither the default group nor any group has).
    with open(os.path.join(emu.root, 'schemata'), 'w') as fh:
        fh.write('L3:0=01f;1=01f\n')
    first = testbed.define(vcpus=1, cputune=cachetune(0))
    testbed.start(first)
    [group_a] = libvirt_groups(emu.root)
    files = ('schemata', 'mode', 'cpus', 'tasks')
    before = {f: read(emu.root, group_a, f) for f in files}
    held_a = l3(before['schemata'])[0]
    assert CBM(held_a, W).count == 1
    assert l3(before['schemata'])[1] == 0x01f          # libvirt's copy

    config = testbed.config
    result = apply(config)
    assert result.returncode == 0, result.stderr
    root = l3(read(emu.root, 'schemata'))
    pool = l3(read(emu.root, 'ovsrdt-pool-hp', 'schemata'))
    assert CBM(pool[0], W).count == 4 and CBM(pool[1], W).count == 4
    for dom in (0, 1):
        assert not root[dom] & pool[dom]
    assert not root[0] & held_a and not pool[0] & held_a

    # another <cachetune> guest still finds a free way, on either domain
    second = testbed.define(vcpus=1, cputune=cachetune(0))
    res = testbed.start(second, check=False)
    assert res.returncode == 0, res.stderr
    third = testbed.define(vcpus=1, cputune=cachetune(1))
    res = testbed.start(third, check=False)
    assert res.returncode == 0, res.stderr
    groups = libvirt_groups(emu.root)
    assert len(groups) == 3
    held = {g: l3(read(emu.root, g, 'schemata')) for g in groups}
    held_b = held[[g for g in groups if g != group_a][0]]
    # apply again: it keeps off libvirt's ways and writes none of its files
    result = apply(config)
    assert result.returncode == 0, result.stderr
    root = l3(read(emu.root, 'schemata'))
    pool = l3(read(emu.root, 'ovsrdt-pool-hp', 'schemata'))
    for name, masks in held.items():
        for dom, mask in masks.items():
            if mask & root[dom]:
                continue                       # the copy of the default mask
            assert not mask & pool[dom], (name, dom)
            others = [m[dom] for n, m in held.items() if n != name]
            assert not any(mask & o for o in others), (name, dom)
    assert {f: read(emu.root, group_a, f) for f in files} == before
    assert held_b[0] != held_a

    for guest in (first, second, third):
        testbed.destroy(guest)
    assert libvirt_groups(emu.root) == []
    result = apply(config)
    assert result.returncode == 0, result.stderr


def cli(config: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                           '--config-file', config, *args],
                          capture_output=True, text=True, timeout=120)


def test_a_cachetune_named_by_its_vcpus_stops_nothing(bed, tmp_path):
    """libvirt 9.0 names the group of ``<cachetune vcpus='0,2'>``
    ``qemu-N-NAME-vcpus_0,2``: a name ovs-rdt never makes, read and counted
    like any other tool's (issue 47): ``status``, ``apply``, an annotated
    guest's start and stop and the agent all work beside it.
    """
    from tests.functional.fixtures.libvirt import wait_for
    from tests.functional.fixtures.ovs import AgentProcess

    testbed, emu = bed
    with open(os.path.join(emu.root, 'schemata'), 'w') as fh:
        fh.write('L3:0=01f;1=01f\n')
    odd = testbed.define(vcpus=3, cputune=(
        "<cputune><cachetune vcpus='0,2'><cache id='0' level='3' "
        "type='both' size='%d' unit='KiB'/></cachetune></cputune>"
        % WAY_KIB))
    testbed.start(odd)
    [group] = libvirt_groups(emu.root)
    assert group.endswith('-vcpus_0,2'), group
    held = l3(read(emu.root, group, 'schemata'))[0]

    config = testbed.config
    result = apply(config)
    assert result.returncode == 0, result.stderr
    status = cli(config, 'status')
    # 5: resctrl holds the configuration, but no agent runs (issue 51).
    assert status.returncode == 5, status.stdout + status.stderr
    assert group in status.stdout
    dedicated = testbed.define(
        '<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1"><rdt:l3 ways="1"/>'
        '</rdt:rdt>', vcpus=1, memory_mib=32)
    res = testbed.start(dedicated, check=False)
    assert res.returncode == 0, res.stderr
    mine = l3(read(emu.root, dedicated.group, 'schemata'))
    assert not mine[0] & held
    assert cli(config, 'status').returncode == 5
    with open(os.path.join(str(tmp_path), 'guest.xml'), 'w') as fh:
        fh.write(testbed.virsh('dumpxml', dedicated.name).stdout)
    check = cli(config, 'check-domain', os.path.join(str(tmp_path),
                                                     'guest.xml'))
    assert check.returncode == 0, check.stderr

    # The agent (no OvS here: its pools and its guests' reconciliation).
    agent = AgentProcess(config, os.path.join(str(tmp_path), 'agent.log'))
    agent.start()
    try:
        wait_for(lambda: 'ovsrdt- groups found' in agent.log()
                 or 'cannot apply' in agent.log(), timeout=60,
                 what='the agent applied its pools')
        assert 'cannot apply' not in agent.log(), agent.log()
        testbed.destroy(dedicated)
        assert not os.path.isdir(os.path.join(emu.root, dedicated.group)), \
            testbed.hook_log()[-2000:]
        assert 'not a valid resctrl group name' not in agent.log()
    finally:
        agent.stop()
    assert libvirt_groups(emu.root) == [group]
    assert l3(read(emu.root, group, 'schemata'))[0] == held
    testbed.destroy(odd)
    assert libvirt_groups(emu.root) == []
