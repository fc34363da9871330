"""The allocator against the kernel's rules: masks, isolation, steps."""
import os

import pytest

from ovs_rdt.conf import Settings
from ovs_rdt.core.allocator import plan, validate_mask
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Group, MBInfo, Platform, Request
from ovs_rdt.exceptions import AllocationError, InvalidMask
from ovs_rdt.manager import CacheManager
from tests.unit.fakes import FakeKernelTree
from tests.unit.fakes import make_tree

W = 11


def gold(**kw):
    kw.setdefault('mb', MBInfo(10, 10, True, (0, 1)))
    return Platform(W, 16, (0, 1), **kw)


def both(value):
    return {0: CBM(value, W), 1: CBM(value, W)}


def root(mask=0x7ff):
    return Group('', both(mask))


def test_sparse_masks_need_a_long_enough_lowest_run():
    # cbm_validate(): with sparse masks the minimum is checked on the
    # lowest run of ones, not on the number of ways.
    plat = gold(sparse_masks=True, min_cbm_bits=2)
    validate_mask(plat, CBM(0b110011, W), 'm')
    with pytest.raises(InvalidMask, match='m 31 starts with a run of 1 '
                       'way, fewer than the platform minimum 2'):
        validate_mask(plat, CBM(0b110001, W), 'm')
    # The default group never starts with a run that is too short.
    result = plan(plat, [root(), Group('COS1', both(0x2), mode='exclusive')],
                  [], 2)
    assert result.l3[''] == both(0x7fc)


def test_shared_pool_may_not_overlap_an_isolated_one_in_any_order():
    hp = Request('ovsrdt-pool-hp', cbm=both(0x7f0))
    noisy = Request('ovsrdt-pool-noisy', cbm=both(0x030), exclusive=False)
    for reqs in ([hp, noisy], [noisy, hp]):
        with pytest.raises(InvalidMask, match='l3_cbm on domain 0 (30|7f0)'
                           ' overlaps'):
            plan(gold(), [root()], reqs, 2)


def test_isolated_requests_skip_shareable_bits():
    plat = gold(shareable_bits=0x600)
    result = plan(plat, [root()], [
        Request('ovsrdt-vm-a', ways={0: 2, 1: 2}),
        Request('ovsrdt-pool-noisy', ways={0: 1, 1: 1}, exclusive=False)], 1)
    # Packed at the bottom, away from the I/O ways (see below); the shared
    # pool may use them.
    assert result.l3['ovsrdt-vm-a'] == both(0x003)
    assert result.l3['ovsrdt-pool-noisy'] == both(0x400)
    assert result.l3[''] == both(0x3fc)
    # What a new isolated VM could still get: ways 0-6, not way 9.
    assert result.free == {0: 7, 1: 7}
    with pytest.raises(Exception, match='ovsrdt-vm-a needs 10 ways on cache '
                       'domain 0, but only 9 of 11 are free .*; 2 shared '
                       'with I/O \\(info/L3/shareable_bits 600\\) among '
                       'them\\)$'):
        plan(plat, [root()], [Request('ovsrdt-vm-a', ways={0: 10, 1: 10})],
             1)


def test_pseudo_locked_regions_are_avoided_like_exclusive_groups():
    locked = Group('plr', {0: CBM(0x003, W)}, mode='pseudo-locked')
    result = plan(gold(), [root(0x7fc), locked], [], 2)
    assert not result.l3[''][0].overlaps(CBM(0x003, W))


def test_a_mkdir_the_kernel_would_refuse_is_refused_before_any_write():
    # A foreign exclusive group at ways 1-2 leaves way 0 alone: with
    # min_cbm_bits = 2 the kernel's initial mask for any new group is one
    # way, "No space on L3:0".
    plat = gold(min_cbm_bits=2)
    groups = [root(0x7f8), Group('COS1', both(0x6), mode='exclusive')]
    with pytest.raises(AllocationError, match='refuse mkdir of ovsrdt-vm-a.*'
                       'No space on L3:0.*nothing was changed'):
        plan(plat, groups, [Request('ovsrdt-vm-a', ways={0: 2, 1: 2})], 2)


def test_uncapped_groups_write_no_mb_line():
    groups = [root(0x07f),
              Group('ovsrdt-vm-a', both(0x600), {0: 100, 1: 100},
                    'exclusive'),
              Group('ovsrdt-vm-b', both(0x180), {0: 50, 1: 50}, 'exclusive')]
    # a goes, b grows into its ways: b's capped MB line goes with its L3.
    result = plan(gold(), groups, [
        Request('ovsrdt-vm-b', ways={0: 3, 1: 3}, mb_percent=50)], 2)
    lines = {s.group: s.value for s in result.steps if s.op == 'schemata'}
    assert lines == {'ovsrdt-vm-b': 'L3:0=380;1=380\nMB:0=50;1=50\n'}
    result = plan(gold(), groups[:2], [
        Request('ovsrdt-vm-a', ways={0: 3, 1: 3})], 2)
    lines = {s.group: s.value for s in result.steps if s.op == 'schemata'}
    assert lines == {'ovsrdt-vm-a': 'L3:0=700;1=700\n',
                     '': 'L3:0=ff;1=ff\n'}


