"""Kernel-behaviour checks of the resctrl emulator, run on every profile.

Issue 14: every profile must pass the same kernel-behaviour tests.  Each
test mounts one profile and takes what it needs (CBM width, domain ids,
``min_cbm_bits``, sparse masks, CLOSIDs, MB range) from that mount's own
``info/`` files and root ``schemata``, so nothing here is per profile.  The
expected errnos and ``info/last_cmd_status`` texts are the kernel's
(``fs/resctrl/rdtgroup.c``, ``fs/resctrl/ctrlmondata.c``, ``kernfs``).
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Callable

import pytest

from ovs_rdt.emulator.profiles import PROFILES
from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.test_emulator import rd, sleeper, status, tids, wr, write_fails
from tests import schemata as schemata_text

__all__ = ['sleeper']

Factory = Callable[..., EmulatorFixture]
Schemata = dict[str, dict[int, str]]
GROUP_FILES = ['cpus', 'cpus_list', 'mode', 'mon_data', 'mon_groups', 'schemata',
               'size', 'tasks']
MON_GROUP_FILES = ['cpus', 'cpus_list', 'mon_data', 'tasks']


@pytest.fixture(params=sorted(PROFILES))
def emu(request: pytest.FixtureRequest, emulator_factory: Factory) -> EmulatorFixture:
    return emulator_factory(request.param)


def parse(text: str) -> Schemata:
    """``schemata``/``size`` text -> {resource: {domain id: value}}."""
    return schemata_text.lines(text)


def line(res: str, values: dict[int, str]) -> str:
    return '%s:%s\n' % (res, ';'.join('%d=%s' % kv for kv in values.items()))


class Geometry:
    """What a mount says about itself."""

    def __init__(self, emu: EmulatorFixture) -> None:
        self.root = parse(rd(emu, 'schemata'))
        self.info = sorted(os.listdir(emu.path('info')))
        self.ids = sorted(self.root['L3'])
        self.d0, self.dl = self.ids[0], self.ids[-1]
        self.full = int(rd(emu, 'info/L3/cbm_mask'), 16)
        self.cbm_len = self.full.bit_length()
        self.min_bits = int(rd(emu, 'info/L3/min_cbm_bits'))
        self.sparse = rd(emu, 'info/L3/sparse_masks') == '1\n'
        self.num_closids = min(int(rd(emu, 'info/%s/num_closids' % r))
                               for r in self.info
                               if os.path.exists(emu.path('info', r, 'num_closids')))
        self.bw = {r: (int(rd(emu, 'info/%s/min_bandwidth' % r)),
                       int(rd(emu, 'info/%s/bandwidth_gran' % r)),
                       int(self.root[r][self.d0]))         # the default is the maximum
                   for r in self.root if r != 'L3'}
        self.assignable = os.path.exists(emu.path('info/L3_MON/num_mbm_cntrs'))
        self.events = [e for e in rd(emu, 'info/L3_MON/mon_features').split()
                       if not e.endswith('_config')]

    def l3(self, mask: int) -> str:
        return line('L3', {d: '%x' % mask for d in self.ids})


# -- the tree -------------------------------------------------------------------------------
def check_mon_data(emu: EmulatorFixture, rel: str, geo: Geometry) -> None:
    """mon_L3_XX per L3 id with the events; under SNC mon_sub_L3_YY, even split."""
    assert sorted(os.listdir(emu.path(rel))) == ['mon_L3_%02d' % d for d in geo.ids]
    subs: list[list[str]] = []
    for dom in geo.ids:
        names = sorted(os.listdir(emu.path(rel, 'mon_L3_%02d' % dom)))
        assert names[:len(geo.events)] == sorted(geo.events), (dom, names)
        subs.append(names[len(geo.events):])
        for sub in subs[-1]:
            assert sorted(os.listdir(emu.path(rel, 'mon_L3_%02d' % dom, sub))) == sorted(
                geo.events)
    flat = [s for per in subs for s in per]
    assert flat == ['mon_sub_L3_%02d' % n for n in range(len(flat))]
    assert len({len(per) for per in subs}) == 1 and len(subs[0]) != 1


def test_tree(emu: EmulatorFixture) -> None:
    geo = Geometry(emu)
    extra = ['mbm_L3_assignments'] if geo.assignable else []
    assert sorted(os.listdir(emu.root)) == sorted(GROUP_FILES + ['info'] + extra)
    # every allocation resource under info/ is a schemata line, and back
    assert 'last_cmd_status' in geo.info and 'L3_MON' in geo.info
    assert sorted(geo.info) == sorted(list(geo.root) + ['L3_MON', 'last_cmd_status'])
    assert sorted(parse(rd(emu, 'size'))) == sorted(geo.root)
    assert set(os.listdir(emu.path('info/L3'))) >= {
        'bit_usage', 'cbm_mask', 'min_cbm_bits', 'num_closids', 'shareable_bits',
        'sparse_masks'}
    for res in geo.bw:
        assert set(os.listdir(emu.path('info', res))) >= {
            'bandwidth_gran', 'delay_linear', 'min_bandwidth', 'num_closids'}
    assert set(os.listdir(emu.path('info/L3_MON'))) >= {
        'max_threshold_occupancy', 'mon_features', 'num_rmids'}
    os.mkdir(emu.path('g'))
    os.mkdir(emu.path('g/mon_groups/m'))
    assert sorted(os.listdir(emu.path('g'))) == sorted(GROUP_FILES + extra)
    assert sorted(os.listdir(emu.path('g/mon_groups/m'))) == sorted(MON_GROUP_FILES + extra)
    for rel in ('mon_data', 'g/mon_data', 'g/mon_groups/m/mon_data'):
        check_mon_data(emu, rel, geo)
    assert rd(emu, 'g/mode') == 'shareable\n' and rd(emu, 'g/tasks') == ''
    assert stat.S_ISDIR(os.stat(emu.path('g/mon_groups')).st_mode)


def test_read_only_files_refuse_writes(emu: EmulatorFixture) -> None:
    os.mkdir(emu.path('g'))
    os.mkdir(emu.path('g/mon_groups/m'))
    writable, refused = set(), set()
    for top in ('', 'info', 'mon_data/mon_L3_00', 'g', 'g/mon_groups/m'):
        for base, _dirs, files in os.walk(emu.path(top)):
            if top == '' and os.path.normpath(base) != os.path.normpath(emu.root):
                continue
            for name in files:
                path = os.path.join(base, name)
                rel = os.path.relpath(path, emu.root)
                mode = stat.S_IMODE(os.stat(path).st_mode)
                assert mode in (0o444, 0o644), rel
                if mode == 0o644:
                    writable.add(rel)
                    continue
                with pytest.raises(OSError) as exc:       # kernfs_fop_open(), root too
                    os.close(os.open(path, os.O_WRONLY))
                assert exc.value.errno == errno.EACCES, rel
                refused.add(rel)
    assert {'schemata', 'tasks', 'cpus', 'cpus_list', 'mode', 'g/schemata',
            'g/mon_groups/m/tasks', 'info/L3_MON/max_threshold_occupancy'} <= writable
    assert {'size', 'info/last_cmd_status', 'info/L3/cbm_mask', 'info/L3_MON/num_rmids',
            'mon_data/mon_L3_00/llc_occupancy', 'g/size'} <= refused
    assert status(emu) == 'ok\n'


# -- schemata -------------------------------------------------------------------------------
def test_schemata_validation(emu: EmulatorFixture) -> None:
    geo = Geometry(emu)
    os.mkdir(emu.path('g'))
    before = rd(emu, 'g/schemata')
    d0, full = geo.d0, geo.full
    cases = [
        ('L3:%d=%x' % (d0, full + 1), 'Mask out of range\n'),
        ('L3:%d=xyz' % d0, 'Non-hex character in the mask xyz\n'),
        ('L3', "Missing ':'\n"),
        ('L3:', "Missing 'L3' value\n"),
        ('L3:x=%x' % full, "Missing '=' or non-numeric domain\n"),
        ('L3:%d=%x;%d=%x' % (d0, full, d0, full), 'Duplicate domain %d\n' % d0),
        ('L3:%d=%x' % (geo.dl + 1, full), 'ok\n'),     # unknown domain: no message
        ('L2:0=1', "Unknown or unsupported resource name 'L2'\n"),
    ]
    cases += [('%s:0=1' % r, "Unknown or unsupported resource name '%s'\n" % r)
              for r in ('MB', 'SMBA') if r not in geo.root]
    if not geo.sparse:
        cases.append(('L3:%d=5' % d0, 'The mask 5 has non-consecutive 1-bits\n'))
    if geo.min_bits == 1:
        cases.append(('L3:%d=0' % d0, 'Mask out of range\n'))
    elif geo.min_bits > 1:
        cases.append(('L3:%d=%x' % (d0, (1 << (geo.min_bits - 1)) - 1),
                      'Need at least %d bits in the mask\n' % geo.min_bits))
    for res, (low, _gran, high) in geo.bw.items():
        cases.append(('%s:%d=%d' % (res, d0, high + 1),
                      'MB value %d out of range [%d,%d]\n' % (high + 1, low, high)))
        cases.append(('%s:%d=ten' % (res, d0), 'Invalid MB value ten\n'))
        if low > 0:
            cases.append(('%s:%d=%d' % (res, d0, low - 1),
                          'MB value %d out of range [%d,%d]\n' % (low - 1, low, high)))
    for data, text in cases:
        write_fails(emu, 'g/schemata', data + '\n', errno.EINVAL, text)
    # no trailing newline: EINVAL before the command status is touched
    write_fails(emu, 'g/schemata', 'L3:%d=xyz' % d0, errno.EINVAL,
                cases[-1][1])
    # one bad line refuses the whole write
    write_fails(emu, 'g/schemata', 'L3:%d=%x\nL2:0=1\n' % (d0, full), errno.EINVAL,
                "Unknown or unsupported resource name 'L2'\n")
    assert rd(emu, 'g/schemata') == before


def test_schemata_partial_updates(emu: EmulatorFixture) -> None:
    geo = Geometry(emu)
    os.mkdir(emu.path('g'))
    want = parse(rd(emu, 'g/schemata'))
    assert want == geo.root                   # everything free: the root's values
    mask = (1 << max(geo.min_bits, 2)) - 1
    wr(emu, 'g/schemata', 'L3:%d=%x\n' % (geo.dl, mask))
    want['L3'][geo.dl] = '%x' % mask
    assert parse(rd(emu, 'g/schemata')) == want and status(emu) == 'ok\n'
    for res, (low, gran, high) in geo.bw.items():
        value = low + 1 if gran > 1 else high // 2          # rounds up to the granularity
        wr(emu, 'g/schemata', '%s:%d=%d\n' % (res, geo.d0, value))
        want[res][geo.d0] = str(-(-value // gran) * gran)
        assert parse(rd(emu, 'g/schemata')) == want
    if geo.sparse:
        wr(emu, 'g/schemata', 'L3:%d=5\n' % geo.d0)
        want['L3'][geo.d0] = '5'
    if geo.min_bits == 0:
        wr(emu, 'g/schemata', 'L3:%d=0\n' % geo.d0)
        want['L3'][geo.d0] = '0'
    assert parse(rd(emu, 'g/schemata')) == want
    # size: the root's bytes per way times the ways; bandwidth as in schemata
    root_size, size = parse(rd(emu, 'size')), parse(rd(emu, 'g/size'))
    way = int(root_size['L3'][geo.d0]) // geo.cbm_len
    assert size['L3'] == {d: str(way * bin(int(m, 16)).count('1'))
                          for d, m in want['L3'].items()}
    assert {r: v for r, v in size.items() if r != 'L3'} == {
        r: v for r, v in want.items() if r != 'L3'}
    assert parse(rd(emu, 'schemata')) == geo.root


def test_exclusive_mode(emu: EmulatorFixture) -> None:
    geo = Geometry(emu)
    ways = max(geo.min_bits, 1)
    low, rest = (1 << ways) - 1, geo.full & ~((1 << ways) - 1)
    os.mkdir(emu.path('a'))
    wr(emu, 'a/schemata', geo.l3(low))
    write_fails(emu, 'a/mode', 'exclusive\n', errno.EINVAL, 'Schemata overlaps\n')
    wr(emu, 'schemata', geo.l3(rest))
    wr(emu, 'a/mode', 'exclusive\n')
    assert rd(emu, 'a/mode') == 'exclusive\n'
    usage = 'S' * (geo.cbm_len - ways) + 'E' * ways
    assert rd(emu, 'info/L3/bit_usage') == ';'.join(
        '%d=%s' % (d, usage) for d in geo.ids) + '\n'
    write_fails(emu, 'schemata', 'L3:%d=%x\n' % (geo.dl, geo.full), errno.EINVAL,
                'Overlaps with exclusive group\n')
    os.mkdir(emu.path('b'))                   # starts off the exclusive ways
    assert parse(rd(emu, 'b/schemata'))['L3'] == {d: '%x' % rest for d in geo.ids}
    write_fails(emu, 'b/schemata', 'L3:%d=%x\n' % (geo.dl, low), errno.EINVAL,
                'Overlaps with exclusive group\n')
    write_fails(emu, 'a/schemata', 'L3:%d=%x\n' % (geo.d0, low << 1 | 1), errno.EINVAL,
                'Overlaps with other group\n')
    write_fails(emu, 'a/mode', 'private\n', errno.EINVAL, 'Unknown or unsupported mode\n')
    os.rmdir(emu.path('b'))
    wr(emu, 'mode', 'exclusive\n')            # every way now held exclusively
    if geo.min_bits:
        with pytest.raises(OSError) as exc:
            os.mkdir(emu.path('c'))
        assert exc.value.errno == errno.ENOSPC
        assert status(emu) == 'No space on L3:%d\n' % geo.d0
        assert not os.path.exists(emu.path('c'))
    else:                                     # an empty CBM is valid (AMD)
        os.mkdir(emu.path('c'))
        assert parse(rd(emu, 'c/schemata'))['L3'] == {d: '0' for d in geo.ids}


# -- groups -----------------------------------------------------------------------------------
def test_out_of_closids(emu: EmulatorFixture) -> None:
    geo = Geometry(emu)
    for i in range(1, geo.num_closids):      # the root holds CLOSID 0
        os.mkdir(emu.path('g%d' % i))
    with pytest.raises(OSError) as exc:
        os.mkdir(emu.path('full'))
    assert exc.value.errno == errno.ENOSPC and status(emu) == 'Out of CLOSIDs\n'
    assert not os.path.exists(emu.path('full'))
    os.rmdir(emu.path('g3'))
    os.mkdir(emu.path('again'))
    assert parse(rd(emu, 'again/schemata')) == geo.root


def test_tasks_move_and_rmdir(emu: EmulatorFixture, sleeper: Callable[[], int]) -> None:
    pid, pid2 = sleeper(), sleeper()
    assert {pid, pid2} <= tids(emu, 'tasks')
    for rel in ('a', 'b', 'a/mon_groups/m'):
        os.mkdir(emu.path(rel))
    wr(emu, 'a/tasks', '%d\n' % pid)
    assert tids(emu, 'a/tasks') == {pid} and pid not in tids(emu, 'tasks')
    wr(emu, 'b/tasks', '%d,%d\n' % (pid, pid2))
    assert tids(emu, 'b/tasks') == {pid, pid2} and tids(emu, 'a/tasks') == set()
    write_fails(emu, 'a/mon_groups/m/tasks', '%d\n' % pid, errno.EINVAL,
                "Can't move task to different control group\n"
                'Error while processing task %d\n' % pid)
    wr(emu, 'a/tasks', '%d\n' % pid)
    wr(emu, 'a/mon_groups/m/tasks', '%d\n' % pid)
    assert tids(emu, 'a/mon_groups/m/tasks') == {pid} and tids(emu, 'a/tasks') == {pid}
    os.rmdir(emu.path('a/mon_groups/m'))      # back to its control group
    assert tids(emu, 'a/tasks') == {pid}
    os.rmdir(emu.path('a'))                   # back to the root
    os.rmdir(emu.path('b'))
    assert {pid, pid2} <= tids(emu, 'tasks')
    assert status(emu) == 'ok\n'


def test_removed_group_handle_gives_enodev(emu: EmulatorFixture) -> None:
    os.mkdir(emu.path('a'))
    os.mkdir(emu.path('a/mon_groups/m'))
    fds = [os.open(emu.path(rel), os.O_RDWR)
           for rel in ('a/schemata', 'a/tasks', 'a/mon_groups/m/tasks')]
    try:
        os.rmdir(emu.path('a'))
        for fd in fds:
            with pytest.raises(OSError) as exc:
                os.write(fd, b'0\n')
            assert exc.value.errno == errno.ENODEV
            with pytest.raises(OSError) as exc:
                os.pread(fd, 4096, 0)
            assert exc.value.errno == errno.ENODEV
    finally:
        for fd in fds:
            os.close(fd)
