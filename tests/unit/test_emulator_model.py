"""Unit tests of the resctrl emulator's pure kernel model (no FUSE)."""
from __future__ import annotations

import errno
import json
import os
from typing import Optional

import pytest

from ovs_rdt.emulator.cli import write_sysfs
from ovs_rdt.emulator.host import TaskInfo
from ovs_rdt.emulator import kparse
from ovs_rdt.emulator.model import Caller, ResctrlModel
from ovs_rdt.emulator.monitor import Footprints
from ovs_rdt.emulator.profiles import PROFILES, get_profile
from tests import schemata as schemata_text

MiB = 1024 * 1024
GOLD = PROFILES['xeon-gold-6230']
WAY = GOLD.way_size          # 2621440


class FakeHost:
    def __init__(self) -> None:
        self.tasks: dict[int, dict] = {}
        self.tick = 1000

    def add(self, tid: int, tgid: Optional[int] = None, ppid: int = 1,
            comm: str = 'task', uid: int = 0, same_tick: bool = False) -> int:
        self.tick += 0 if same_tick else 1
        self.tasks[tid] = {'tgid': tgid or tid, 'ppid': ppid, 'start': self.tick,
                           'comm': comm, 'uid': uid}
        return tid

    def kill(self, tid: int) -> None:
        del self.tasks[tid]

    def threads(self) -> list[tuple[int, int]]:
        return [(t['tgid'], tid) for tid, t in sorted(self.tasks.items())]

    def info(self, tid: int) -> Optional[TaskInfo]:
        t = self.tasks.get(tid)
        return TaskInfo(t['ppid'], t['start']) if t else None

    def tgid(self, tid: int) -> Optional[int]:
        t = self.tasks.get(tid)
        return t['tgid'] if t else None

    def uids(self, tid: int) -> Optional[tuple[int, int, int]]:
        t = self.tasks.get(tid)
        return (t['uid'],) * 3 if t else None

    def comm(self, tid: int) -> Optional[str]:
        t = self.tasks.get(tid)
        return t['comm'] if t else None

    def now_ticks(self) -> int:
        return self.tick

    def last_pid(self) -> Optional[int]:
        return max(self.tasks, default=None)

    def resident(self, tid: int) -> Optional[int]:
        t = self.tasks.get(tid)
        return t.get('resident') if t else None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def host() -> FakeHost:
    h = FakeHost()
    h.add(1)
    return h


def make(host: FakeHost, profile: str = 'xeon-gold-6230', clock: Optional[Clock] = None,
         footprints: Optional[Footprints] = None, **overrides: str) -> ResctrlModel:
    prof = get_profile(profile).with_overrides(overrides.items())
    return ResctrlModel(prof, host=host, footprints=footprints or Footprints(default=0),
                        clock=clock or Clock())


def read(model: ResctrlModel, path: str) -> str:
    node = model.lookup(path)
    assert node.show is not None
    return node.show()


def write(model: ResctrlModel, path: str, data: str, caller: Caller = Caller(pid=1)) -> None:
    node = model.lookup(path)
    assert node.write is not None
    model.check_write(node, data.encode('latin-1'))
    node.write(data.encode('latin-1'), caller)


def fails(model: ResctrlModel, path: str, data: str, err: int, status: Optional[str]) -> None:
    with pytest.raises(OSError) as exc:
        write(model, path, data)
    assert exc.value.errno == err
    if status is not None:
        assert read(model, 'info/last_cmd_status') == status


# -- kernel parsers ---------------------------------------------------------------
@pytest.mark.parametrize('text,base,value', [
    ('7f0', 16, 0x7f0), ('0x7f0', 16, 0x7f0), ('+12', 10, 12), ('12\n', 10, 12),
    ('010', 0, 8), ('0x10', 0, 16), ('10', 0, 10)])
def test_kstrtoull_accepts(text: str, base: int, value: int) -> None:
    assert kparse.kstrtoull(text, base) == value


@pytest.mark.parametrize('text,base,err', [
    ('', 16, errno.EINVAL), ('0x', 16, errno.EINVAL), ('1g', 16, errno.EINVAL),
    (' 1', 10, errno.EINVAL), ('1\n\n', 10, errno.EINVAL), ('1' * 30, 10, errno.ERANGE)])
