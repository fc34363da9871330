"""Another tool's freshly made groups, and Intel's real ``pqos``, beside
ovs-rdt: a real libvirtd with the hook, ``ovs-rdt apply`` as an operator
runs it, and the resctrl emulator (xeon-gold-6230: 11 ways, 16 CLOSIDs,
2 cache domains).

Configuration (issue 27's): pool ``hp`` 7 isolated ways, pool ``noisy``
1 shared way, the default group keeps at least 2: ``apply`` makes
``hp 7f0`` (exclusive), ``noisy 8``, the default group ``7``.  A group
``mkdir`` makes then gets the kernel's default mask: every shareable way,
the default group's and noisy's, ``f``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Iterator

import pytest

from ovs_rdt.core.model import ROOT
from ovs_rdt.resctrl import Resctrl
from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.fixtures.libvirt import LibvirtTestbed
from tests.functional.fixtures.pqos import Pqos

HP, NOISY = 'ovsrdt-pool-hp', 'ovsrdt-pool-noisy'
CONFIG = ('[allocation]\nsystem_min_ways = 2\npools = hp,noisy\n'
          '[pool:hp]\nl3_ways = 7\nisolated = true\n'
          '[pool:noisy]\nl3_ways = 1\nisolated = false\n')
ONE_WAY = ('<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1"><rdt:l3 ways="1"/>'
           '</rdt:rdt>')


class Node:
    def __init__(self, tb: LibvirtTestbed, emu: EmulatorFixture) -> None:
        self.tb, self.emu = tb, emu
        self.rc = Resctrl(emu.root, emu.sysfs)
        self.configure(CONFIG)

    def configure(self, text: str) -> None:
        self.tb.configure_raw('[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n'
                              'lock_timeout = 60\n'
                              % (self.emu.root, self.emu.sysfs) + text)

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                               '--config-file', self.tb.config, *args],
                              capture_output=True, text=True, timeout=60,
                              check=False)

    def apply(self, *args: str) -> subprocess.CompletedProcess:
        res = self.cli('apply', *args)
        assert res.returncode == 0, res.stderr
        return res

    def state(self, prefix: str = '') -> dict[str, tuple]:
        """Every group (or those named ``prefix``...): masks, mode, tasks
        (not the default group's: the host's come and go), CPUs.
        """
        return {g.name: ({d: m.value for d, m in g.l3.items()}, g.mode,
                         () if g.is_root else tuple(sorted(
                             self.rc.tasks(g.name))), g.cpus)
                for g in self.rc.groups() if g.name.startswith(prefix)}

    def ours(self) -> dict[str, tuple]:
        out = self.state('ovsrdt-')
        out[ROOT] = self.state()[ROOT]
        return out

    def l3(self, group: str) -> dict[int, int]:
        return {d: m.value for d, m in self.rc.group(group).l3.items()}


@pytest.fixture
def node(libvirt_testbed: LibvirtTestbed) -> Iterator[Node]:
    # Below the shared mount base: the mount reaches libvirtd's namespace.
    emu = EmulatorFixture('xeon-gold-6230',
                          rootdir=libvirt_testbed.mount_base)
    emu.setUp()
    try:
        yield Node(libvirt_testbed, emu)
    finally:
        libvirt_testbed.remove_guests()
        emu.cleanUp()


@pytest.fixture
def pqos(node: Node, tmp_path) -> Pqos:
    return Pqos(node.emu.root, node.emu.sysfs, str(tmp_path))


def both(value: int) -> dict[int, int]:
    return {0: value, 1: value}


# -- a group another tool has just made -----------------------------------------
def test_reapply_after_a_bare_mkdir_changes_nothing(node: Node) -> None:
    node.apply()
    before = node.ours()
    os.mkdir(node.rc.path('COS1'))
    assert node.l3('COS1') == both(0xf)       # the kernel's default mask
    node.apply('--dry-run')
    assert 'nothing to change' in node.apply().stdout
    assert node.ours() == before
    assert node.l3('COS1') == both(0xf)
    # A VM now waits for that tool: the refusal names its group.
    guest = node.tb.define(ONE_WAY, vcpus=1, memory_mib=32)
    res = node.tb.start(guest, check=False)
    assert res.returncode != 0
    assert 'COS1 (f, the mask mkdir gave it: not written yet)' in res.stderr
    assert node.ours() == before
    os.rmdir(node.rc.path('COS1'))


def test_release_after_a_bare_mkdir_frees_the_vm(node: Node) -> None:
    node.apply()
    guest = node.tb.define(ONE_WAY, vcpus=1, memory_mib=32)
    node.tb.start(guest)
    assert node.l3(guest.group) == both(0x4)
    assert node.l3(ROOT) == both(0x3)
    os.mkdir(node.rc.path('handmade'))
    assert node.l3('handmade') == both(0x3)
    node.tb.destroy(guest)
    assert guest.group not in node.rc.group_names(), node.tb.hook_log()
    assert node.l3(ROOT) == both(0x7)         # its way is back
    assert node.l3('handmade') == both(0x3)
    assert node.apply().stdout.strip().endswith('(nothing to change)')
    os.rmdir(node.rc.path('handmade'))


def test_release_frees_the_vm_when_nothing_else_fits(node: Node) -> None:
    """Freeing never fails for want of room.  The files ask for more
    than fits (hp 9 ways), never applied: a VM stop keeps the pools as
    they are (only apply resizes them: issue 51), so its way goes back to
    the default group.  The files ask what this node cannot have at all
    (hp 12 of 11 ways): the VM's group is removed alone, every other group
    as it is.
    """
    node.apply()
    guest = node.tb.define(ONE_WAY, vcpus=1, memory_mib=32)
    node.tb.start(guest)
    before = node.ours()
    node.configure(CONFIG.replace('l3_ways = 7', 'l3_ways = 9'))
    node.tb.destroy(guest)
    assert guest.group not in node.rc.group_names(), node.tb.hook_log()
    del before[guest.group]
    after = node.ours()
    assert after.pop(ROOT)[0] == {0: 0x7, 1: 0x7}     # its way is back
    del before[ROOT]
    assert after == before                  # the pools as they were
    refused = node.cli('apply')
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert 'ovsrdt-pool-noisy needs 1 way on' in refused.stderr, \
        refused.stderr

    node.configure(CONFIG)
    node.tb.start(guest)
    before = node.ours()
    node.configure(CONFIG.replace('l3_ways = 7', 'l3_ways = 12'))
    node.tb.destroy(guest)
    assert guest.group not in node.rc.group_names(), node.tb.hook_log()
    del before[guest.group]
    assert node.ours() == before          # nothing else moved
    log = node.tb.hook_log()
    line = next(n for n, ln in enumerate(open(node.tb.config), 1)
                if ln.startswith('l3_ways = 12'))
    assert 'removing %s alone, every other group as it is: config file %s ' \
        'line %d: [pool:hp] l3_ways = 12 is more than the 11 ways' % (
            guest.group, node.tb.config, line) in log, log[-2000:]


# -- the real pqos ----------------------------------------------------------------
INIT_FAILS = ('ERROR: Failed to create resctrl group /sys/fs/resctrl/COS',
              'Error initializing PQoS library!')


def test_pqos_after_ovs_rdt(node: Node, pqos: Pqos) -> None:
    """pqos makes COS1..COS15 at every start and gives up at the first
    mkdir the kernel refuses (out of CLOSIDs): every command fails, and
    leaves the classes it made at the kernel's default mask.  ovs-rdt
    keeps everything of its own, re-applies, and frees a stopped VM's
    group among them.
    """
    node.apply()
    guest = node.tb.define(ONE_WAY, vcpus=1, memory_mib=32)
    node.tb.start(guest)
    before = node.ours()
    for args in (['-s'], ['-e', 'llc:1=0x3'], ['-a', 'llc:1=2'], ['-R'],
                 ['-m', 'all:0', '-t', '1'], ['-d']):
        res = pqos(*args)
        assert res.returncode == 1, (args, res.stdout, res.stderr)
        for text in INIT_FAILS:
            assert text in res.stdout + res.stderr, (args, res.stderr)
        assert node.ours() == before, args
    # 16 CLOSIDs: the default group, two pools, the VM and 12 classes
    leftovers = pqos.groups()
    assert leftovers == ['COS%d' % i for i in range(1, 13)]
    theirs = node.state('COS')
    assert all(v[:2] == (both(0x3), 'shareable') for v in theirs.values())
    assert node.apply('--dry-run').returncode == 0
    assert node.apply().stdout.strip().endswith('(nothing to change)')
    node.tb.destroy(guest)
    assert guest.group not in node.rc.group_names(), node.tb.hook_log()
    assert node.l3(ROOT) == both(0x7)
    assert node.state('COS') == theirs
    # What the operator does (README): remove what pqos left.
    pqos.remove_groups()
    node.apply()
    assert sorted(node.rc.group_names()) == sorted([ROOT, HP, NOISY])


def test_pqos_first(node: Node, pqos: Pqos) -> None:
    """pqos has every CLOSID: ovs-rdt is refused, naming pqos's classes,
    and changes nothing; pqos works as it does alone; once its classes
    are gone, ovs-rdt applies.
    """
    res = pqos('-s')
    assert res.returncode == 0, res.stderr
    assert pqos.groups() == ['COS%d' % i for i in range(1, 16)]
    assert res.stdout.count('L3CA COS15 => MASK 0x7ff') == 2
    assert pqos('-e', 'llc:1=0x00f').returncode == 0
    assert node.l3('COS1') == both(0xf)
    assert pqos('-a', 'llc:1=2').returncode == 0
    assert node.rc.group('COS1').cpus == frozenset({2})
    before = node.state()
    res = node.cli('apply')
    assert res.returncode == 1
    assert 'out of CLOSIDs' in res.stderr and 'COS15' in res.stderr, \
        res.stderr
    guest = node.tb.define(ONE_WAY, vcpus=1, memory_mib=32)
    res = node.tb.start(guest, check=False)
    assert res.returncode != 0 and 'out of CLOSIDs' in res.stderr
    assert node.tb.state(guest) == 'shut off'
    assert node.state() == before, 'something changed'
    # -R: every CPU to COS0, every class's schemata (COS0's too) to all
    # ways and the MB maximum, every task on the host to COS0.  pqos takes
    # the MB maximum from CPUID: on an AMD host 2048, which an Intel
    # platform's resctrl refuses ("Error on schemata write for resctrl
    # group 0"); the rest is still done.
    res = pqos('-R')
    out = res.stdout + res.stderr
    if res.returncode:
        assert 'Error on schemata write for resctrl group 0' in out, out
        assert node.l3('COS1') == both(0xf)
    else:
        assert node.l3('COS1') == both(0x7ff)
    assert node.rc.group('COS1').cpus == frozenset()
    pqos.remove_groups()
    node.apply()
    node.tb.start(guest)
    assert node.l3(guest.group) == both(0x4)
    node.tb.destroy(guest)
    assert sorted(node.rc.group_names()) == sorted([ROOT, HP, NOISY])


def test_a_class_pqos_wrote_keeps_its_way(node: Node, pqos: Pqos) -> None:
    """pqos writes one class for a latency-critical core (``-e
    llc:3=0x1``); the operator removes its other classes.  ovs-rdt's
    default group then leaves that way to it (its floor fits beside):
    the system no longer crowds onto the class's way.  Once the class is
    gone the way is the default group's again.
    """
    res = pqos('-e', 'llc:3=0x1')
    assert res.returncode == 0, res.stdout + res.stderr
    assert pqos.groups() == ['COS%d' % i for i in range(1, 16)]
    assert node.l3('COS3') == both(0x1)
    assert node.l3('COS1') == both(0x7ff)     # mkdir's, not written
    for name in pqos.groups():
        if name != 'COS3':
            os.rmdir(node.rc.path(name))
    node.apply()
    assert node.l3(ROOT) == both(0x6)
    assert node.l3(HP) == both(0x7f0)
    assert node.l3(NOISY) == both(0x8)
    assert node.l3('COS3') == both(0x1)
    assert node.apply().stdout.strip().endswith('(nothing to change)')
    assert node.l3(ROOT) == both(0x6)
    os.rmdir(node.rc.path('COS3'))
    node.apply()
    assert node.l3(ROOT) == both(0x7)
    assert sorted(node.rc.group_names()) == sorted([ROOT, HP, NOISY])
