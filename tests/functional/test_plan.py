"""The allocator, the manager and the CLI against the mounted emulator."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest

from ovs_rdt.conf import Settings
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Request
from ovs_rdt.exceptions import InsufficientWays, OutOfClosids, ResctrlError
from ovs_rdt.manager import CacheManager
from ovs_rdt.resctrl import Resctrl
from tests import schemata as schemata_text

EXPLICIT = """
[resctrl]
root = {root}
sysfs_cpu_root = {sysfs}
[allocation]
pools = hp,noisy
system_min_ways = 2
[pool:hp]
l3_cbm = 7f0
isolated = true
[pool:noisy]
l3_cbm = 0x2
"""

COUNTS = """
[resctrl]
root = {root}
sysfs_cpu_root = {sysfs}
[allocation]
pools = hp,noisy
system_min_ways = 2
[pool:hp]
l3_ways = 7
isolated = true
[pool:noisy]
l3_ways = 1
"""


def read(emu, *parts):
    with open(emu.path(*parts)) as fh:
        return fh.read()


def l3(emu, group=''):
    return schemata_text.masks(read(emu, group, 'schemata'))


def cli(config, *args):
    return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                           '--config-file', config, *args],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def configure(emulated_resctrl, tmp_path):
    def write(template):
        path = tmp_path / 'ovs-rdt.conf'
        path.write_text(template.format(root=emulated_resctrl.root,
                                        sysfs=emulated_resctrl.sysfs))
        return str(path)
    return write


def test_table4_explicit_masks_land_and_status_shows_them(emulated_resctrl,
                                                          configure):
    emu = emulated_resctrl
    config = configure(EXPLICIT)
    result = cli(config, 'apply')
    assert result.returncode == 0, result.stderr
    assert l3(emu, 'ovsrdt-pool-hp') == {0: 0x7f0, 1: 0x7f0}
    assert l3(emu, 'ovsrdt-pool-noisy') == {0: 0x2, 1: 0x2}
    assert l3(emu) == {0: 0xc, 1: 0xc}
    assert read(emu, 'ovsrdt-pool-hp', 'mode').strip() == 'exclusive'
    status = cli(config, 'status')
    assert status.returncode == 0, status.stderr
    hp_row = [ln for ln in status.stdout.splitlines()
              if 'ovsrdt-pool-hp' in ln][0]
    assert '0x7f0' in hp_row and ' 7 ' in hp_row and '17920' in hp_row
    assert '## ## ## ## ## ## ##  .  .  .  .' in hp_row
    plan = json.loads(cli(config, 'status', '--json').stdout)
    rows = {r['group']: r for r in plan['domains'][0]['groups']}
    assert rows['/']['cbm'] == 'c' and rows['/']['kib'] == 5120
    assert rows['ovsrdt-pool-noisy']['cbm'] == '2'
    assert plan['domains'][0]['unused_ways'] == 1


def test_table4_by_way_counts_same_widths_no_overlap(emulated_resctrl,
                                                     configure):
    emu = emulated_resctrl
    config = configure(COUNTS)
    assert cli(config, 'apply').returncode == 0
    for dom in (0, 1):
        hp = CBM(l3(emu, 'ovsrdt-pool-hp')[dom], 11)
        noisy = CBM(l3(emu, 'ovsrdt-pool-noisy')[dom], 11)
        system = CBM(l3(emu)[dom], 11)
        assert (hp.count, noisy.count) == (7, 1)
        assert system.count >= 2
        assert not hp.overlaps(noisy) and not hp.overlaps(system)
        assert not noisy.overlaps(system)
    status = cli(config, 'status')
    assert 'ovsrdt-pool-noisy' in status.stdout


@pytest.fixture
def manager(emulated_resctrl):
    settings = Settings.defaults(
        resctrl={'root': emulated_resctrl.root,
                 'sysfs_cpu_root': emulated_resctrl.sysfs},
        allocation={'system_min_ways': 2})
    return CacheManager(Resctrl(emulated_resctrl.root,
                                emulated_resctrl.sysfs), settings)


def test_isolated_vm_groups_and_repacking_on_release(emulated_resctrl,
                                                     manager):
    emu = emulated_resctrl
    for name, ways in (('a', 2), ('b', 3), ('c', 2)):
        manager.allocate(Request('ovsrdt-vm-' + name,
                                 ways={0: ways, 1: ways}))
    assert l3(emu, 'ovsrdt-vm-a')[0] == 0x600
    assert l3(emu, 'ovsrdt-vm-b')[0] == 0x1c0
    assert l3(emu, 'ovsrdt-vm-c')[0] == 0x030
    assert l3(emu)[0] == 0x00f
    assert read(emu, 'ovsrdt-vm-b', 'mode').strip() == 'exclusive'
    manager.release('ovsrdt-vm-b')
    assert not os.path.exists(emu.path('ovsrdt-vm-b'))
    # c moved up next to a; the default group has one run again.
    assert l3(emu, 'ovsrdt-vm-c')[0] == 0x180
    assert l3(emu)[0] == 0x07f
    assert read(emu, 'ovsrdt-vm-c', 'mode').strip() == 'exclusive'


def test_system_minimum_and_error_leaves_nothing(emulated_resctrl, manager):
    manager.allocate(Request('ovsrdt-vm-a', ways={0: 8, 1: 8}))
    before = sorted(os.listdir(emulated_resctrl.root))
    with pytest.raises(InsufficientWays, match='ovsrdt-vm-b needs 2 ways on '
                       'cache domain 0, but only 1 of 11 are free'):
        manager.allocate(Request('ovsrdt-vm-b', ways={0: 2, 1: 2}))
    assert sorted(os.listdir(emulated_resctrl.root)) == before
    assert l3(emulated_resctrl)[0] == 0x7


def test_foreign_group_is_respected(emulated_resctrl, manager):
    emu = emulated_resctrl
    os.mkdir(emu.path('COS1'))
    with open(emu.path('COS1', 'schemata'), 'w') as fh:
        fh.write('L3:0=600;1=600\n')
    manager.allocate(Request('ovsrdt-vm-a', ways={0: 3, 1: 3}))
    assert l3(emu, 'ovsrdt-vm-a')[0] & 0x600 == 0
    assert l3(emu, 'COS1') == {0: 0x600, 1: 0x600}
    manager.release('ovsrdt-vm-a')
    assert os.path.isdir(emu.path('COS1'))


def test_closid_limit(emulated_resctrl, manager):
    # 16 CLOSIDs: the root + 15 groups.
    for i in range(15):
        manager.allocate(Request('ovsrdt-vm-%02d' % i, ways={}))
    with pytest.raises(OutOfClosids, match='ovsrdt-vm-15.*16 CLOSIDs'):
        manager.allocate(Request('ovsrdt-vm-15', ways={}))
    assert not os.path.exists(emulated_resctrl.path('ovsrdt-vm-15'))


def test_kernel_error_surfaces_with_last_cmd_status(emulated_resctrl,
                                                    manager):
    rc = manager.resctrl
    manager.allocate(Request('ovsrdt-vm-a', ways={0: 2, 1: 2}))
    with rc.lock():
        with pytest.raises(ResctrlError) as err:
            rc.write_schemata('ovsrdt-vm-a', 'L3:0=5\n')
    assert err.value.errno == errno.EINVAL
    assert err.value.status and 'ovsrdt-vm-a' not in err.value.status
    assert err.value.status in str(err.value)
    assert 'schemata' in str(err.value)