def test_kstrtoull_rejects(text: str, base: int, err: int) -> None:
    with pytest.raises(kparse.ParseError) as exc:
        kparse.kstrtoull(text, base)
    assert exc.value.errno == err


def test_kstrtoint_range() -> None:
    assert kparse.kstrtoint('-5', 0) == -5
    with pytest.raises(kparse.ParseError) as exc:
        kparse.kstrtoint('2147483648', 0)
    assert exc.value.errno == errno.ERANGE


@pytest.mark.parametrize('text,mask', [
    ('0-3,8\n', 0x10f), ('', 0), ('\n', 0), ('1,3', 0xa), ('0-7:2/4', 0x33),
    ('N', 1 << 39), ('all', (1 << 40) - 1), (' 2 , 4', 0x14)])
def test_bitmap_parselist(text: str, mask: int) -> None:
    assert kparse.bitmap_parselist(text, 40) == mask


@pytest.mark.parametrize('text,err', [
    ('40', errno.ERANGE), ('a', errno.EINVAL), ('3-1', errno.EINVAL),
    ('1-', errno.EINVAL), ('99999999999', errno.EOVERFLOW)])
def test_bitmap_parselist_errors(text: str, err: int) -> None:
    with pytest.raises(kparse.ParseError) as exc:
        kparse.bitmap_parselist(text, 40)
    assert exc.value.errno == err


@pytest.mark.parametrize('text,mask', [
    ('f\n', 0xf), ('ff,ffffffff', (1 << 40) - 1), ('0x3', None), ('', 0),
    ('1,00000000', 1 << 32)])
def test_bitmap_parse(text: str, mask: Optional[int]) -> None:
    if mask is None:
        with pytest.raises(kparse.ParseError) as exc:
            kparse.bitmap_parse(text, 40)
        assert exc.value.errno == errno.EINVAL
    else:
        assert kparse.bitmap_parse(text, 40) == mask


def test_bitmap_parse_overflow() -> None:
    for text in ('100,00000000', '123456789'):
        with pytest.raises(kparse.ParseError) as exc:
            kparse.bitmap_parse(text, 40)
        assert exc.value.errno == errno.EOVERFLOW


def test_bitmap_printers() -> None:
    assert kparse.bitmap_string(0xf, 40) == '00,0000000f'
    assert kparse.bitmap_string(0xffff, 16) == 'ffff'
    assert kparse.bitmap_string(1, 96) == '00000000,00000000,00000001'
    assert kparse.bitmap_list_string([0, 1, 2, 3, 8, 10, 11]) == '0-3,8,10-11'
    assert kparse.bitmap_list_string([]) == ''


# -- profiles --------------------------------------------------------------------
def test_profile_geometry() -> None:
    assert GOLD.num_cpus == 40 and GOLD.cpus_of(1) == list(range(20, 40))
    assert GOLD.way_size == 2621440 and GOLD.max_threshold_occupancy() == 163840
    d1540 = PROFILES['xeon-d-1540']
    assert d1540.num_cpus == 16 and d1540.siblings_of(3) == [3, 11]
    assert PROFILES['xeon-e7-8890-v4'].cpus_of(3) == list(range(72, 96))
    # resctrl_rmid_realloc_limit is x86_cache_size: the L2 on AMD; the
    # threshold is rounded to CPUID's scale (64), not SNC's (21)
    assert PROFILES['epyc-9654'].max_threshold_occupancy() == 1048576 // 256
    assert PROFILES['epyc-9575f'].realloc_limit == 1048576
    assert PROFILES['xeon-6-granite-rapids-snc3'].max_threshold_occupancy() == 6217408


def test_profile_overrides() -> None:
    prof = GOLD.with_overrides([('num_rmids', '8'), ('sparse_masks', 'true')])
    assert prof.num_rmids == 8 and prof.sparse_masks
    with pytest.raises(ValueError):
        GOLD.with_overrides([('nonsense', '1')])
    with pytest.raises(ValueError):
        GOLD.with_overrides([('cbm_len', '40')])


def test_write_sysfs(tmp_path: 'os.PathLike[str]') -> None:
    write_sysfs(PROFILES['xeon-d-1540'], str(tmp_path))
    with open(os.path.join(tmp_path, 'online')) as fh:
        assert fh.read() == '0-15\n'
    base = os.path.join(tmp_path, 'cpu9', 'cache', 'index3')
    with open(os.path.join(base, 'shared_cpu_list')) as fh:
        assert fh.read() == '0-15\n'
    with open(os.path.join(base, 'size')) as fh:
        assert fh.read() == '12288K\n'


