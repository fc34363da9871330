import errno
import os
import time

import pytest

from ovs_rdt.conf import Settings
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Group, Request
from ovs_rdt.exceptions import AllocationError, ConfigError
from ovs_rdt.exceptions import InsufficientWays, NotOwnedError
from ovs_rdt.exceptions import ResctrlError
from ovs_rdt import desired, manager
from ovs_rdt.manager import CacheManager
from tests.unit.fakes import FakeKernelTree
from tests.unit.fakes import make_tree


@pytest.fixture
def rc(tmp_path):
    make_tree(str(tmp_path / 'rc'), sysfs=str(tmp_path / 'sys'))
    return FakeKernelTree(str(tmp_path / 'rc'), str(tmp_path / 'sys'))


def masks(rc, name):
    return {d: str(m) for d, m in rc.group(name).l3.items()}


def table4(**pools):
    return Settings.defaults(allocation={'system_min_ways': 2}, pools=pools)


def test_apply_table4_explicit(rc):
    settings = table4(hp={'l3_cbm': '7f0', 'isolated': True},
                      noisy={'l3_cbm': '0x2'})
    CacheManager(rc, settings).apply()
    assert masks(rc, 'ovsrdt-pool-hp') == {0: '7f0', 1: '7f0'}
    assert masks(rc, 'ovsrdt-pool-noisy') == {0: '2', 1: '2'}
    assert masks(rc, '') == {0: 'c', 1: 'c'}
    assert rc.group('ovsrdt-pool-hp').mode == 'exclusive'
    # Idempotent: a second apply writes nothing.
    assert CacheManager(rc, settings).apply().steps == []


def test_platform_read_from_info(rc):
    plat = rc.platform(cpus=True)
    assert (plat.cbm_len, plat.num_closids, plat.domains) == (11, 8, (0, 1))
    assert plat.way_bytes(0) == 2621440
    assert plat.domains_of_cpus({0, 1}) == {0}
    assert plat.domains_of_cpus({19, 20}) == {0, 1}


def test_allocate_release_and_pools_survive(rc):
    settings = table4(hp={'l3_ways': 7, 'isolated': True})
    mgr = CacheManager(rc, settings)
    mgr.apply()
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 1}))
    assert masks(rc, 'ovsrdt-vm-a')[0] == '8'
    assert masks(rc, '')[0] == '7'
    with pytest.raises(InsufficientWays, match='ovsrdt-vm-b needs 2 ways'):
        mgr.allocate(Request('ovsrdt-vm-b', ways={0: 2}))
    assert 'ovsrdt-vm-b' not in rc.group_names()
    mgr.release('ovsrdt-vm-a')
    mgr.release('ovsrdt-vm-a')  # idempotent
    assert 'ovsrdt-vm-a' not in rc.group_names()
    assert masks(rc, '')[0] == 'f'
    assert masks(rc, 'ovsrdt-pool-hp')[0] == '7f0'


def test_failed_step_is_undone(rc, monkeypatch):
    settings = table4(hp={'l3_cbm': '7f0', 'isolated': True})
    mgr = CacheManager(rc, settings)
    monkeypatch.setattr(manager, 'SETTLE', 0)     # (no second plan)

    def refuse(name, mode):
        raise ResctrlError(rc.path(name, 'mode'), mode, 22,
                           'Schemata overlaps')

    monkeypatch.setattr(rc, 'write_mode', refuse)
    with pytest.raises(ResctrlError, match='Schemata overlaps'):
        mgr.apply()
    assert rc.group_names() == ['']
    assert masks(rc, '') == {0: '7ff', 1: '7ff'}


def test_pool_config_errors_name_the_option(rc):
    # (refused at load: the platform does not matter)
    with pytest.raises(ConfigError, match=r'\[pool:hp\] sets both'):
        CacheManager(rc, table4(hp={'l3_ways': 3, 'l3_cbm': '7'})).apply()
    bad = table4(hp={'l3_cbm': '0=7f0;5=3'})
    with pytest.raises(ConfigError, match=r"\[pool:hp\] l3_cbm: '0=7f0;5=3' "
                       'names cache domain 5, which this platform lacks'):
        CacheManager(rc, bad).apply()
    bad = table4(hp={'l3_cbm': '505'})
    with pytest.raises(ConfigError, match=r'\[pool:hp\] l3_cbm 505 is not '
                       'contiguous'):
        CacheManager(rc, bad).apply()
    with pytest.raises(ConfigError, match=r'needs l3_ways, l3_cbm or '
                       r'\(under CDP\) l3_code_cbm and l3_data_cbm'):
        CacheManager(rc, table4(hp={})).apply()


