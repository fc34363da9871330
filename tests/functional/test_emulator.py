"""Functional tests of the resctrl emulator, against the mounted filesystem.

Everything goes through plain file I/O (and ``sh -c 'echo ... > file'`` /
``bash -c`` for the shell's view) on a FUSE mount started by the
``emulated_resctrl`` / ``emulator_factory`` fixtures.
"""
from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from typing import Callable, Iterator, Union

import pytest

from ovs_rdt.emulator.profiles import PROFILES
from tests.functional.fixtures.emulator import EmulatorFixture, mounted


MiB = 1024 * 1024
WAY = 2621440                  # xeon-gold-6230: 28835840 / 11
Factory = Callable[..., EmulatorFixture]
ROOT_SCHEMATA = '    MB:0=100;1=100\n    L3:0=7ff;1=7ff\n'


def rd(emu: EmulatorFixture, rel: str) -> str:
    with open(emu.path(rel), encoding='latin-1') as fh:
        return fh.read()


def wr(emu: EmulatorFixture, rel: str, data: Union[str, bytes]) -> None:
    raw = data.encode('latin-1') if isinstance(data, str) else data
    with open(emu.path(rel), 'wb', buffering=0) as fh:
        fh.write(raw)


def status(emu: EmulatorFixture) -> str:
    return rd(emu, 'info/last_cmd_status')


def write_fails(emu: EmulatorFixture, rel: str, data: Union[str, bytes], err: int,
                text: Union[str, None]) -> None:
    """The write fails with ``err`` and sets last_cmd_status to ``text``."""
    with pytest.raises(OSError) as exc:
        wr(emu, rel, data)
    assert exc.value.errno == err, os.strerror(exc.value.errno)
    if text is not None:
        assert status(emu) == text