# -- schemata --------------------------------------------------------------------
def test_root_schemata_and_size(host: FakeHost) -> None:
    model = make(host)
    assert read(model, 'schemata') == '    MB:0=100;1=100\n    L3:0=7ff;1=7ff\n'
    assert read(model, 'size') == '    MB:0=100;1=100\n    L3:0=28835840;1=28835840\n'
    rc2 = make(host, 'xeon-d-1540')
    assert read(rc2, 'schemata') == '    L3:0=fff\n'


def test_partial_update_and_rounding(host: FakeHost) -> None:
    model = make(host)
    model.mkdir('/g', 0o755, Caller())
    write(model, 'g/schemata', 'L3:1=7f0\n')
    write(model, 'g/schemata', 'MB:0=55\n')
    assert read(model, 'g/schemata') == '    MB:0=60;1=100\n    L3:0=7ff;1=7f0\n'
    assert read(model, 'g/size').endswith('L3:0=28835840;1=18350080\n')
    assert read(model, 'info/last_cmd_status') == 'ok\n'
    assert read(model, 'schemata') == '    MB:0=100;1=100\n    L3:0=7ff;1=7ff\n'


@pytest.mark.parametrize('data,status', [
    ('L3:0=7f1\n', 'The mask 7f1 has non-consecutive 1-bits\n'),
    ('L3:0=800\n', 'Mask out of range\n'),
    ('L3:0=0\n', 'Mask out of range\n'),
    ('L3:0=xyz\n', 'Non-hex character in the mask xyz\n'),
    ('L4:0=1\n', "Unknown or unsupported resource name 'L4'\n"),
    ('L3\n', "Missing ':'\n"),
    ('\n', "Missing ':'\n"),
    ('L3:\n', "Missing 'L3' value\n"),
    ('L3:x=1\n', "Missing '=' or non-numeric domain\n"),
    ('L3:0=1;0=3\n', 'Duplicate domain 0\n'),
    ('L3:7=1\n', 'ok\n'),
    ('MB:0=5\n', 'MB value 5 out of range [10,100]\n'),
    ('MB:0=abc\n', 'Invalid MB value abc\n'),
    ('L3:0=3\nL3:1=7f1\n', 'The mask 7f1 has non-consecutive 1-bits\n'),
])
def test_schemata_rejects(host: FakeHost, data: str, status: str) -> None:
    model = make(host)
    model.mkdir('/g', 0o755, Caller())
    fails(model, 'g/schemata', data, errno.EINVAL, status)
    assert read(model, 'g/schemata') == '    MB:0=100;1=100\n    L3:0=7ff;1=7ff\n'


def test_missing_newline_keeps_status(host: FakeHost) -> None:
    model = make(host)
    fails(model, 'schemata', 'L3:0=800\n', errno.EINVAL, 'Mask out of range\n')
    fails(model, 'schemata', 'L3:0=7f0', errno.EINVAL, 'Mask out of range\n')


def test_min_cbm_bits_and_sparse(host: FakeHost) -> None:
    model = make(host, min_cbm_bits='2')
    fails(model, 'schemata', 'L3:0=1\n', errno.EINVAL, 'Need at least 2 bits in the mask\n')
    model = make(host, sparse_masks='1')
    write(model, 'schemata', 'L3:0=405\n')
    assert read(model, 'info/L3/sparse_masks') == '1\n'


def test_initial_schemata_is_first_free_run(host: FakeHost) -> None:
    model = make(host)
    write(model, 'schemata', 'L3:0=700;1=700\n')
    model.mkdir('/a', 0o755, Caller())
    write(model, 'a/schemata', 'L3:0=f0;1=f0\n')
    write(model, 'a/mode', 'exclusive\n')
    model.mkdir('/b', 0o755, Caller())
    # shareable root bits 0x700 + unused 0x00f -> first contiguous run: 0x00f
    assert read(model, 'b/schemata') == '    MB:0=100;1=100\n    L3:0=f;1=f\n'
    assert read(model, 'info/L3/bit_usage') == '0=SSSEEEESSSS;1=SSSEEEESSSS\n'