def test_unconfigured_pool_kept_by_allocate_removed_by_apply(rc):
    CacheManager(rc, table4(old={'l3_ways': 2})).apply()
    mgr = CacheManager(rc, table4())
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 1, 1: 1}))
    assert 'ovsrdt-pool-old' in rc.group_names()
    mgr.apply()
    assert 'ovsrdt-pool-old' not in rc.group_names()
    assert 'ovsrdt-vm-a' in rc.group_names()


def test_release_frees_the_group_when_the_rest_no_longer_fits(rc):
    """Freeing never fails for want of room: the pools in the configuration
    no longer fit this node, and a VM stops before any apply.
    """
    mgr = CacheManager(rc, table4(hp={'l3_ways': 7, 'isolated': True}))
    mgr.apply()
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 1}))
    hp = masks(rc, 'ovsrdt-pool-hp')
    grown = CacheManager(rc, table4(hp={'l3_ways': 12, 'isolated': True}))
    # previewed as it is made (an incoming migration's check)
    preview = grown.preview(remove='ovsrdt-vm-a')
    assert 'ovsrdt-vm-a' in rc.group_names()
    plan = grown.release('ovsrdt-vm-a')
    assert (preview.steps, preview.unplaced) == (plan.steps, plan.unplaced)
    assert 'ovsrdt-vm-a' not in rc.group_names()
    assert [tuple(s) for s in plan.steps] == [('rmdir', 'ovsrdt-vm-a', '')]
    assert '[pool:hp] l3_ways = 12 is more than the 11 ways' in plan.unplaced
    assert masks(rc, 'ovsrdt-pool-hp') == hp
    # an allocation is still refused as a whole, changing nothing
    with pytest.raises(ConfigError):
        grown.allocate(Request('ovsrdt-vm-b', ways={0: 1}))
    assert 'ovsrdt-vm-b' not in rc.group_names()


def test_only_apply_resizes_a_pool(rc):
    """Issue 51 trial 2: the files size a pool otherwise, nothing applied
    them yet: a VM start or stop keeps the pool as resctrl holds it (and
    says so), moving no VM for it; ``apply`` resizes it.
    """
    mgr = CacheManager(rc, table4(hp={'l3_ways': 7, 'isolated': True}))
    mgr.apply()
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 1, 1: 1}))
    hp, vm_a = masks(rc, 'ovsrdt-pool-hp'), masks(rc, 'ovsrdt-vm-a')
    for ways in (5, 8):     # shrunk (ways a VM start could take), grown
        edited = CacheManager(rc, table4(hp={'l3_ways': ways,
                                             'isolated': True}))
        plan = edited.allocate(Request('ovsrdt-vm-b', ways={0: 1}))
        assert plan.kept == [
            'ovsrdt-pool-hp kept as it is (ways 0=7,1=7), though the files '
            'ask ways 0=%d,1=%d: pools change at "ovs-rdt apply" (with an '
            'agent running: at its reload)' % (ways, ways)]
        assert not plan.moves
        assert (masks(rc, 'ovsrdt-pool-hp'), masks(rc, 'ovsrdt-vm-a')) == \
            (hp, vm_a)
        edited.release('ovsrdt-vm-b')
        assert masks(rc, 'ovsrdt-pool-hp') == hp
        assert edited.room() == {0: 11 - 2 - 7 - 1, 1: 11 - 2 - 7 - 1}
    edited.apply()
    assert {d: m.count for d, m in
            rc.group('ovsrdt-pool-hp').l3.items()} == {0: 8, 1: 8}
    assert mgr.preview(remove='ovsrdt-vm-a').kept
    assert not edited.preview(remove='ovsrdt-vm-a').kept


def test_ways_held_where_the_default_group_has_no_mask() -> None:
    """One rule (core.model.held_masks) for which ways a group of ours
    holds: where the default group has no mask on a domain, a group's mask
    there is its own (the allocator's, the writes' and provider-config's
    answer); the manager counted none there before, so keeping a group
    as it is dropped its ways on that domain.
    """
    root = Group('', {0: CBM(0x7f0, 11)})
    vm = Group('ovsrdt-vm-x', {0: CBM(0x3, 11), 1: CBM(0xc, 11)})
    pool = Group('ovsrdt-pool-old', {0: CBM(0x7f0, 11), 1: CBM(0xc, 11)})
    assert desired.held_ways(vm, root) == {0: 2, 1: 2}
    assert desired.existing_request(vm, root).ways == {0: 2, 1: 2}
    assert desired.existing_request(pool, root).cbm == {1: CBM(0xc, 11)}
    from ovs_rdt.core.model import held_masks
    assert held_masks(vm, root) == {0: CBM(0x3, 11), 1: CBM(0xc, 11)}


