"""The allocator, the manager and the CLI against the mounted emulator."""
from __future__ import annotations

import errno
import json
import logging
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
    assert status.returncode == 5, status.stderr     # (no agent runs here)
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


def test_isolated_vm_groups_stay_where_they_are(emulated_resctrl, manager,
                                                caplog):
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
    # c keeps its ways (and its warm cache); b's stay free where they are.
    assert l3(emu, 'ovsrdt-vm-c')[0] == 0x030
    assert l3(emu)[0] == 0x00f
    # 5 ways are free (3 + 4 - the floor of 2), 3 in a run: a 4-way VM
    # fits once one group moves, and the plan says which and for whom.
    caplog.set_level(logging.INFO, logger='ovs_rdt.manager')
    result = manager.allocate(Request('ovsrdt-vm-d', ways={0: 4, 1: 4}))
    moved = {m.group for m in result.moves}
    assert len(moved) == 1, result.moves
    assert l3(emu, 'ovsrdt-vm-d')[0] == result.l3['ovsrdt-vm-d'][0].value
    assert bin(l3(emu, 'ovsrdt-vm-d')[0]).count('1') == 4
    for name in ('ovsrdt-vm-a', 'ovsrdt-vm-c'):
        assert read(emu, name, 'mode').strip() == 'exclusive'
        if name not in moved:
            assert l3(emu, name)[0] == {'ovsrdt-vm-a': 0x600,
                                        'ovsrdt-vm-c': 0x030}[name]
    assert 'moves %s on cache domain 0 from ' % moved.pop() in caplog.text
    assert 'to make room for ovsrdt-vm-d' in caplog.text


POOLS = """[resctrl]
root = {root}
sysfs_cpu_root = {sysfs}
[allocation]
system_min_ways = 4
pools = %s
[pool:a]
l3_ways = 2
[pool:b]
l3_ways = 2
[pool:c]
l3_ways = 1
[pool:d]
l3_ways = 4
"""


def test_apply_dry_run_names_each_move(emulated_resctrl, configure):
    """Pools a, b, c from the top, the default group keeps 4 ways; b goes
    and d (4 ways) comes: 4 ways are free (b's 2, 2 beside the floor), in
    no run of 4.  c or a could move to make one: c, the fewer ways; the dry
    run says from where, to where and for whom, and nothing is written.
    """
    emu = emulated_resctrl
    result = cli(configure(POOLS % 'a,b,c'), 'apply')
    assert result.returncode == 0, result.stderr
    assert [l3(emu, 'ovsrdt-pool-' + p)[0] for p in 'abc'] == \
        [0x600, 0x180, 0x040]
    config = configure(POOLS % 'a,c,d')
    dry = cli(config, 'apply', '--dry-run')
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    at = lines.index('schemata ovsrdt-pool-c L3:0=100;1=100')
    assert lines[at + 2:at + 4] == [
        '    moves ovsrdt-pool-c on cache domain %d from 40 to 100 to make '
        'room for ovsrdt-pool-d' % d for d in (0, 1)], dry.stdout
    assert l3(emu, 'ovsrdt-pool-c')[0] == 0x040          # nothing written
    done = cli(config, 'apply')
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        'moves ovsrdt-pool-c on cache domain 0 from 40 to 100 to make room '
        'for ovsrdt-pool-d')
    assert l3(emu, 'ovsrdt-pool-a')[0] == 0x600           # never moved
    assert l3(emu, 'ovsrdt-pool-c')[0] == 0x100
    assert l3(emu, 'ovsrdt-pool-d')[0] == 0x0f0
    assert l3(emu)[0] == 0x00f
    assert cli(config, 'apply', '--dry-run').stdout == (
        'Dry run: nothing to change: %s holds what the configuration asks\n'
        % emu.root)


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