def test_initial_schemata_is_one_run_with_sparse_masks_too(
        host: FakeHost) -> None:
    """cbm_ensure_valid() cuts the default to its lowest run on every
    platform: the kernel does not look at arch_has_sparse_bitmasks there.
    """
    model = make(host, sparse_masks='1')
    model.mkdir('/a', 0o755, Caller())
    write(model, 'a/schemata', 'L3:0=f0;1=f0\n')
    write(model, 'schemata', 'L3:0=70f;1=70f\n')
    write(model, 'a/mode', 'exclusive\n')
    model.mkdir('/b', 0o755, Caller())
    assert read(model, 'b/schemata') == '    MB:0=100;1=100\n    L3:0=f;1=f\n'


def test_initial_schemata_is_the_one_ovs_rdt_predicts(host: FakeHost) -> None:
    """The emulator (written from fs/resctrl) and ovs-rdt's own model of
    mkdir (core.kernel.new_group_mask) agree, sparse or not, and with
    sparse masks kept whole as tip's cbm_ensure_valid() keeps them.
    """
    from ovs_rdt.core.kernel import new_group_mask
    from ovs_rdt.core.model import Platform
    for sparse, whole in (('0', '0'), ('1', '0'), ('1', '1')):
        model = make(host, sparse_masks=sparse, sparse_new_group=whole)
        plat = Platform(11, 16, (0, 1), shareable_bits=GOLD.shareable_bits,
                        sparse_masks=sparse == '1')
        layout = [('a', '0=7f0;1=7f0', 'exclusive'), ('b', '0=8;1=8', ''),
                  ('c', '0=4;1=4', 'exclusive')]
        write(model, 'schemata', 'L3:0=3;1=3\n')
        others = [('shareable', {0: 0x3, 1: 0x3})]
        for name, line, mode in layout:
            model.mkdir('/' + name, 0o755, Caller())
            write(model, name + '/schemata', 'L3:%s\n' % line)
            if mode:
                write(model, name + '/mode', mode + '\n')
            others.append((mode or 'shareable',
                           schemata_text.masks('L3:' + line)))
            model.mkdir('/new', 0o755, Caller())
            got = read(model, 'new/schemata').split('L3:')[1].strip()
            want = ';'.join('%d=%x' % (d, new_group_mask(
                plat, d, [(m, v[d]) for m, v in others], cut=whole == '0'))
                for d in (0, 1))
            assert got == want, (sparse, whole, name)
            model.rmdir('/new')


def test_no_space(host: FakeHost) -> None:
    model = make(host)
    write(model, 'schemata', 'L3:0=400;1=400\n')
    model.mkdir('/a', 0o755, Caller())
    write(model, 'a/schemata', 'L3:0=3ff;1=3ff\n')
    write(model, 'a/mode', 'exclusive\n')
    write(model, 'mode', 'exclusive\n')
    with pytest.raises(OSError) as exc:
        model.mkdir('/b', 0o755, Caller())
    assert exc.value.errno == errno.ENOSPC
    assert read(model, 'info/last_cmd_status') == 'No space on L3:0\n'
    assert 'b' not in model.entries(model.lookup('/'))


def test_exclusive_rules(host: FakeHost) -> None:
    model = make(host)
    model.mkdir('/a', 0o755, Caller())
    write(model, 'a/schemata', 'L3:0=3;1=3\n')
    fails(model, 'a/mode', 'exclusive\n', errno.EINVAL, 'Schemata overlaps\n')
    write(model, 'schemata', 'L3:0=7fc;1=7fc\n')
    write(model, 'a/mode', 'exclusive\n')
    assert read(model, 'a/mode') == 'exclusive\n'
    fails(model, 'schemata', 'L3:0=7ff\n', errno.EINVAL, 'Overlaps with exclusive group\n')
    fails(model, 'a/schemata', 'L3:0=7\n', errno.EINVAL, 'Overlaps with other group\n')
    fails(model, 'a/mode', 'bogus\n', errno.EINVAL, 'Unknown or unsupported mode\n')
    fails(model, 'a/mode', 'pseudo-locksetup\n', errno.EINVAL, 'Pseudo-locking not supported\n')
    fails(model, 'mode', 'pseudo-locksetup\n', errno.EINVAL, 'Cannot pseudo-lock default group\n')
    write(model, 'a/mode', 'shareable\n')
    write(model, 'schemata', 'L3:0=7ff\n')