# -- groups other tools make (issue 47) ---------------------------------------
#: Names the kernel takes (it refuses only a newline), none of them ours.
ODD_NAMES = ('qemu-5-vm-vcpus_0,2', 'a group', 'caf\u00e9@2+x', '"q\'s\\',
             'x' * 255)


def test_other_tools_groups_are_read_whatever_their_names(rc):
    for name in ODD_NAMES:
        rc.mkdir_as_another_tool(name, '1')
    mgr = CacheManager(rc, table4(hp={'l3_ways': 3, 'isolated': True}))
    mgr.apply()
    assert set(ODD_NAMES) <= {g.name for g in rc.groups(with_tasks=True)}
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 1}))
    mgr.release('ovsrdt-vm-a')
    assert all(masks(rc, n) == {0: '1', 1: '1'} for n in ODD_NAMES)
    with pytest.raises(NotOwnedError, match='not a valid resctrl group'):
        with rc.lock():
            rc.mkdir('ovsrdt-pool-a b')


@pytest.mark.parametrize('rel', ['schemata', 'mode', 'tasks', 'cpus_list'])
@pytest.mark.parametrize('err', [errno.ENODEV, errno.ESTALE])
def test_a_group_removed_mid_read_is_gone(rc, monkeypatch, rel, err):
    """Another tool removes its group while it is read: a file open then
    reads ENODEV (kernfs_get_active() fails; ESTALE on the emulator's FUSE
    mount), as gone as ENOENT.
    """
    rc.mkdir_as_another_tool('COS1', '1')
    target = rc.path('COS1', rel)
    real_read = os.read

    def read(fd, size):
        if os.readlink('/proc/self/fd/%d' % fd) == target:
            raise OSError(err, os.strerror(err))
        return real_read(fd, size)

    monkeypatch.setattr(os, 'read', read)
    names = [g.name for g in rc.groups(with_tasks=True)]
    assert 'COS1' not in names or rel in ('mode', 'cpus_list')  # (optional)
    with pytest.raises(FileNotFoundError):
        rc.read(target)
    CacheManager(rc, table4()).apply()


def test_a_refusal_another_tool_may_have_caused_is_planned_again(
        rc, monkeypatch):
    """Tools that take no flock change resctrl under the lock: a write the
    kernel refuses for another group in the way (which the plan checked it
    was not), or a plan refused while another tool's group has the mask
    mkdir gives it, is planned again from a new read; any other refusal is
    final at once.
    """
    mgr = CacheManager(rc, table4(hp={'l3_ways': 3, 'isolated': True}))
    write_mode = rc.write_mode
    refusals = [ResctrlError(rc.path('x', 'mode'), 'exclusive', errno.EINVAL,
                             'Overlaps with other group')]

    def flaky(name, mode):
        if refusals:
            raise refusals.pop()
        write_mode(name, mode)

    monkeypatch.setattr(rc, 'write_mode', flaky)
    mgr.apply()
    assert rc.group('ovsrdt-pool-hp').mode == 'exclusive' and not refusals

    refusals.append(ResctrlError(rc.path('x', 'mode'), 'exclusive',
                                 errno.EIO, None, 'Input/output error'))
    with pytest.raises(ResctrlError, match='Input/output error'):
        mgr.allocate(Request('ovsrdt-vm-a', ways={0: 1, 1: 1}))
    assert 'ovsrdt-vm-a' not in rc.group_names()
    refusals.append(ResctrlError(rc.path('x', 'mode'), 'exclusive',
                                 errno.EINVAL, 'Unknown or unsupported mode'))
    with pytest.raises(ResctrlError, match='Unknown or unsupported mode'):
        mgr.allocate(Request('ovsrdt-vm-a', ways={0: 1, 1: 1}))
    assert 'ovsrdt-vm-a' not in rc.group_names()

    # A bare mkdir holds every free way: planned again until it goes.
    rc.mkdir_as_another_tool('COS1')
    read = rc.groups
    reads = []

    def removed_after_two(*args, **kwargs):
        reads.append(1)
        if len(reads) == 3:
            rc.rmdir_as_another_tool('COS1')
        return read(*args, **kwargs)

    monkeypatch.setattr(rc, 'groups', removed_after_two)
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 1}))
    assert len(reads) == 3 and 'ovsrdt-vm-a' in rc.group_names()

    # One that stays: refused, naming it, once SETTLE is over.
    monkeypatch.setattr(manager, 'SETTLE', 0.1)
    rc.mkdir_as_another_tool('COS2')
    with pytest.raises(InsufficientWays, match='COS2 .*mkdir gave it'):
        mgr.allocate(Request('ovsrdt-vm-b', ways={0: 1}))
    # A refusal that does not name it is final at once.
    monkeypatch.setattr(manager, 'SETTLE', 60)
    began = time.monotonic()
    with pytest.raises(AllocationError) as refused:
        mgr.allocate(Request('ovsrdt-vm-b', ways={7: 1}))   # no domain 7
    assert 'COS2' not in str(refused.value)
    assert time.monotonic() - began < 10