def test_follower_has_no_position_to_keep():
    # system_l3_cbm = 600 (the top ways).  vm-a is pinned to domain 0, so
    # on domain 1 it follows the default group (mask 600).  Un-pinning it
    # places it like a new group there: vm-b, already placed, stays.
    sysmask = both(0x600)
    groups = [root(0x600),
              Group('ovsrdt-vm-a', {0: CBM(0x180, W), 1: CBM(0x600, W)}),
              Group('ovsrdt-vm-b', {0: CBM(0x070, W), 1: CBM(0x1c0, W)})]
    result = plan(gold(), groups, [
        Request('ovsrdt-vm-a', ways={0: 2, 1: 2}),
        Request('ovsrdt-vm-b', ways={0: 3, 1: 3})], 2, system_cbm=sysmask)
    assert result.l3['ovsrdt-vm-b'] == {0: CBM(0x070, W), 1: CBM(0x1c0, W)}
    assert result.l3['ovsrdt-vm-a'] == {0: CBM(0x180, W), 1: CBM(0x030, W)}


def test_platform_is_read_again_when_the_domains_change(tmp_path):
    # A long-running agent keeps one Resctrl: when a socket's CPUs go
    # offline its cache domain leaves the schemata, and plans must not
    # name it any more.
    make_tree(str(tmp_path / 'rc'), domains=(0, 1))
    rc = FakeKernelTree(str(tmp_path / 'rc'))
    mgr = CacheManager(rc, Settings.defaults(
        allocation={'system_min_ways': 2}))
    assert mgr.preview().l3[''].keys() == {0, 1}
    with open(os.path.join(str(tmp_path / 'rc'), 'schemata'), 'w') as fh:
        fh.write('L3:0=7ff\nMB:0=100\n')
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 2}))
    assert rc.platform().domains == (0,)
    assert {d: str(m) for d, m in rc.group('ovsrdt-vm-a').l3.items()} == \
        {0: '600'}


def test_platform_is_read_again_when_io_alloc_is_switched_on(tmp_path):
    """io_alloc starts disabled and is enabled at run time: a running agent
    must then keep its groups off the I/O ways and count its CLOSID.
    """
    root = str(tmp_path / 'rc')
    make_tree(root, cbm_len=16, closids=16)
    with open(os.path.join(root, 'info/L3/io_alloc'), 'w') as fh:
        fh.write('disabled\n')
    rc = FakeKernelTree(root)
    mgr = CacheManager(rc, Settings.defaults(
        allocation={'system_min_ways': 2}))
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 2, 1: 2}))
    assert rc.platform().num_closids == 8
    for name, text in (('io_alloc', 'enabled\n'),
                       ('io_alloc_cbm', '0=c000;1=c000\n')):
        with open(os.path.join(root, 'info/L3', name), 'w') as fh:
            fh.write(text)
    mgr.allocate(Request('ovsrdt-vm-b', ways={0: 2, 1: 2}))
    plat = rc.platform()
    assert plat.io_alloc == 'enabled' and plat.num_closids == 7
    for name in ('ovsrdt-vm-a', 'ovsrdt-vm-b'):
        for mask in rc.group(name).l3.values():
            assert not mask.value & 0xc000, (name, mask)


def test_platform_is_read_again_after_a_cdp_remount(tmp_path):
    import shutil

    from tests.unit.test_platforms import cdp_tree
    root = str(tmp_path / 'rc')
    make_tree(root)
    rc = FakeKernelTree(root)
    mgr = CacheManager(rc, Settings.defaults(
        allocation={'system_min_ways': 2}))
    mgr.preview()
    assert not rc.platform().cdp
    shutil.rmtree(root)                     # umount; mount -o cdp
    cdp_tree(root)
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 2, 1: 2}))
    assert rc.platform().cdp
    with open(rc.path('ovsrdt-vm-a', 'schemata')) as fh:
        text = fh.read()
    assert 'L3CODE:' in text and 'L3DATA:' in text


def test_pool_mb_percent_out_of_range_names_the_option(tmp_path):
    make_tree(str(tmp_path / 'rc'))
    rc = FakeKernelTree(str(tmp_path / 'rc'))
    settings = Settings.defaults(allocation={'system_min_ways': 2},
                                 pools={'p': {'l3_ways': 1,
                                              'mb_percent': 5}})
    # The one rule every surface uses (ovs_rdt.inputs.request.check_mb).
    with pytest.raises(Exception, match=r"^\[pool:p\] mb_percent: '5' is "
                       r"below this host's minimum memory bandwidth, 10%$"):
        CacheManager(rc, settings).apply()


def test_isolated_groups_pack_away_from_io_ways_so_none_are_stranded():
    # DDIO-style shareable_bits at the top: VMs pack from the bottom so the
    # default group's run reaches into the I/O ways, and 8 of 9 fit.
    plat = Platform(11, 16, (0,), shareable_bits=0x600)
    root = Group('', {0: CBM(0x7ff, 11)})
    result = plan(plat, [root], [Request('ovsrdt-vm-a', ways={0: 8})], 3)
    assert result.l3['ovsrdt-vm-a'][0] == CBM(0x0ff, 11)
    assert result.l3[''][0] == CBM(0x700, 11)
    # Without I/O ways nothing changes: packed from the top.
    plain = plan(Platform(11, 16, (0,)), [root],
                 [Request('ovsrdt-vm-a', ways={0: 8})], 3)
    assert plain.l3['ovsrdt-vm-a'][0] == CBM(0x7f8, 11)