def test_closids_and_rmids(host: FakeHost) -> None:
    model = make(host, l3_num_closids='4', mb_num_closids='3')
    assert read(model, 'info/L3/num_closids') == '4\n'
    model.mkdir('/a', 0o755, Caller())
    model.mkdir('/b', 0o755, Caller())
    with pytest.raises(OSError) as exc:
        model.mkdir('/c', 0o755, Caller())
    assert exc.value.errno == errno.ENOSPC
    assert read(model, 'info/last_cmd_status') == 'Out of CLOSIDs\n'
    model.rmdir('/a')
    model.mkdir('/c', 0o755, Caller())
    assert model.groups['c'].closid == 1
    model = make(host, num_rmids='2')
    model.mkdir('/a', 0o755, Caller())
    with pytest.raises(OSError) as exc:
        model.mkdir('/a/mon_groups/m', 0o755, Caller())
    assert exc.value.errno == errno.ENOSPC
    assert read(model, 'info/last_cmd_status') == 'Out of RMIDs\n'


@pytest.mark.parametrize('path,err', [
    ('/info/x', errno.ENODEV), ('/info/L3/x', errno.ENODEV), ('/mon_data/x', errno.EPERM),
    ('/g/x', errno.EPERM), ('/g/mon_groups/mon_groups', errno.EPERM),
    ('/g/mon_groups/m/x', errno.EPERM), ('/bad\nname', errno.EINVAL), ('/g', errno.EEXIST)])
def test_mkdir_refusals(host: FakeHost, path: str, err: int) -> None:
    model = make(host)
    model.mkdir('/g', 0o755, Caller())
    model.mkdir('/g/mon_groups/m', 0o755, Caller())
    with pytest.raises(OSError) as exc:
        model.mkdir(path, 0o755, Caller())
    assert exc.value.errno == err


@pytest.mark.parametrize('path,err', [
    ('/info', errno.EPERM), ('/info/L3', errno.EPERM), ('/mon_groups', errno.EPERM),
    ('/g/mon_data', errno.EPERM), ('/g/mon_groups', errno.EPERM), ('/', errno.EBUSY),
    ('/tasks', errno.ENOTDIR), ('/nope', errno.ENOENT)])
def test_rmdir_refusals(host: FakeHost, path: str, err: int) -> None:
    model = make(host)
    model.mkdir('/g', 0o755, Caller())
    with pytest.raises(OSError) as exc:
        model.rmdir(path)
    assert exc.value.errno == err


# -- tasks -----------------------------------------------------------------------
def tids(model: ResctrlModel, path: str) -> list[int]:
    return [int(t) for t in read(model, path).split()]


def test_tasks_move_and_errors(host: FakeHost) -> None:
    model = make(host)
    host.add(100)
    host.add(101)
    model.mkdir('/a', 0o755, Caller())
    model.mkdir('/b', 0o755, Caller())
    write(model, 'a/tasks', '100,101\n')
    assert tids(model, 'a/tasks') == [100, 101] and tids(model, 'tasks') == [1]
    write(model, 'b/tasks', '101')
    assert tids(model, 'a/tasks') == [100] and tids(model, 'b/tasks') == [101]
    fails(model, 'a/tasks', '555\n', errno.ESRCH,
          'No task 555\nError while processing task 555\n')
    fails(model, 'a/tasks', '101,x\n', errno.EINVAL, 'Task list parsing error pid x\n')
    assert tids(model, 'a/tasks') == [100, 101]       # 101 moved before the error
    fails(model, 'a/tasks', '-3\n', errno.EINVAL, 'Invalid pid -3\n')
    write(model, 'a/tasks', '0\n', Caller(pid=1))      # 0 = the writer itself
    assert 1 in tids(model, 'a/tasks')
    host.kill(100)
    assert 100 not in tids(model, 'a/tasks')
    model.rmdir('/a')
    assert tids(model, 'tasks') == [1, 101] and tids(model, 'b/tasks') == []


def test_tasks_permission(host: FakeHost) -> None:
    model = make(host)
    host.add(200, uid=0)
    model.mkdir('/a', 0o755, Caller())
    with pytest.raises(OSError) as exc:
        write(model, 'a/tasks', '200\n', Caller(uid=1000, pid=1))
    assert exc.value.errno == errno.EPERM
    assert read(model, 'info/last_cmd_status') == (
        'No permission to move task 200\nError while processing task 200\n')