def test_a_refusal_that_lasts_holds_the_lock_only_while_it_tries(
        rc, monkeypatch):
    """A refusal that may be another tool's but lasts (here ENOSPC with
    nothing in ``last_cmd_status``, as the emulator's injected fault) is
    planned again for all of SETTLE, each try under the lock; between the
    tries anyone else takes it (the stress suite's agent held it back to
    back and a ``status`` beside it timed out waiting).
    """
    import fcntl
    from types import SimpleNamespace

    mgr = CacheManager(rc, table4())
    clock = [0.0]
    pauses = []         # per pause: could another open file take the lock?

    def pause(seconds):
        fd = os.open(rc.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            pauses.append(True)
        except BlockingIOError:
            pauses.append(False)
        finally:
            os.close(fd)
        clock[0] += seconds

    monkeypatch.setattr(manager, 'time', SimpleNamespace(
        monotonic=lambda: clock[0], sleep=pause))
    tries = []

    def refused(name, value):
        assert rc._lock_depth == 1 and rc._lock_exclusive   # under the lock
        tries.append(name)
        raise ResctrlError(rc.path(name, 'schemata'), value, errno.ENOSPC,
                           None, 'No space left on device')

    monkeypatch.setattr(rc, 'write_schemata', refused)
    with pytest.raises(ResctrlError, match='No space left on device'):
        mgr.allocate(Request('ovsrdt-vm-a', ways={0: 1}))
    assert len(tries) == round(manager.SETTLE / manager.SETTLE_STEP) + 1
    assert pauses == [True] * (len(tries) - 1)
    assert 'ovsrdt-vm-a' not in rc.group_names()


def test_what_a_killed_selftest_left_goes_with_the_next_plan(rc, tmp_path):
    """``ovsrdt-selftest-<pid>-*`` of a PID that is no selftest now (a
    ``kill -9``) is ovs-rdt's to remove: the next plan does, first, and
    plans with its ways; a running selftest's groups stay another's.
    """
    import subprocess
    import sys

    live = subprocess.Popen([sys.executable, '-c', 'import time; '
                             'time.sleep(60)', 'selftest'])
    try:
        dead = 'ovsrdt-selftest-%d-probe' % (2 ** 22 + 1)
        running = 'ovsrdt-selftest-%d-probe' % live.pid
        rc.mkdir_as_another_tool(dead, '7fe')
        mgr = CacheManager(rc, table4(hp={'l3_ways': 8, 'isolated': True}))
        # The one free count plans as the plan does: its ways are free.
        assert mgr.room() == {0: 1, 1: 1}
        preview = mgr.preview(prune=True)
        assert (preview.steps[0].op, preview.steps[0].group) == ('rmdir', dead)
        mgr.apply()
        assert dead not in rc.group_names()
        assert masks(rc, 'ovsrdt-pool-hp') == {0: '7f8', 1: '7f8'}
        rc.mkdir_as_another_tool(running, '1')
        mgr.apply()
        assert running in rc.group_names()
    finally:
        live.kill()
        live.wait()


def test_resctrl_unmounted_is_said_so(rc):
    """The default group unreadable (resctrl unmounted under an agent):
    an error of ours, not a StopIteration that would end the agent.
    """
    from ovs_rdt.exceptions import ResctrlUnavailable

    mgr = CacheManager(rc, table4())
    mgr.preview(prune=True)             # (the platform read once, kept)
    os.rename(rc.path('', 'schemata'), rc.path('', 'schemata.away'))
    with pytest.raises(ResctrlUnavailable, match='is resctrl still mounted'):
        mgr.preview(prune=True)