def shell_write(emu: EmulatorFixture, rel: str, text: str,
                shell: str = 'sh') -> subprocess.CompletedProcess[str]:
    return subprocess.run([shell, '-c', 'echo "$1" > "$2"', shell, text, emu.path(rel)],
                          capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture
def sleeper() -> Iterator[Callable[[], int]]:
    procs: list[subprocess.Popen[bytes]] = []

    def spawn() -> int:
        proc = subprocess.Popen(['sleep', '300'])
        procs.append(proc)
        return proc.pid

    yield spawn
    for proc in procs:
        proc.kill()
        proc.wait()


def tids(emu: EmulatorFixture, rel: str) -> set[int]:
    return {int(t) for t in rd(emu, rel).split()}


# -- the tree and the info files --------------------------------------------------
def _doms(n: int, value: str) -> str:
    return ';'.join('%d=%s' % (d, value) for d in range(n))


EXPECTED_INFO = {
    'xeon-gold-6230': {
        'L3/cbm_mask': '7ff\n', 'L3/num_closids': '16\n', 'L3/min_cbm_bits': '1\n',
        'L3/shareable_bits': '0\n', 'L3/sparse_masks': '0\n',
        'L3/bit_usage': '0=SSSSSSSSSSS;1=SSSSSSSSSSS\n',
        'MB/min_bandwidth': '10\n', 'MB/bandwidth_gran': '10\n', 'MB/delay_linear': '1\n',
        'MB/num_closids': '16\n', 'MB/thread_throttle_mode': 'max\n',
        'L3_MON/num_rmids': '176\n', 'L3_MON/max_threshold_occupancy': '163840\n',
        'schemata': ROOT_SCHEMATA,
        'size': '    MB:0=100;1=100\n    L3:0=28835840;1=28835840\n',
        'cpus_list': '0-39\n', 'cpus': 'ff,ffffffff\n',
    },
    'xeon-e7-8890-v4': {
        'L3/cbm_mask': 'fffff\n', 'L3/num_closids': '16\n', 'MB/num_closids': '16\n',
        'schemata': '    MB:0=100;1=100;2=100;3=100\n'
                    '    L3:0=fffff;1=fffff;2=fffff;3=fffff\n',
        'size': '    MB:0=100;1=100;2=100;3=100\n'
                '    L3:0=62914560;1=62914560;2=62914560;3=62914560\n',
        'cpus_list': '0-95\n', 'cpus': 'ffffffff,ffffffff,ffffffff\n',
    },
    'xeon-d-1540': {
        'L3/cbm_mask': 'fff\n', 'L3/num_closids': '16\n', 'L3_MON/num_rmids': '64\n',
        'schemata': '    L3:0=fff\n', 'size': '    L3:0=12582912\n',
        'cpus_list': '0-15\n', 'cpus': 'ffff\n',
    },
    # Xeon 6 6980P: 504 MB L3 per socket, 2 x 128 cores x 2 threads, SNC3
    # (monitoring per node: 256 RMIDs / 3; max_threshold_occupancy is
    # x86_cache_size / num_rmid rounded to CPUID's 64-byte scale, not to the
    # SNC one: resctrl_arch_round_mon_val())
    'xeon-6-granite-rapids-snc3': {
        'L3/cbm_mask': 'ffff\n', 'L3/num_closids': '16\n', 'L3/min_cbm_bits': '1\n',
        'L3/shareable_bits': '0\n', 'L3/sparse_masks': '0\n',
        'L3/bit_usage': '0=%s;1=%s\n' % ('S' * 16, 'S' * 16),
        'MB/min_bandwidth': '10\n', 'MB/bandwidth_gran': '10\n', 'MB/delay_linear': '1\n',
        'MB/num_closids': '16\n', 'MB/thread_throttle_mode': 'per-thread\n',
        'L3_MON/num_rmids': '85\n', 'L3_MON/max_threshold_occupancy': '6217408\n',
        'L3_MON/mbm_assign_mode': '[default]\n',
        'schemata': '    MB:0=100;1=100\n    L3:0=ffff;1=ffff\n',
        'size': '    MB:0=100;1=100\n    L3:0=528482304;1=528482304\n',
        'cpus_list': '0-511\n', 'cpus': ','.join(['ffffffff'] * 16) + '\n',
    },
    # EPYC 9654: 12 CCDs x 32 MB L3 per socket, 2 x 96 cores x 2 threads.  AMD
    # leaves x86_cache_size at the L2 (1 MB per core), so max_threshold_occupancy
    # is 1 MiB / 256 RMIDs.  MB and SMBA in 1/8 GB/s up to 2048, no
    # thread_throttle_mode, sparse and empty CBMs allowed.
    'epyc-9654': {
        'L3/cbm_mask': 'ffff\n', 'L3/num_closids': '16\n', 'L3/min_cbm_bits': '0\n',
        'L3/shareable_bits': '0\n', 'L3/sparse_masks': '1\n',
        'L3/bit_usage': _doms(24, 'S' * 16) + '\n',
        'MB/min_bandwidth': '0\n', 'MB/bandwidth_gran': '1\n', 'MB/delay_linear': '0\n',
        'MB/num_closids': '16\n', 'SMBA/min_bandwidth': '0\n',
        'SMBA/bandwidth_gran': '1\n', 'SMBA/delay_linear': '0\n', 'SMBA/num_closids': '16\n',
        'L3_MON/num_rmids': '256\n', 'L3_MON/max_threshold_occupancy': '4096\n',
        'L3_MON/mbm_assign_mode': '[default]\n',
        'schemata': '  SMBA:%s\n    MB:%s\n    L3:%s\n' % (
            _doms(24, '2048'), _doms(24, '2048'), _doms(24, 'ffff')),
        'size': '  SMBA:%s\n    MB:%s\n    L3:%s\n' % (
            _doms(24, '2048'), _doms(24, '2048'), _doms(24, '33554432')),
        'cpus_list': '0-383\n', 'cpus': ','.join(['ffffffff'] * 12) + '\n',
    },
    # EPYC 9575F: 8 CCDs x 32 MB L3 per socket, 2 x 64 cores x 2 threads,
    # io_alloc and 32 assignable counters per domain (the root holds two)
    'epyc-9575f': {
        'L3/cbm_mask': 'ffff\n', 'L3/num_closids': '16\n', 'L3/min_cbm_bits': '0\n',
        'L3/sparse_masks': '1\n', 'L3/io_alloc': 'disabled\n',
        'MB/min_bandwidth': '0\n', 'MB/bandwidth_gran': '1\n', 'MB/delay_linear': '0\n',
        'SMBA/num_closids': '16\n',
        'L3_MON/num_rmids': '256\n', 'L3_MON/max_threshold_occupancy': '4096\n',
        'L3_MON/mbm_assign_mode': '[mbm_event]\ndefault\n',
        'L3_MON/num_mbm_cntrs': _doms(16, '32') + '\n',
        'L3_MON/available_mbm_cntrs': _doms(16, '30') + '\n',
        'schemata': '  SMBA:%s\n    MB:%s\n    L3:%s\n' % (
            _doms(16, '2048'), _doms(16, '2048'), _doms(16, 'ffff')),
        'size': '  SMBA:%s\n    MB:%s\n    L3:%s\n' % (
            _doms(16, '2048'), _doms(16, '2048'), _doms(16, '33554432')),
        'cpus_list': '0-255\n', 'cpus': ','.join(['ffffffff'] * 8) + '\n',
    },
}
SOCKETS = {'xeon-gold-6230': 2, 'xeon-e7-8890-v4': 4, 'xeon-d-1540': 1,
           'xeon-6-granite-rapids-snc3': 2, 'epyc-9654': 2, 'epyc-9575f': 2}
L3_DOMAINS = dict(SOCKETS, **{'epyc-9654': 24, 'epyc-9575f': 16})   # EPYC: one per CCD
SNC_NODES = {'xeon-6-granite-rapids-snc3': 3}                         # per L3, else 1
LAST_CPU = {'xeon-gold-6230': 39, 'xeon-e7-8890-v4': 95, 'xeon-d-1540': 15,
            'xeon-6-granite-rapids-snc3': 511, 'epyc-9654': 383, 'epyc-9575f': 255}
EVENTS = ['llc_occupancy', 'mbm_local_bytes', 'mbm_total_bytes']


def test_every_profile_has_expected_info() -> None:
    assert set(EXPECTED_INFO) == set(SOCKETS) == set(LAST_CPU) == set(PROFILES)


@pytest.mark.parametrize('profile', sorted(EXPECTED_INFO))
def test_profile_info_files(emulator_factory: Factory, profile: str) -> None:
    emu = emulator_factory(profile)
    for rel, text in EXPECTED_INFO[profile].items():
        path = rel if rel in ('schemata', 'size', 'cpus', 'cpus_list') else 'info/' + rel
        assert rd(emu, path) == text, path
    assert rd(emu, 'info/L3_MON/mon_features') == (
        'llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n')
    assert rd(emu, 'info/last_cmd_status') == 'ok\n'
    schemata = EXPECTED_INFO[profile]['schemata']
    assert os.path.isdir(emu.path('info/MB')) == ('MB:' in schemata)
    assert os.path.isdir(emu.path('info/SMBA')) == ('SMBA:' in schemata)
    domains, snc = L3_DOMAINS[profile], SNC_NODES.get(profile, 1)
    assert sorted(os.listdir(emu.path('mon_data'))) == [
        'mon_L3_%02d' % d for d in range(domains)]
    for dom in (0, domains - 1):            # SNC: one mon_sub_L3_YY per node of the L3
        assert sorted(os.listdir(emu.path('mon_data/mon_L3_%02d' % dom))) == EVENTS + [
            'mon_sub_L3_%02d' % n for n in range(dom * snc, (dom + 1) * snc) if snc > 1]
    last = LAST_CPU[profile]
    with open(os.path.join(emu.sysfs, 'online')) as fh:
        assert fh.read() == '0-%d\n' % last
    cpu = os.path.join(emu.sysfs, 'cpu%d' % last)
    with open(os.path.join(cpu, 'cache', 'index3', 'id')) as fh:
        assert fh.read() == '%d\n' % (domains - 1)
    with open(os.path.join(cpu, 'cache', 'index3', 'level')) as fh:
        assert fh.read() == '3\n'
    with open(os.path.join(cpu, 'topology', 'physical_package_id')) as fh:
        assert fh.read() == '%d\n' % (SOCKETS[profile] - 1)


def test_sysfs_shared_cpu_list(emulated_resctrl: EmulatorFixture) -> None:
    base = os.path.join(emulated_resctrl.sysfs, 'cpu25', 'cache', 'index3')
    with open(os.path.join(base, 'shared_cpu_list')) as fh:
        assert fh.read() == '20-39\n'


def test_tree_and_modes(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    assert sorted(os.listdir(emu.root)) == [
        'cpus', 'cpus_list', 'info', 'mode', 'mon_data', 'mon_groups', 'schemata',
        'size', 'tasks']
    os.mkdir(emu.path('g'))
    assert sorted(os.listdir(emu.path('g'))) == [
        'cpus', 'cpus_list', 'mode', 'mon_data', 'mon_groups', 'schemata', 'size', 'tasks']
    os.mkdir(emu.path('g/mon_groups/m'))
    assert sorted(os.listdir(emu.path('g/mon_groups/m'))) == [
        'cpus', 'cpus_list', 'mon_data', 'tasks']
    assert sorted(os.listdir(emu.path('g/mon_groups/m/mon_data/mon_L3_01'))) == [
        'llc_occupancy', 'mbm_local_bytes', 'mbm_total_bytes']
    modes = {'schemata': 0o644, 'tasks': 0o644, 'cpus_list': 0o644, 'mode': 0o644,
             'size': 0o444, 'info/L3/cbm_mask': 0o444, 'info/last_cmd_status': 0o444,
             'info/L3_MON/max_threshold_occupancy': 0o644,
             'mon_data/mon_L3_00/llc_occupancy': 0o444}
    for rel, mode in modes.items():
        st = os.stat(emu.path(rel))
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == mode, rel
    assert stat.S_ISDIR(os.stat(emu.path('g')).st_mode)
    assert rd(emu, 'g/mode') == 'shareable\n'


def d_types(path: str) -> dict[str, int]:
    """name -> d_type, as readdir(3) gives them (no stat: what scandir sees)."""
    import ctypes

    class Dirent(ctypes.Structure):
        _fields_ = [('d_ino', ctypes.c_uint64), ('d_off', ctypes.c_int64),
                    ('d_reclen', ctypes.c_ushort), ('d_type', ctypes.c_ubyte),
                    ('d_name', ctypes.c_char * 256)]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.opendir.restype = ctypes.c_void_p
    libc.readdir.restype = ctypes.POINTER(Dirent)
    libc.readdir.argtypes = libc.closedir.argtypes = [ctypes.c_void_p]
    handle = libc.opendir(path.encode())
    assert handle, os.strerror(ctypes.get_errno())
    out = {}
    try:
        while True:
            entry = libc.readdir(handle)
            if not entry:
                return out
            out[entry.contents.d_name.decode()] = entry.contents.d_type
    finally:
        libc.closedir(handle)


def test_directory_entries_have_their_types(emulated_resctrl: EmulatorFixture) -> None:
    """kernfs gives each entry's type (kernfs_fop_readdir: dir_emit with
    dt_type): listing the groups needs no stat per entry.
    """
    emu = emulated_resctrl
    os.mkdir(emu.path('g'))
    DT_DIR, DT_REG = 4, 8
    types = d_types(emu.root)
    assert types['g'] == types['info'] == types['mon_groups'] == DT_DIR
    assert types['schemata'] == types['tasks'] == DT_REG
    assert d_types(emu.path('info'))['L3'] == DT_DIR
    assert d_types(emu.path('info/L3'))['cbm_mask'] == DT_REG


@pytest.mark.parametrize('rel', ['info/L3/cbm_mask', 'size', 'info/last_cmd_status',
                                 'mon_data/mon_L3_00/llc_occupancy'])
def test_read_only_files_refuse_writes(emulated_resctrl: EmulatorFixture, rel: str) -> None:
    write_fails(emulated_resctrl, rel, '1\n', errno.EACCES, None)
    assert shell_write(emulated_resctrl, rel, '1').returncode != 0


def test_refused_directory_operations(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    os.mkdir(emu.path('g'))
    cases: list[tuple[Callable[[], object], int]] = [
        (lambda: os.rmdir(emu.path('info')), errno.EPERM),
        (lambda: os.rmdir(emu.path('info/L3')), errno.EPERM),
        (lambda: os.rmdir(emu.path('mon_groups')), errno.EPERM),
        (lambda: os.rmdir(emu.path('g/mon_data')), errno.EPERM),
        (lambda: os.rmdir(emu.root), errno.EBUSY),
        (lambda: os.mkdir(emu.path('info/x')), errno.ENODEV),
        (lambda: os.mkdir(emu.path('g/x')), errno.EPERM),
        (lambda: os.mkdir(emu.path('mon_data/x')), errno.EPERM),
        (lambda: os.mkdir(emu.path('bad\nname')), errno.EINVAL),
        (lambda: os.mkdir(emu.path('g')), errno.EEXIST),
        (lambda: os.unlink(emu.path('g/tasks')), errno.EPERM),
        (lambda: open(emu.path('g/newfile'), 'w'), errno.EACCES),
        (lambda: os.rename(emu.path('g'), emu.path('h')), errno.EPERM),
    ]
    for action, err in cases:
        with pytest.raises(OSError) as exc:
            action()
        assert exc.value.errno == err, (action, exc.value)
    assert status(emu) == 'Source must be a MON group\n'


# -- schemata ----------------------------------------------------------------------
def test_schemata_partial_updates(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    os.mkdir(emu.path('g'))
    assert rd(emu, 'g/schemata') == ROOT_SCHEMATA
    wr(emu, 'g/schemata', 'L3:0=7f0\n')
    assert rd(emu, 'g/schemata') == '    MB:0=100;1=100\n    L3:0=7f0;1=7ff\n'
    assert status(emu) == 'ok\n'
    wr(emu, 'g/schemata', 'MB:1=55\n')
    assert rd(emu, 'g/schemata') == '    MB:0=100;1=60\n    L3:0=7f0;1=7ff\n'
    assert shell_write(emu, 'g/schemata', 'L3:0= 3f ;1=1').returncode == 0
    wr(emu, 'g/schemata', 'L3:0=0x3\nMB:0=91\n')
    assert rd(emu, 'g/schemata') == '    MB:0=100;1=60\n    L3:0=3;1=1\n'
    assert rd(emu, 'g/size') == '    MB:0=100;1=60\n    L3:0=5242880;1=2621440\n'
    assert rd(emu, 'schemata') == ROOT_SCHEMATA


INVALID_SCHEMATA = [
    ('L3:0=7f1', 'The mask 7f1 has non-consecutive 1-bits\n'),
    ('L3:0=800', 'Mask out of range\n'),
    ('L3:0=0', 'Mask out of range\n'),
    ('L3:0=xyz', 'Non-hex character in the mask xyz\n'),
    ('L2:0=1', "Unknown or unsupported resource name 'L2'\n"),
    ('L3', "Missing ':'\n"),
    ('L3:', "Missing 'L3' value\n"),
    ('L3: 0=1', "Missing '=' or non-numeric domain\n"),
    ('L3:0=1;0=3', 'Duplicate domain 0\n'),
    ('L3:2=1', 'ok\n'),                      # unknown domain: EINVAL, no message
    ('MB:0=5', 'MB value 5 out of range [10,100]\n'),
    ('MB:0=101', 'MB value 101 out of range [10,100]\n'),
    ('MB:0=ten', 'Invalid MB value ten\n'),
]


@pytest.mark.parametrize('line,text', INVALID_SCHEMATA)
def test_schemata_validation_python(emulated_resctrl: EmulatorFixture, line: str,
                                    text: str) -> None:
    emu = emulated_resctrl
    os.mkdir(emu.path('g'))
    write_fails(emu, 'g/schemata', line + '\n', errno.EINVAL, text)
    assert rd(emu, 'g/schemata') == ROOT_SCHEMATA


@pytest.mark.parametrize('line,text', INVALID_SCHEMATA[:4] + INVALID_SCHEMATA[-3:])
def test_schemata_validation_shell(emulated_resctrl: EmulatorFixture, line: str,
                                   text: str) -> None:
    emu = emulated_resctrl
    wr(emu, 'schemata', 'L3:0=7ff\n')
    proc = shell_write(emu, 'schemata', line)
    assert proc.returncode != 0
    assert status(emu) == text
    proc = shell_write(emu, 'schemata', line, shell='bash')
    assert proc.returncode != 0 and 'Invalid argument' in proc.stderr
    assert rd(emu, 'schemata') == ROOT_SCHEMATA


def test_schemata_needs_newline_and_is_atomic(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    write_fails(emu, 'schemata', 'L3:0=800\n', errno.EINVAL, 'Mask out of range\n')
    write_fails(emu, 'schemata', 'L3:0=7f0', errno.EINVAL, 'Mask out of range\n')
    write_fails(emu, 'schemata', 'L3:0=3\nL3:1=7f1\n', errno.EINVAL,
                'The mask 7f1 has non-consecutive 1-bits\n')
    assert rd(emu, 'schemata') == ROOT_SCHEMATA
    write_fails(emu, 'schemata', b'L3:0=1\n' * 700, errno.E2BIG, None)


def test_min_cbm_bits_and_sparse_masks(emulator_factory: Factory) -> None:
    emu = emulator_factory(extra_args=['--set', 'min_cbm_bits=2'])
    assert rd(emu, 'info/L3/min_cbm_bits') == '2\n'
    write_fails(emu, 'schemata', 'L3:0=4\n', errno.EINVAL, 'Need at least 2 bits in the mask\n')
    sparse = emulator_factory(extra_args=['--set', 'sparse_masks=1'])
    assert rd(sparse, 'info/L3/sparse_masks') == '1\n'
    wr(sparse, 'schemata', 'L3:0=505\n')
    assert rd(sparse, 'schemata').endswith('L3:0=505;1=7ff\n')


# -- modes and exclusivity -------------------------------------------------------
def test_exclusive_mode_rules(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    os.mkdir(emu.path('a'))
    wr(emu, 'a/schemata', 'L3:0=3;1=3\n')
    write_fails(emu, 'a/mode', 'exclusive\n', errno.EINVAL, 'Schemata overlaps\n')
    wr(emu, 'schemata', 'L3:0=7fc;1=7fc\n')
    wr(emu, 'a/mode', 'exclusive\n')
    assert rd(emu, 'a/mode') == 'exclusive\n'
    assert rd(emu, 'info/L3/bit_usage') == '0=SSSSSSSSSEE;1=SSSSSSSSSEE\n'
    write_fails(emu, 'schemata', 'L3:0=7ff\n', errno.EINVAL, 'Overlaps with exclusive group\n')
    os.mkdir(emu.path('b'))
    assert rd(emu, 'b/schemata').endswith('L3:0=7fc;1=7fc\n')   # skips the exclusive ways
    write_fails(emu, 'b/schemata', 'L3:1=1\n', errno.EINVAL, 'Overlaps with exclusive group\n')
    write_fails(emu, 'a/schemata', 'L3:0=7\n', errno.EINVAL, 'Overlaps with other group\n')
    write_fails(emu, 'a/mode', 'private\n', errno.EINVAL, 'Unknown or unsupported mode\n')
    write_fails(emu, 'a/mode', 'pseudo-locksetup\n', errno.EINVAL,
                'Pseudo-locking not supported\n')
    write_fails(emu, 'mode', 'pseudo-locksetup\n', errno.EINVAL,
                'Cannot pseudo-lock default group\n')
    write_fails(emu, 'a/mode', 'shareable', errno.EINVAL, None)   # no newline
    assert shell_write(emu, 'a/mode', 'shareable').returncode == 0
    wr(emu, 'b/schemata', 'L3:1=1\n')
    assert rd(emu, 'info/L3/bit_usage') == '0=SSSSSSSSSSS;1=SSSSSSSSSSS\n'


def test_initial_schemata_and_no_space(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    wr(emu, 'schemata', 'L3:0=700;1=700\n')
    os.mkdir(emu.path('a'))
    wr(emu, 'a/schemata', 'L3:0=f0;1=f0\n')
    wr(emu, 'a/mode', 'exclusive\n')
    os.mkdir(emu.path('b'))
    assert rd(emu, 'b/schemata') == '    MB:0=100;1=100\n    L3:0=f;1=f\n'
    os.rmdir(emu.path('b'))
    wr(emu, 'a/schemata', 'L3:0=ff;1=ff\n')
    wr(emu, 'mode', 'exclusive\n')
    with pytest.raises(OSError) as exc:
        os.mkdir(emu.path('c'))
    assert exc.value.errno == errno.ENOSPC
    assert status(emu) == 'No space on L3:0\n'
    assert not os.path.exists(emu.path('c'))


def test_out_of_closids(emulator_factory: Factory) -> None:
    emu = emulator_factory('xeon-d-1540')
    for i in range(15):
        os.mkdir(emu.path('g%d' % i))
    with pytest.raises(OSError) as exc:
        os.mkdir(emu.path('g15'))
    assert exc.value.errno == errno.ENOSPC
    assert status(emu) == 'Out of CLOSIDs\n'
    os.rmdir(emu.path('g3'))
    os.mkdir(emu.path('again'))
    assert rd(emu, 'again/schemata') == '    L3:0=fff\n'


def test_out_of_rmids(emulator_factory: Factory) -> None:
    emu = emulator_factory(extra_args=['--set', 'num_rmids=3'])
    os.mkdir(emu.path('g'))
    os.mkdir(emu.path('g/mon_groups/m1'))
    with pytest.raises(OSError) as exc:
        os.mkdir(emu.path('g/mon_groups/m2'))
    assert exc.value.errno == errno.ENOSPC
    assert status(emu) == 'Out of RMIDs\n'
    os.rmdir(emu.path('g/mon_groups/m1'))
    os.mkdir(emu.path('mon_groups/m2'))


# -- tasks ---------------------------------------------------------------------------
def test_tasks_move_semantics(emulated_resctrl: EmulatorFixture,
                              sleeper: Callable[[], int]) -> None:
    emu = emulated_resctrl
    pid, pid2 = sleeper(), sleeper()
    assert {pid, pid2} <= tids(emu, 'tasks')
    os.mkdir(emu.path('a'))
    os.mkdir(emu.path('b'))
    wr(emu, 'a/tasks', '%d\n' % pid)
    assert tids(emu, 'a/tasks') == {pid} and pid not in tids(emu, 'tasks')
    assert shell_write(emu, 'b/tasks', str(pid)).returncode == 0
    assert tids(emu, 'a/tasks') == set() and tids(emu, 'b/tasks') == {pid}
    wr(emu, 'a/tasks', '%d,%d\n' % (pid, pid2))
    assert tids(emu, 'a/tasks') == {pid, pid2} and tids(emu, 'b/tasks') == set()
    wr(emu, 'tasks', str(pid2))
    assert pid2 in tids(emu, 'tasks') and tids(emu, 'a/tasks') == {pid}
    os.rmdir(emu.path('a'))
    assert pid in tids(emu, 'tasks')


def test_tasks_errors(emulated_resctrl: EmulatorFixture, sleeper: Callable[[], int]) -> None:
    emu = emulated_resctrl
    os.mkdir(emu.path('a'))
    gone = subprocess.Popen(['true'])
    gone.wait()
    write_fails(emu, 'a/tasks', '%d\n' % gone.pid, errno.ESRCH,
                'No task %d\nError while processing task %d\n' % (gone.pid, gone.pid))
    proc = shell_write(emu, 'a/tasks', str(gone.pid), shell='bash')
    assert proc.returncode != 0 and 'No such process' in proc.stderr
    write_fails(emu, 'a/tasks', 'abc\n', errno.EINVAL, 'Task list parsing error pid abc\n')
    write_fails(emu, 'a/tasks', '-7\n', errno.EINVAL, 'Invalid pid -7\n')
    pid = sleeper()
    write_fails(emu, 'a/tasks', '%d,,\n' % pid, errno.EINVAL,
                'Task list parsing error pid \n')
    assert tids(emu, 'a/tasks') == {pid}                 # moved before the error


def test_tasks_pid0_and_exited(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    os.mkdir(emu.path('a'))
    proc = subprocess.run(['sh', '-c', 'echo 0 > "$1" && grep -qx $$ "$1" && echo $$',
                           'sh', emu.path('a/tasks')], capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) not in tids(emu, 'a/tasks')   # it exited since


def test_new_tasks_inherit_the_creator_group(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    os.mkdir(emu.path('a'))
    script = ('import os, sys, threading, time\n'
              'early = threading.Thread(target=time.sleep, args=(60,), daemon=True)\n'
              'early.start()\n'
              'with open(sys.argv[1], "w") as fh:\n'
              '    fh.write(str(os.getpid()))\n'
              'late = threading.Thread(target=time.sleep, args=(60,), daemon=True)\n'
              'late.start()\n'
              'child = os.fork()\n'
              'if child == 0:\n'
              '    time.sleep(60)\n'
              '    os._exit(0)\n'
              'print(early.native_id, late.native_id, child, flush=True)\n'
              'time.sleep(60)\n')
    proc = subprocess.Popen([sys.executable, '-c', script, emu.path('a/tasks')],
                            stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        assert proc.stdout is not None
        early, late, child = (int(x) for x in proc.stdout.readline().split())
        members = tids(emu, 'a/tasks')
        assert {proc.pid, late, child} <= members
        assert early not in members and early in tids(emu, 'tasks')
    finally:
        if child:
            os.kill(child, signal.SIGKILL)
        proc.kill()
        proc.wait()


def test_mon_group_tasks(emulated_resctrl: EmulatorFixture, sleeper: Callable[[], int]) -> None:
    emu = emulated_resctrl
    pid, pid2 = sleeper(), sleeper()
    os.mkdir(emu.path('a'))
    os.mkdir(emu.path('b'))
    os.mkdir(emu.path('a/mon_groups/m'))
    write_fails(emu, 'a/mon_groups/m/tasks', '%d\n' % pid, errno.EINVAL,
                "Can't move task to different control group\n"
                "Error while processing task %d\n" % pid)
    wr(emu, 'a/tasks', '%d,%d\n' % (pid, pid2))
    wr(emu, 'a/mon_groups/m/tasks', '%d\n' % pid)
    assert tids(emu, 'a/mon_groups/m/tasks') == {pid}
    assert tids(emu, 'a/tasks') == {pid, pid2}            # includes its mon groups
    os.rename(emu.path('a/mon_groups/m'), emu.path('b/mon_groups/m'))
    assert tids(emu, 'b/tasks') == {pid} and tids(emu, 'a/tasks') == {pid2}
    os.rmdir(emu.path('b/mon_groups/m'))
    assert tids(emu, 'b/tasks') == {pid}                  # back to the parent
    os.rmdir(emu.path('b'))
    assert pid in tids(emu, 'tasks')


# -- cpus ------------------------------------------------------------------------------
def test_cpus_ownership(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    os.mkdir(emu.path('a'))
    os.mkdir(emu.path('b'))
    wr(emu, 'a/cpus_list', '0-3\n')
    assert rd(emu, 'a/cpus') == '00,0000000f\n' and rd(emu, 'cpus_list') == '4-39\n'
    assert shell_write(emu, 'b/cpus', '30').returncode == 0          # hex: CPUs 4-5
    assert rd(emu, 'b/cpus_list') == '4-5\n'
    wr(emu, 'b/cpus_list', '2-5,38-39\n')                            # takes from a and root
    assert rd(emu, 'a/cpus_list') == '0-1\n' and rd(emu, 'cpus_list') == '6-37\n'
    wr(emu, 'a/cpus_list', '0\n')                                    # cpu 1 back to root
    assert rd(emu, 'cpus_list') == '1,6-37\n'
    os.rmdir(emu.path('b'))
    assert rd(emu, 'cpus_list') == '1-39\n'
    assert status(emu) == 'ok\n'


@pytest.mark.parametrize('rel,data,err,text', [
    ('cpus_list', '5-39', errno.EINVAL, "Can't drop CPUs from default group\n"),
    ('a/cpus_list', 'x', errno.EINVAL, 'Bad CPU list/mask\n'),
    ('a/cpus_list', '40', errno.ERANGE, 'Bad CPU list/mask\n'),
    ('a/cpus', '0x3', errno.EINVAL, 'Bad CPU list/mask\n'),
    ('a/cpus', '100,00000000', errno.EOVERFLOW, 'Bad CPU list/mask\n'),
])
def test_cpus_errors(emulated_resctrl: EmulatorFixture, rel: str, data: str, err: int,
                     text: str) -> None:
    emu = emulated_resctrl
    os.mkdir(emu.path('a'))
    write_fails(emu, rel, data + '\n', err, text)
    assert shell_write(emu, rel, data).returncode != 0
    assert rd(emu, 'cpus_list') == '0-39\n'


def test_cpus_offline_and_mon_groups(emulator_factory: Factory) -> None:
    emu = emulator_factory(extra_args=['--set', 'possible_cpus=48'])
    write_fails(emu, 'cpus_list', '0-44\n', errno.EINVAL, 'Can only assign online CPUs\n')
    assert rd(emu, 'cpus') == '00ff,ffffffff\n'
    os.mkdir(emu.path('a'))
    os.mkdir(emu.path('a/mon_groups/m'))
    wr(emu, 'a/cpus_list', '30-33\n')                 # CPUs this 2-core host lacks
    write_fails(emu, 'a/mon_groups/m/cpus_list', '29\n', errno.EINVAL,
                'Can only add CPUs to mongroup that belong to parent\n')
    wr(emu, 'a/mon_groups/m/cpus_list', '31\n')
    assert rd(emu, 'a/mon_groups/m/cpus_list') == '31\n'


# -- stale handles, flock, several mounts ----------------------------------------------
def test_removed_group_handle_gives_enodev(emulated_resctrl: EmulatorFixture) -> None:
    """kernfs_get_active() fails on a removed node: reads and writes of a
    file opened before give ENODEV; a directory of it opened before lists
    nothing (kernfs_fop_readdir() skips inactive nodes); a new open: ENOENT.
    """
    emu = emulated_resctrl
    os.mkdir(emu.path('a'))
    files = ('schemata', 'tasks', 'mode', 'cpus', 'cpus_list', 'size',
             'mon_data/mon_L3_00/llc_occupancy')
    fds = [os.open(emu.path('a/schemata'), os.O_WRONLY)] + [
        os.open(emu.path('a', rel), os.O_RDONLY) for rel in files]
    mon = os.open(emu.path('a/mon_data'), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rmdir(emu.path('a'))
        with pytest.raises(OSError) as exc:
            os.write(fds[0], b'L3:0=1\n')
        assert exc.value.errno == errno.ENODEV
        for rel, fd in zip(files, fds[1:]):
            with pytest.raises(OSError) as exc:
                os.read(fd, 4096)
            assert exc.value.errno == errno.ENODEV, rel
        assert os.listdir(mon) == []
        with pytest.raises(FileNotFoundError):
            os.open(emu.path('a/tasks'), os.O_RDONLY)
    finally:
        for fd in fds + [mon]:
            os.close(fd)


#: rdtgroup_mkdir() refuses only a name with a newline (EINVAL); kernfs
#: has no length limit of its own (FUSE's is 1024 bytes).
KERNEL_NAMES = ('qemu-5-vm-vcpus_0,2', 'with space', 'a@b+c', '-dash',
                '.hidden', 'tab\there', '\x01ctl', 'caf\u00e9-\u65e5\u672c',
                '"quote\'s', 'back\\slash', 'x' * 255, 'y' * 256)


def test_every_name_the_kernel_takes(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    for name in KERNEL_NAMES:
        os.mkdir(emu.path(name))
        with open(emu.path(name, 'schemata'), encoding='utf-8') as fh:
            assert 'L3:' in fh.read(), name
    assert set(KERNEL_NAMES) <= set(os.listdir(emu.root))
    with pytest.raises(OSError) as exc:
        os.mkdir(emu.path('new\nline'))
    assert exc.value.errno == errno.EINVAL
    for name in KERNEL_NAMES:
        os.rmdir(emu.path(name))


LOCKER = ('import fcntl, os, sys, time\n'
          'fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n'
          'print("waiting", flush=True)\n'
          'start = time.monotonic()\n'
          'fcntl.flock(fd, fcntl.LOCK_EX)\n'
          'print(time.monotonic() - start, flush=True)\n')


def test_flock_on_root_blocks_a_second_locker(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    fd = os.open(emu.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        other = os.open(emu.root, os.O_RDONLY | os.O_DIRECTORY)
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(other)
        proc = subprocess.Popen([sys.executable, '-c', LOCKER, emu.root],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline() == 'waiting\n'
        time.sleep(1.0)
        assert proc.poll() is None                       # still blocked
        fcntl.flock(fd, fcntl.LOCK_UN)
        out, _ = proc.communicate(timeout=30)
        assert float(out) >= 0.9
    finally:
        os.close(fd)


def test_flock_shared_locks_coexist(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    fds = [os.open(emu.root, os.O_RDONLY | os.O_DIRECTORY) for _ in range(2)]
    try:
        fcntl.flock(fds[0], fcntl.LOCK_SH)
        fcntl.flock(fds[1], fcntl.LOCK_SH | fcntl.LOCK_NB)
        with pytest.raises(BlockingIOError):
            other = os.open(emu.root, os.O_RDONLY | os.O_DIRECTORY)
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(other)
    finally:
        for fd in fds:
            os.close(fd)


def test_two_mounts_are_independent(emulator_factory: Factory) -> None:
    one, two = emulator_factory(), emulator_factory('xeon-e7-8890-v4')
    os.mkdir(one.path('only-here'))
    assert not os.path.exists(two.path('only-here'))
    wr(two, 'schemata', 'L3:3=f\n')
    assert rd(one, 'schemata') == ROOT_SCHEMATA

    errors: list[BaseException] = []

    def hammer(emu: EmulatorFixture) -> None:
        try:
            for _ in range(50):
                wr(emu, 'schemata', 'L3:0=7f0\n')
                wr(emu, 'schemata', 'L3:0=7ff\n')
        except BaseException as exc:        # noqa: B902 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(one,)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and status(one) == 'ok\n'


# -- monitoring --------------------------------------------------------------------------
def mon(emu: EmulatorFixture, group: str, dom: int, event: str) -> int:
    base = (group + '/') if group else ''
    return int(rd(emu, '%smon_data/mon_L3_%02d/%s' % (base, dom, event)))


def test_llc_occupancy_follows_ways(emulated_resctrl: EmulatorFixture,
                                    sleeper: Callable[[], int]) -> None:
    emu = emulated_resctrl
    pid = sleeper()
    emu.set_footprints({'default': 0, str(pid): 8 * MiB})
    wr(emu, 'schemata', 'L3:0=7f0;1=7f0\n')
    os.mkdir(emu.path('g'))
    wr(emu, 'g/schemata', 'L3:0=1;1=1\n')
    wr(emu, 'g/tasks', str(pid))
    assert mon(emu, 'g', 0, 'llc_occupancy') == WAY              # 4 MiB per socket, 1 way
    assert mon(emu, 'g', 1, 'llc_occupancy') == WAY
    wr(emu, 'g/schemata', 'L3:0=3\n')
    assert mon(emu, 'g', 0, 'llc_occupancy') == 4 * MiB          # now it fits
    assert mon(emu, 'g', 1, 'llc_occupancy') == WAY
    emu.set_footprints({'default': 0, str(pid): {'1': 3 * MiB}})
    assert mon(emu, 'g', 0, 'llc_occupancy') == 0
    assert mon(emu, 'g', 1, 'llc_occupancy') == WAY
    assert mon(emu, '', 0, 'llc_occupancy') == 0                 # nothing else has a footprint
    assert mon(emu, 'g', 0, 'llc_occupancy') % 64 == 0


def test_mbm_grows_with_misses_and_obeys_mba(emulated_resctrl: EmulatorFixture,
                                             sleeper: Callable[[], int]) -> None:
    emu = emulated_resctrl
    pids = [sleeper() for _ in range(4)]
    emu.set_footprints({'default': 0, str(pids[0]): 8 * MiB, str(pids[1]): 16 * MiB,
                        str(pids[2]): 1 << 40, str(pids[3]): 1 << 40})
    wr(emu, 'schemata', 'L3:0=7f0;1=7f0\n')
    for name, pid, mba, way in (('small', pids[0], 100, 1), ('big', pids[1], 100, 2),
                                ('cap10', pids[2], 10, 4), ('cap50', pids[3], 50, 8)):
        os.mkdir(emu.path(name))         # one way each, not shared: no contention
        wr(emu, name + '/schemata', 'L3:0=%x;1=%x\nMB:0=%d;1=%d\n' % (way, way, mba, mba))
        wr(emu, name + '/tasks', str(pid))
    names = ('small', 'big', 'cap10', 'cap50')
    first = {n: mon(emu, n, 0, 'mbm_total_bytes') for n in names}
    time.sleep(1.0)
    second = {n: mon(emu, n, 0, 'mbm_total_bytes') for n in names}
    grow = {n: second[n] - first[n] for n in names}
    assert all(g > 0 for g in grow.values()), grow
    assert 3.0 < grow['big'] / grow['small'] < 4.4            # (8-2.5)/(4-2.5) = 3.67
    assert 4.5 < grow['cap50'] / grow['cap10'] < 5.5          # MB 50% vs 10%
    local = mon(emu, 'cap10', 0, 'mbm_local_bytes')
    assert 0 < local < mon(emu, 'cap10', 0, 'mbm_total_bytes')
    assert mon(emu, 'small', 0, 'mbm_total_bytes') >= second['small']   # monotonic


def test_mon_group_monitoring(emulated_resctrl: EmulatorFixture,
                              sleeper: Callable[[], int]) -> None:
    emu = emulated_resctrl
    pid, pid2 = sleeper(), sleeper()
    emu.set_footprints({'default': 0, str(pid): 2 * WAY, str(pid2): 6 * WAY})
    wr(emu, 'schemata', 'L3:0=7f0;1=7f0\n')
    os.mkdir(emu.path('g'))
    wr(emu, 'g/schemata', 'L3:0=f;1=f\n')
    os.mkdir(emu.path('g/mon_groups/m'))
    wr(emu, 'g/tasks', '%d,%d' % (pid, pid2))
    wr(emu, 'g/mon_groups/m/tasks', str(pid2))
    assert mon(emu, 'g', 0, 'llc_occupancy') == 4 * WAY
    assert mon(emu, 'g/mon_groups/m', 0, 'llc_occupancy') == 3 * WAY
    total = mon(emu, 'g', 0, 'mbm_total_bytes')
    assert total >= mon(emu, 'g/mon_groups/m', 0, 'mbm_total_bytes')


def test_single_socket_local_equals_total(emulator_factory: Factory,
                                          sleeper: Callable[[], int]) -> None:
    emu = emulator_factory('xeon-d-1540')
    pid = sleeper()
    emu.set_footprints({'default': 0, str(pid): 64 * MiB})
    os.mkdir(emu.path('g'))
    wr(emu, 'g/tasks', str(pid))
    mon(emu, 'g', 0, 'mbm_total_bytes')
    time.sleep(0.3)
    wr(emu, 'g/schemata', 'L3:0=fff\n')      # an event: counters integrate up to here
    assert mon(emu, 'g', 0, 'llc_occupancy') == 12 * MiB
    total = mon(emu, 'g', 0, 'mbm_total_bytes')
    local = mon(emu, 'g', 0, 'mbm_local_bytes')
    assert total > 0 and abs(total - local) < total * 0.05


# -- the daemon ----------------------------------------------------------------------------
def test_daemon_reports_errors_in_one_line(tmp_path: 'os.PathLike[str]') -> None:
    proc = subprocess.run([sys.executable, '-m', 'ovs_rdt.emulator', '-d',
                           os.path.join(tmp_path, 'missing')],
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode != 0
    assert proc.stderr.startswith('python3 -m ovs_rdt.emulator: error: mountpoint ')
    assert proc.stderr.count('\n') == 1
    assert 'Traceback' not in proc.stderr


def test_sigterm_unmounts(emulated_resctrl: EmulatorFixture) -> None:
    emu = emulated_resctrl
    os.kill(emu.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while mounted(emu.root) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not mounted(emu.root)


def test_foreground_mode_ends_on_unmount(tmp_path: 'os.PathLike[str]') -> None:
    root = os.path.join(tmp_path, 'r')
    os.mkdir(root)
    proc = subprocess.Popen([sys.executable, '-m', 'ovs_rdt.emulator', root],
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not mounted(root) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mounted(root)
        with open(os.path.join(root, 'info', 'L3', 'cbm_mask')) as fh:
            assert fh.read() == '7ff\n'
        subprocess.run(['fusermount3', '-u', root], check=True)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