def test_new_threads_inherit_creator_group(host: FakeHost) -> None:
    model = make(host)
    model.mkdir('/a', 0o755, Caller())
    host.add(300)
    host.add(301, tgid=300)                 # thread born before the move
    write(model, 'a/tasks', '300\n')
    host.add(302, tgid=300)                 # thread born after: inherits
    host.add(400, ppid=300)                 # child process: inherits
    host.add(401, ppid=1)
    assert tids(model, 'a/tasks') == [300, 302, 400]


def test_inheritance_within_one_tick_uses_pid_order(host: FakeHost) -> None:
    model = make(host)
    model.mkdir('/a', 0o755, Caller())
    host.add(310)
    host.add(311, tgid=310, same_tick=True)         # same tick, before the move
    write(model, 'a/tasks', '310\n')
    host.add(312, tgid=310, same_tick=True)         # same tick, after the move
    assert tids(model, 'a/tasks') == [310, 312]


def test_mon_groups(host: FakeHost) -> None:
    model = make(host)
    host.add(500)
    host.add(501)
    model.mkdir('/a', 0o755, Caller())
    model.mkdir('/b', 0o755, Caller())
    model.mkdir('/a/mon_groups/m', 0o755, Caller())
    fails(model, 'a/mon_groups/m/tasks', '500\n', errno.EINVAL,
          "Can't move task to different control group\nError while processing task 500\n")
    write(model, 'a/tasks', '500,501\n')
    write(model, 'a/mon_groups/m/tasks', '500\n')
    assert tids(model, 'a/mon_groups/m/tasks') == [500]
    assert tids(model, 'a/tasks') == [500, 501]
    model.rename('/a/mon_groups/m', '/b/mon_groups/m2')
    assert tids(model, 'b/tasks') == [500] and tids(model, 'b/mon_groups/m2/tasks') == [500]
    with pytest.raises(OSError) as exc:
        model.rename('/a', '/c')
    assert exc.value.errno == errno.EPERM
    assert read(model, 'info/last_cmd_status') == 'Source must be a MON group\n'
    model.rmdir('/b/mon_groups/m2')
    assert tids(model, 'b/tasks') == [500]


# -- cpus ------------------------------------------------------------------------
def test_cpus_semantics(host: FakeHost) -> None:
    model = make(host)
    model.mkdir('/a', 0o755, Caller())
    model.mkdir('/b', 0o755, Caller())
    write(model, 'a/cpus_list', '0-3\n')
    assert read(model, 'a/cpus') == '00,0000000f\n'
    assert read(model, 'cpus_list') == '4-39\n'
    write(model, 'b/cpus', '30\n')                     # hex mask: CPUs 4-5
    assert read(model, 'b/cpus_list') == '4-5\n'
    write(model, 'b/cpus_list', '2-5\n')
    assert read(model, 'a/cpus_list') == '0-1\n'
    write(model, 'a/cpus_list', '0\n')
    assert read(model, 'cpus_list') == '1,6-39\n'
    fails(model, 'cpus_list', '2-39\n', errno.EINVAL, "Can't drop CPUs from default group\n")
    fails(model, 'a/cpus_list', 'x\n', errno.EINVAL, 'Bad CPU list/mask\n')
    fails(model, 'a/cpus_list', '40\n', errno.ERANGE, 'Bad CPU list/mask\n')
    fails(model, 'a/cpus', '100,00000000\n', errno.EOVERFLOW, 'Bad CPU list/mask\n')
    model.rmdir('/b')
    assert read(model, 'cpus_list') == '1-39\n'
    model = make(host, possible_cpus='48')
    fails(model, 'cpus_list', '0-44\n', errno.EINVAL, 'Can only assign online CPUs\n')


def test_mon_group_cpus(host: FakeHost) -> None:
    model = make(host)
    model.mkdir('/a', 0o755, Caller())
    model.mkdir('/a/mon_groups/m', 0o755, Caller())
    write(model, 'a/cpus_list', '0-3\n')
    fails(model, 'a/mon_groups/m/cpus_list', '4\n', errno.EINVAL,
          'Can only add CPUs to mongroup that belong to parent\n')
    write(model, 'a/mon_groups/m/cpus_list', '1-2\n')
    assert read(model, 'a/mon_groups/m/cpus_list') == '1-2\n'
    write(model, 'a/cpus_list', '0-3\n')               # rewriting the parent clears children
    assert read(model, 'a/mon_groups/m/cpus_list') == '\n'


