"""Functional tests of the emulator's newer platforms and mount options (issue 14).

Through the mounted filesystem: CDP (``-o cdp``), ``-o mba_MBps``, the AMD
EPYC profiles (MBA in 1/8 GB/s, SMBA, many L3 domains), Sub-NUMA Clustering
(``mon_sub_L3_YY``, the NUMA sysfs tree), io_alloc and assignable MBM
counters.  Expected texts and errnos are the kernel's (fs/resctrl, 6.18+).
"""
from __future__ import annotations

import errno
import os
import subprocess
import sys
from typing import Callable

import pytest

from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.test_emulator import rd, sleeper, status, wr, write_fails

__all__ = ['sleeper']

MiB = 1024 * 1024
Factory = Callable[..., EmulatorFixture]
GNR = 'xeon-6-granite-rapids-snc3'


def cdp(factory: Factory, profile: str = 'xeon-gold-6230') -> EmulatorFixture:
    return factory(profile, ['-o', 'cdp'])


def sysfs(emu: EmulatorFixture, rel: str) -> str:
    with open(os.path.join(emu.sysfs, rel), encoding='ascii') as fh:
        return fh.read()


def doms(n: int, value: str) -> str:
    return ';'.join('%d=%s' % (d, value) for d in range(n))


def refused(profile: str, *args: str) -> str:
    """Start the emulator expecting a failed mount; its one-line error."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, '-m', 'ovs_rdt.emulator', '-d',
                               '--profile', profile, *args, tmp],
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 1, proc.stdout
        assert not os.path.ismount(tmp)
        return proc.stderr.strip()


# -- CDP -------------------------------------------------------------------------------
def test_cdp_tree_and_closids(emulator_factory: Factory) -> None:
    emu = cdp(emulator_factory)
    assert sorted(os.listdir(emu.path('info'))) == [
        'L3CODE', 'L3DATA', 'L3_MON', 'MB', 'last_cmd_status']
    assert rd(emu, 'info/L3CODE/num_closids') == '8\n'
    assert rd(emu, 'info/L3DATA/num_closids') == '8\n'
    assert rd(emu, 'info/MB/num_closids') == '16\n'
    assert rd(emu, 'schemata') == (
        '    MB:0=100;1=100\nL3DATA:0=7ff;1=7ff\nL3CODE:0=7ff;1=7ff\n')
    assert rd(emu, 'size') == ('    MB:0=100;1=100\nL3DATA:0=28835840;1=28835840\n'
                               'L3CODE:0=28835840;1=28835840\n')
    write_fails(emu, 'schemata', 'L3:0=1\n', errno.EINVAL,
                "Unknown or unsupported resource name 'L3'\n")
    for i in range(1, 8):                     # half the 16 CLOSIDs, root included
        os.mkdir(emu.path('g%d' % i))
    with pytest.raises(OSError) as exc:
        os.mkdir(emu.path('g8'))
    assert exc.value.errno == errno.ENOSPC and status(emu) == 'Out of CLOSIDs\n'


def test_cdp_code_and_data_overlap_rules(emulator_factory: Factory) -> None:
    emu = cdp(emulator_factory)
    wr(emu, 'schemata', 'L3CODE:0=7f0;1=7f0\nL3DATA:0=7f0;1=7f0\n')
    os.mkdir(emu.path('a'))
    wr(emu, 'a/schemata', 'L3CODE:0=3;1=3\nL3DATA:0=c;1=c\n')
    wr(emu, 'a/mode', 'exclusive\n')           # its own CODE and DATA are never compared
    assert rd(emu, 'a/mode') == 'exclusive\n'
    os.mkdir(emu.path('b'))
    # a new group starts off the exclusive ways of both types
    assert rd(emu, 'b/schemata').endswith('L3DATA:0=7f0;1=7f0\nL3CODE:0=7f0;1=7f0\n')
    # b's CODE against a's DATA: the peer type is checked too
    write_fails(emu, 'b/schemata', 'L3CODE:0=4\n', errno.EINVAL,
                'Overlaps with exclusive group\n')
    write_fails(emu, 'b/schemata', 'L3DATA:1=1\n', errno.EINVAL,
                'Overlaps with exclusive group\n')
    wr(emu, 'b/schemata', 'L3CODE:0=10\n')
    assert rd(emu, 'info/L3CODE/bit_usage') == '0=SSSSSSS00EE;1=SSSSSSS00EE\n'
    assert rd(emu, 'info/L3DATA/bit_usage') == '0=SSSSSSSEE00;1=SSSSSSSEE00\n'
    wr(emu, 'b/mode', 'shareable\n')
    with pytest.raises(OSError):
        wr(emu, 'b/mode', 'exclusive\n')
    assert status(emu) == 'Schemata overlaps\n'


def test_cdp_no_space_names_the_schema(emulator_factory: Factory) -> None:
    emu = cdp(emulator_factory, 'xeon-d-1540')
    wr(emu, 'schemata', 'L3CODE:0=800\nL3DATA:0=800\n')
    os.mkdir(emu.path('a'))
    assert rd(emu, 'a/schemata') == 'L3DATA:0=fff\nL3CODE:0=fff\n'   # unused + shared
    wr(emu, 'a/schemata', 'L3CODE:0=7ff\nL3DATA:0=7ff\n')
    wr(emu, 'a/mode', 'exclusive\n')
    wr(emu, 'mode', 'exclusive\n')
    with pytest.raises(OSError) as exc:
        os.mkdir(emu.path('b'))
    assert exc.value.errno == errno.ENOSPC
    assert status(emu) == 'No space on L3DATA:0\n'          # list order: DATA first


def test_mount_option_refusals() -> None:
    assert "Unknown parameter 'bogus'" in refused('xeon-gold-6230', '-o', 'bogus')
    assert 'cdpl2' in refused('xeon-gold-6230', '-o', 'cdpl2')
    msg = ('mba_MBps requires MBM (mbm_event mode not supported) and linear scale '
           'MBA at L3 scope')
    assert msg in refused('epyc-9654', '-o', 'mba_MBps')          # non-linear MBA
    assert msg in refused(GNR, '-o', 'mba_MBps')                  # SNC: MBM per node
    assert msg in refused('xeon-d-1540', '-o', 'mba_MBps')        # no MBA


# -- mba_MBps --------------------------------------------------------------------------
def test_mba_mbps_values_and_validation(emulator_factory: Factory) -> None:
    emu = emulator_factory('xeon-gold-6230', ['-o', 'mba_MBps'])
    assert rd(emu, 'schemata') == '    MB:0=4294967295;1=4294967295\n    L3:0=7ff;1=7ff\n'
    assert rd(emu, 'info/MB/min_bandwidth') == '10\n'
    assert rd(emu, 'info/MB/bandwidth_gran') == '10\n'
    os.mkdir(emu.path('g'))
    assert rd(emu, 'g/schemata').startswith('    MB:0=4294967295;1=4294967295\n')
    wr(emu, 'g/schemata', 'MB:0=800;1=5\n')            # MiB/s: no range, no rounding
    assert rd(emu, 'g/schemata').startswith('    MB:0=800;1=5\n')
    assert rd(emu, 'g/size').startswith('    MB:0=800;1=5\n')
    # (the refusals: the selftest's mb behaviour, in test_emulator_conformance.py)
    # parse_bw() writes mbps_val at once: no duplicate check, kept after a later error
    wr(emu, 'g/schemata', 'MB:0=10;0=20\n')
    write_fails(emu, 'g/schemata', 'MB:1=30\nL3:0=0\n', errno.EINVAL, 'Mask out of range\n')
    assert rd(emu, 'g/schemata').startswith('    MB:0=20;1=30\n')


def test_mba_mbps_event_file(emulator_factory: Factory) -> None:
    emu = emulator_factory('xeon-gold-6230', ['-o', 'mba_MBps'])
    assert rd(emu, 'mba_MBps_event') == 'mbm_local_bytes\n'
    os.mkdir(emu.path('g'))
    os.mkdir(emu.path('g/mon_groups/m'))
    assert 'mba_MBps_event' in os.listdir(emu.path('g'))
    assert 'mba_MBps_event' not in os.listdir(emu.path('g/mon_groups/m'))
    wr(emu, 'g/mba_MBps_event', 'mbm_total_bytes\n')     # the group's own, not the root's
    assert rd(emu, 'mba_MBps_event') == 'mbm_local_bytes\n'
    write_fails(emu, 'g/mba_MBps_event', b'mbm_local_bytes', errno.EINVAL, None)


def test_plain_mount_has_no_mba_mbps_event(emulated_resctrl: EmulatorFixture) -> None:
    assert 'mba_MBps_event' not in os.listdir(emulated_resctrl.root)
    assert 'mbm_assign_mode' not in os.listdir(emulated_resctrl.path('info/L3_MON'))


# -- AMD EPYC ------------------------------------------------------------------------------
def test_epyc_9654_layout(emulator_factory: Factory) -> None:
    emu = emulator_factory('epyc-9654')
    assert rd(emu, 'schemata') == ('  SMBA:%s\n    MB:%s\n    L3:%s\n' % (
        doms(24, '2048'), doms(24, '2048'), doms(24, 'ffff')))
    for res in ('MB', 'SMBA'):
        assert sorted(os.listdir(emu.path('info/' + res))) == [
            'bandwidth_gran', 'delay_linear', 'min_bandwidth', 'num_closids']
        assert [rd(emu, 'info/%s/%s' % (res, f)) for f in (
            'bandwidth_gran', 'delay_linear', 'min_bandwidth', 'num_closids')] == [
                '1\n', '0\n', '0\n', '16\n']
    assert rd(emu, 'info/L3/min_cbm_bits') == '0\n'
    assert rd(emu, 'info/L3/sparse_masks') == '1\n'
    assert sorted(os.listdir(emu.path('mon_data'))) == ['mon_L3_%02d' % d for d in range(24)]
    assert rd(emu, 'info/L3_MON/mbm_assign_mode') == '[default]\n'
    write_fails(emu, 'info/L3_MON/mbm_assign_mode', 'mbm_event\n', errno.EINVAL,
                'mbm_event mode is not supported\n')
    assert sysfs(emu, 'cpu8/cache/index3/id') == '1\n'
    assert sysfs(emu, 'cpu8/cache/index3/shared_cpu_list') == '8-15,200-207\n'
    assert sysfs(emu, 'cpu100/cache/index3/id') == '12\n'
    assert sysfs(emu, 'cpu100/topology/physical_package_id') == '1\n'
    assert sysfs(emu, 'node/node0/cpulist') == '0-95,192-287\n'
    assert os.readlink(os.path.join(emu.sysfs, 'cpu100', 'node1')) == '../node/node1'


def test_epyc_mb_units_and_sparse_masks(emulator_factory: Factory) -> None:
    emu = emulator_factory('epyc-9654')
    os.mkdir(emu.path('g'))
    wr(emu, 'g/schemata', 'MB:0=0;3=1000\nSMBA:5=7\nL3:0=f0f;1=0\n')
    text = rd(emu, 'g/schemata')
    assert 'MB:0=0;1=2048;2=2048;3=1000;' in text and 'SMBA:0=2048;' in text
    assert '  SMBA:0=2048;1=2048;2=2048;3=2048;4=2048;5=7;' in text
    assert '    L3:0=f0f;1=0;2=ffff' in text
    write_fails(emu, 'g/schemata', 'MB:0=2049\n', errno.EINVAL,
                'MB value 2049 out of range [0,2048]\n')
    write_fails(emu, 'g/schemata', 'SMBA:0=-1\n', errno.EINVAL, 'Invalid MB value -1\n')
    write_fails(emu, 'g/schemata', 'L3:24=f\n', errno.EINVAL, 'ok\n')


# -- Sub-NUMA Clustering ---------------------------------------------------------------------
def test_snc3_mon_data_and_sysfs(emulator_factory: Factory) -> None:
    emu = emulator_factory(GNR)
    assert rd(emu, 'schemata') == '    MB:0=100;1=100\n    L3:0=ffff;1=ffff\n'
    assert rd(emu, 'info/L3_MON/num_rmids') == '85\n'          # 256 / 3
    assert rd(emu, 'info/MB/thread_throttle_mode') == 'per-thread\n'
    assert sorted(os.listdir(emu.path('mon_data'))) == ['mon_L3_00', 'mon_L3_01']
    assert sorted(os.listdir(emu.path('mon_data/mon_L3_01'))) == [
        'llc_occupancy', 'mbm_local_bytes', 'mbm_total_bytes',
        'mon_sub_L3_03', 'mon_sub_L3_04', 'mon_sub_L3_05']
    assert sorted(os.listdir(emu.path('mon_data/mon_L3_00/mon_sub_L3_02'))) == [
        'llc_occupancy', 'mbm_local_bytes', 'mbm_total_bytes']
    assert sysfs(emu, 'node/online') == '0-5\n'
    assert sysfs(emu, 'node/node1/cpulist') == '43-85,299-341\n'
    assert sysfs(emu, 'node/node5/cpulist') == '214-255,470-511\n'
    assert sysfs(emu, 'cpu43/cache/index3/id') == '0\n'
    assert sysfs(emu, 'cpu43/cache/index3/shared_cpu_list') == '0-127,256-383\n'
    assert os.readlink(os.path.join(emu.sysfs, 'cpu300', 'node1')) == '../node/node1'


def test_snc3_occupancy_split_between_nodes(
        emulator_factory: Factory, sleeper: Callable[[], int]) -> None:
    emu = emulator_factory(GNR)
    pid = sleeper()
    os.mkdir(emu.path('g'))
    wr(emu, 'g/tasks', '%d\n' % pid)
    emu.set_footprints({'default': 0, str(pid): {'0': 30 * MiB}})
    subs = [int(rd(emu, 'g/mon_data/mon_L3_00/mon_sub_L3_%02d/llc_occupancy' % n))
            for n in range(3)]
    assert subs[0] == subs[1] == subs[2] > 0
    assert subs[0] % 21 == 0                        # mon_scale 64 / 3 nodes
    assert int(rd(emu, 'g/mon_data/mon_L3_00/llc_occupancy')) == sum(subs)
    assert 10 * MiB - 64 <= subs[0] <= 10 * MiB
    assert int(rd(emu, 'g/mon_data/mon_L3_01/mon_sub_L3_04/llc_occupancy')) == 0


# -- io_alloc ----------------------------------------------------------------------------------
def test_io_alloc(emulator_factory: Factory) -> None:
    emu = emulator_factory('epyc-9575f')
    assert rd(emu, 'info/L3/io_alloc') == 'disabled\n'
    with pytest.raises(OSError) as exc:
        rd(emu, 'info/L3/io_alloc_cbm')
    assert exc.value.errno == errno.EINVAL
    assert status(emu) == 'io_alloc is not enabled on L3\n'
    write_fails(emu, 'info/L3/io_alloc', 'maybe\n', errno.EINVAL, None)
    wr(emu, 'schemata', 'L3:0=ff\n')
    wr(emu, 'info/L3/io_alloc', '1\n')
    assert rd(emu, 'info/L3/io_alloc') == 'enabled\n'
    assert rd(emu, 'info/L3/io_alloc_cbm') == doms(16, 'ffff') + '\n'
    wr(emu, 'info/L3/io_alloc_cbm', '0=f000\n')
    assert rd(emu, 'info/L3/io_alloc_cbm') == '0=f000;' + doms(16, 'ffff')[7:] + '\n'
    assert rd(emu, 'info/L3/bit_usage').startswith('0=HHHH0000SSSSSSSS;1=XXXX')
    write_fails(emu, 'info/L3/io_alloc_cbm', '0=10000\n', errno.EINVAL,
                'Mask out of range\n')
    write_fails(emu, 'info/L3/io_alloc_cbm', b'0=f\n'[:-1], errno.EINVAL, None)
    os.mkdir(emu.path('g'))                    # off the I/O ways (used, not shareable)
    assert '    L3:0=fff;1=ffff;' in rd(emu, 'g/schemata')
    for i in range(2, 15):
        os.mkdir(emu.path('g%d' % i))
    with pytest.raises(OSError) as exc:
        os.mkdir(emu.path('g15'))              # CLOSID 15 is the I/O one
    assert exc.value.errno == errno.ENOSPC and status(emu) == 'Out of CLOSIDs\n'
    wr(emu, 'info/L3/io_alloc', '0\n')
    os.mkdir(emu.path('g15'))
    write_fails(emu, 'info/L3/io_alloc', 'on\n', errno.ENOSPC,
                'CLOSID (ctrl_hw_id) 15 for io_alloc is used by g15 group\n')


def test_io_alloc_with_cdp_keeps_code_and_data_in_sync(emulator_factory: Factory) -> None:
    emu = cdp(emulator_factory, 'epyc-9575f')
    wr(emu, 'info/L3DATA/io_alloc', 'y\n')
    assert rd(emu, 'info/L3CODE/io_alloc') == 'enabled\n'
    wr(emu, 'info/L3CODE/io_alloc_cbm', '2=3\n')
    assert rd(emu, 'info/L3DATA/io_alloc_cbm').startswith('0=ffff;1=ffff;2=3;')
    for i in range(1, 7):
        os.mkdir(emu.path('g%d' % i))
    with pytest.raises(OSError):
        os.mkdir(emu.path('g7'))               # 8 CLOSIDs, root and I/O (7) taken


# -- assignable MBM counters ----------------------------------------------------------------------
def test_assignable_counters(emulator_factory: Factory) -> None:
    emu = emulator_factory('epyc-9575f')
    mon = 'info/L3_MON/'
    assert rd(emu, mon + 'mbm_assign_mode') == '[mbm_event]\ndefault\n'
    assert rd(emu, mon + 'num_mbm_cntrs') == doms(16, '32') + '\n'
    assert rd(emu, mon + 'available_mbm_cntrs') == doms(16, '30') + '\n'   # root's two
    assert rd(emu, mon + 'mbm_assign_on_mkdir') == '1\n'
    assert rd(emu, mon + 'event_configs/mbm_local_bytes/event_filter') == (
        'local_reads,local_non_temporal_writes,local_reads_slow_memory\n')
    for i in range(1, 16):
        os.mkdir(emu.path('g%d' % i))
    assert rd(emu, mon + 'available_mbm_cntrs') == doms(16, '0') + '\n'
    os.mkdir(emu.path('g1/mon_groups/m'))
    assert status(emu).startswith('Failed to allocate counter for mbm_total_bytes in '
                                  'domain 0\nFailed to allocate counter for '
                                  'mbm_total_bytes in domain 1\n')
    m = 'g1/mon_groups/m/'
    assert rd(emu, m + 'mbm_L3_assignments') == (
        'mbm_total_bytes:%s\nmbm_local_bytes:%s\n' % (doms(16, '_'), doms(16, '_')))
    assert rd(emu, m + 'mon_data/mon_L3_00/mbm_total_bytes') == 'Unassigned\n'
    assert rd(emu, m + 'mon_data/mon_L3_00/llc_occupancy').strip().isdigit()
    assert rd(emu, 'g1/mon_data/mon_L3_00/mbm_total_bytes').strip().isdigit()
    write_fails(emu, m + 'mbm_L3_assignments', 'mbm_total_bytes:0=e\n', errno.ENOSPC,
                'Failed to allocate counter for mbm_total_bytes in domain 0\n'
                "Assign operation 'mbm_total_bytes:0=e' failed\n")
    wr(emu, 'g2/mbm_L3_assignments', 'mbm_total_bytes:*=_\n')
    assert rd(emu, mon + 'available_mbm_cntrs') == doms(16, '1') + '\n'
    wr(emu, m + 'mbm_L3_assignments', 'mbm_total_bytes:0=e\n')
    assert rd(emu, m + 'mbm_L3_assignments').startswith('mbm_total_bytes:0=e;1=_;')
    assert rd(emu, m + 'mon_data/mon_L3_00/mbm_total_bytes').strip().isdigit()
    assert rd(emu, m + 'mon_data/mon_L3_01/mbm_total_bytes') == 'Unassigned\n'
    assert rd(emu, 'g2/mon_data/mon_L3_05/mbm_total_bytes') == 'Unassigned\n'
    assert rd(emu, 'g2/mon_data/mon_L3_05/mbm_local_bytes').strip().isdigit()
    os.rmdir(emu.path('g3'))                   # frees its counters
    assert rd(emu, mon + 'available_mbm_cntrs').startswith('0=2;1=3;')


# (a group's mbm_L3_assignments refusals: the selftest's mbm-assign behaviour,
# run on this profile by test_emulator_conformance.py)


def test_assign_mode_switch(emulator_factory: Factory) -> None:
    emu = emulator_factory('epyc-9575f')
    mode = 'info/L3_MON/mbm_assign_mode'
    write_fails(emu, mode, 'foo\n', errno.EINVAL, 'Unsupported assign mode\n')
    write_fails(emu, mode, 'default', errno.EINVAL, 'mbm_assign_mode: Invalid input\n')
    wr(emu, mode, 'default\n')
    assert rd(emu, mode) == '[default]\nmbm_event\n'
    assert rd(emu, 'mon_data/mon_L3_00/mbm_total_bytes').strip().isdigit()
    for rel in ('mbm_L3_assignments', 'info/L3_MON/available_mbm_cntrs'):
        with pytest.raises(OSError) as exc:
            rd(emu, rel)
        assert exc.value.errno == errno.EINVAL
        assert status(emu) == 'mbm_event counter assignment mode is not enabled\n'
    write_fails(emu, 'mbm_L3_assignments', 'mbm_total_bytes:0=e\n', errno.EINVAL,
                'mbm_event mode is not enabled\n')
    wr(emu, mode, 'mbm_event\n')               # every counter was freed
    assert rd(emu, 'mon_data/mon_L3_00/mbm_total_bytes') == 'Unassigned\n'
    assert rd(emu, 'info/L3_MON/available_mbm_cntrs') == doms(16, '32') + '\n'


def test_new_kernel_files_on_an_old_profile(emulator_factory: Factory) -> None:
    emu = emulator_factory('xeon-gold-6230', ['--set', 'kernel=6.18'])
    assert rd(emu, 'info/L3_MON/mbm_assign_mode') == '[default]\n'
    wr(emu, 'info/L3_MON/mbm_assign_mode', 'default\n')
    assert 'mbm_L3_assignments' not in os.listdir(emu.root)