# -- monitoring ------------------------------------------------------------------
def test_occupancy_and_mbm(host: FakeHost, tmp_path: 'os.PathLike[str]') -> None:
    path = os.path.join(tmp_path, 'fp.json')
    with open(path, 'w') as fh:
        json.dump({'default': 0, '600': 8 * MiB}, fh)
    clock = Clock()
    model = make(host, clock=clock, footprints=Footprints(path))
    host.add(600)
    write(model, 'schemata', 'L3:0=7f0;1=7f0\n')
    model.mkdir('/a', 0o755, Caller())
    write(model, 'a/schemata', 'L3:0=1;1=1\n')
    write(model, 'a/tasks', '600\n')
    occ = 'a/mon_data/mon_L3_00/llc_occupancy'
    total = 'a/mon_data/mon_L3_01/mbm_total_bytes'
    assert int(read(model, occ)) == WAY                       # 4 MiB wanted, 1 way
    assert int(read(model, total)) == 0
    clock.now += 2.0
    miss = 4 * MiB - WAY
    assert int(read(model, total)) == int(miss * 50 * 2) // 64 * 64
    local = int(read(model, 'a/mon_data/mon_L3_01/mbm_local_bytes'))
    assert local == int(miss * 50 * 2 * 0.8) // 64 * 64
    write(model, 'a/schemata', 'L3:0=3;1=3\n')
    assert int(read(model, occ)) == 4 * MiB                  # fits in 2 ways
    before = int(read(model, total))
    clock.now += 2.0
    assert int(read(model, total)) == before                 # no misses, no traffic
    assert int(read(model, 'mon_data/mon_L3_00/llc_occupancy')) == 0


def test_occupancy_is_shared_on_overlap(host: FakeHost, tmp_path: 'os.PathLike[str]') -> None:
    path = os.path.join(tmp_path, 'fp.json')
    with open(path, 'w') as fh:
        json.dump({'default': 0, '700': {'0': 10 * WAY}, '701': {'0': 30 * WAY}}, fh)
    model = make(host, footprints=Footprints(path))
    host.add(700)
    host.add(701)
    write(model, 'schemata', 'L3:0=700\n')
    for name, tid in (('a', 700), ('b', 701)):
        model.mkdir('/' + name, 0o755, Caller())
        write(model, name + '/schemata', 'L3:0=3\n')
        write(model, name + '/tasks', '%d\n' % tid)
    occ_a = int(read(model, 'a/mon_data/mon_L3_00/llc_occupancy'))
    occ_b = int(read(model, 'b/mon_data/mon_L3_00/llc_occupancy'))
    assert occ_a + occ_b <= 2 * WAY
    assert occ_b == 3 * occ_a
    assert int(read(model, 'a/mon_data/mon_L3_01/llc_occupancy')) == 0


def test_mb_caps_bandwidth(host: FakeHost, tmp_path: 'os.PathLike[str]') -> None:
    path = os.path.join(tmp_path, 'fp.json')
    with open(path, 'w') as fh:
        json.dump({'default': 0, '800': 1 << 40}, fh)
    clock = Clock()
    model = make(host, clock=clock, footprints=Footprints(path))
    host.add(800)
    model.mkdir('/a', 0o755, Caller())
    write(model, 'a/schemata', 'MB:0=10;1=10\n')
    write(model, 'a/tasks', '800\n')
    read(model, 'a/mon_data/mon_L3_00/mbm_total_bytes')
    clock.now += 1.0
    value = int(read(model, 'a/mon_data/mon_L3_00/mbm_total_bytes'))
    assert value == int(GOLD.mem_bw * 0.1) // 64 * 64


def test_ctrl_group_sums_mon_groups(host: FakeHost, tmp_path: 'os.PathLike[str]') -> None:
    path = os.path.join(tmp_path, 'fp.json')
    with open(path, 'w') as fh:
        json.dump({'default': 0, '900': 2 * WAY, '901': 6 * WAY}, fh)
    model = make(host, footprints=Footprints(path))
    host.add(900)
    host.add(901)
    write(model, 'schemata', 'L3:0=7f0;1=7f0\n')
    model.mkdir('/a', 0o755, Caller())
    write(model, 'a/schemata', 'L3:0=f;1=f\n')
    model.mkdir('/a/mon_groups/m', 0o755, Caller())
    write(model, 'a/tasks', '900,901\n')
    write(model, 'a/mon_groups/m/tasks', '901\n')
    whole = int(read(model, 'a/mon_data/mon_L3_00/llc_occupancy'))
    part = int(read(model, 'a/mon_groups/m/mon_data/mon_L3_00/llc_occupancy'))
    assert whole == 4 * WAY and part == 3 * WAY


def test_threshold_file(host: FakeHost) -> None:
    model = make(host)
    write(model, 'info/L3_MON/max_threshold_occupancy', '100000\n')
    assert read(model, 'info/L3_MON/max_threshold_occupancy') == '99968\n'
    fails(model, 'info/L3_MON/max_threshold_occupancy', '99999999\n', errno.EINVAL, None)
    fails(model, 'info/L3_MON/max_threshold_occupancy', '99999999999\n', errno.ERANGE, None)


def test_write_limits(host: FakeHost) -> None:
    model = make(host)
    model.mkdir('/a', 0o755, Caller())
    node = model.lookup('a/schemata')
    with pytest.raises(OSError) as exc:
        model.check_write(node, b'x' * 5000)
    assert exc.value.errno == errno.E2BIG
    model.rmdir('/a')
    with pytest.raises(OSError) as exc:
        model.check_write(node, b'L3:0=1\n')
    assert exc.value.errno == errno.ENODEV


def test_a_running_task_counts_its_resident_memory(host: FakeHost,
                                                   tmp_path: 'os.PathLike[str]') -> None:
    # Before: every task not in the footprints file was 2 MiB, spread over
    # the L3 domains: the selftest's 128 MiB stream fitted in one way of an
    # EPYC (16 domains, 2 MiB ways) and its MBM counters stayed at 0.
    host.add(600)
    host.tasks[600]['resident'] = 128 * MiB             # running
    host.add(601)                                       # sleeping (or gone)
    model = make(host, 'epyc-9654', footprints=Footprints())
    model.mkdir('/a', 0o755, Caller())
    write(model, 'a/schemata', 'L3:%s\n' % ';'.join('%d=1' % d for d in range(24)))
    write(model, 'a/tasks', '600\n')
    occ = 'a/mon_data/mon_L3_00/llc_occupancy'
    way = 32 * MiB // 16
    assert int(read(model, occ)) >= way * 9 // 10          # fills its way
    write(model, 'a/tasks', '601\n')
    write(model, 'tasks', '600\n')
    assert int(read(model, occ)) == 2 * MiB // 24 // 64 * 64      # the default: fits
    # a default, from the file or --default-footprint: every such task
    path = os.path.join(tmp_path, 'fp.json')
    with open(path, 'w') as fh:
        json.dump({'default': 0}, fh)
    fixed = Footprints(path)
    fixed.refresh()
    assert fixed.vector(600, None, 2, host.resident) == [0.0, 0.0]
    assert Footprints(default=MiB).vector(600, None, 2, host.resident) == [MiB / 2] * 2
    assert Footprints().vector(600, None, 2, host.resident) == [64.0 * MiB] * 2
    assert Footprints().vector(601, None, 2, host.resident) == [float(MiB)] * 2


def test_the_faults_file_turns_divergences_on_and_off(tmp_path: 'os.PathLike[str]') -> None:
    from ovs_rdt.emulator.faults import Faults, parse_rules
    rules, diverge = parse_rules('write /x EIO\ndiverge schemata-reset  # why\n')
    assert [r.op for r in rules] == ['write'] and diverge == {'schemata-reset'}
    with pytest.raises(ValueError, match='is not "diverge NAME"'):
        parse_rules('diverge no-such-thing\n')
    path = os.path.join(tmp_path, 'faults')
    faults = Faults(path, frozenset({'tasks-stay'}))
    with open(path, 'w') as fh:
        fh.write('diverge mbm-frozen\n')
    assert faults.check('read', '/x') is None
    assert faults.diverge == {'tasks-stay', 'mbm-frozen'}
    os.unlink(path)
    faults.check('read', '/x')
    assert faults.diverge == {'tasks-stay'}
