"""What ovs-rdt writes on each platform (issue 14), and what it refuses.

CDP: ``L3CODE``/``L3DATA`` lines, ways counted from both.  MB values in the
platform's unit: percent (Intel), MiB/s (``mba_MBps``), 1/8 GB/s (AMD); the
other kind of cap refused by the one rule, with the same message on every
surface.  io_alloc: ways isolated groups and the system's floor avoid.
"""
from __future__ import annotations

import os

import pytest

from ovs_rdt.agent import knobs
from ovs_rdt.conf import Settings
from ovs_rdt.core.allocator import plan
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Group, Platform, Request
from ovs_rdt.exceptions import ConfigError, InsufficientWays, InvalidValue
from ovs_rdt import manager
from ovs_rdt.manager import CacheManager
from tests.unit.fakes import FakeKernelTree
from tests.unit import test_hook
from tests.unit.test_hook import GROUP, one_line, rdt, xml
from tests.unit.test_platforms import amd_tree, cdp_tree, put

MBPS_KIND = 'MB values are MiB/s (resctrl is mounted with mba_MBps)'
AMD_KIND = ('MB values are AMD bandwidth limits in 1/8 GB/s '
            '(info/MB/delay_linear is 0)')
PCT_KIND = 'MB values are percentages (resctrl is mounted without mba_MBps)'


node = test_hook.node       # the hook's fixture: a node with a fake tree


def settings(**pools):
    return Settings.defaults(allocation={'system_min_ways': 2}, pools=pools)


def mbps_tree(root: str) -> None:
    """Intel MBA mounted ``-o mba_MBps`` (6.14+: ``mba_MBps_event``)."""
    from tests.unit.fakes import make_tree
    make_tree(root)
    put(root, 'schemata', 'MB:0=4294967295;1=4294967295\nL3:0=7ff;1=7ff\n')
    put(root, 'mba_MBps_event', 'mbm_local_bytes\n')


def schemata(rc, name):
    return rc.read(rc.path(name, 'schemata'))


# -- CDP -----------------------------------------------------------------------
def test_cdp_groups_get_code_and_data_lines(tmp_path):
    root = str(tmp_path / 'rc')
    cdp_tree(root, mba=False)
    rc = FakeKernelTree(root)
    result = CacheManager(rc, settings(hp={'l3_ways': 3, 'isolated': True})
                          ).apply()
    text = schemata(rc, 'ovsrdt-pool-hp')
    assert 'L3CODE:0=700;1=700\nL3DATA:0=700;1=700\n' in text
    assert 'L3:' not in text.replace('L3CODE:', '').replace('L3DATA:', '')
    assert all('L3:' not in s.value.replace('CODE:', '').replace('DATA:', '')
               for s in result.steps if s.op == 'schemata')
    grp = rc.group('ovsrdt-pool-hp')
    assert grp.l3code == grp.l3data == {0: CBM(0x700, 11), 1: CBM(0x700, 11)}
    # The default group too, and a second apply writes nothing.
    assert rc.group('').l3code == rc.group('').l3data
    assert CacheManager(rc, settings(hp={'l3_ways': 3, 'isolated': True})
                        ).apply().steps == []


def test_cdp_a_way_used_by_code_or_data_is_used(tmp_path):
    root = str(tmp_path / 'rc')
    cdp_tree(root, mba=False)
    os.mkdir(os.path.join(root, 'COS1'))
    # pqos-style class: data in the top way, code in the next one down.
    put(root, 'COS1/schemata', 'L3DATA:0=400;1=400\nL3CODE:0=200;1=200\n')
    put(root, 'COS1/mode', 'shareable\n')
    put(root, 'schemata', 'L3DATA:0=1ff;1=1ff\nL3CODE:0=1ff;1=1ff\n')
    rc = FakeKernelTree(root)
    CacheManager(rc, settings(hp={'l3_ways': 2, 'isolated': True})).apply()
    hp = rc.group('ovsrdt-pool-hp').l3
    assert not hp[0].overlaps(CBM(0x600, 11))     # neither code nor data
    assert hp[0] == CBM(0x180, 11)


def test_cdp_split_group_of_ours_is_rewritten(tmp_path):
    root = str(tmp_path / 'rc')
    cdp_tree(root, mba=False)
    rc = FakeKernelTree(root)
    cfg = settings(hp={'l3_ways': 3})
    CacheManager(rc, cfg).apply()
    put(root, 'ovsrdt-pool-hp/schemata',
        'L3DATA:0=700;1=700\nL3CODE:0=400;1=700\n')
    steps = CacheManager(rc, cfg).apply().steps
    assert [s.group for s in steps] == ['ovsrdt-pool-hp']
    assert rc.group('ovsrdt-pool-hp').l3code[0] == CBM(0x700, 11)


# -- mba_MBps --------------------------------------------------------------------
def test_mba_mbps_writes_mibps_and_never_caps_at_100(tmp_path):
    root = str(tmp_path / 'rc')
    mbps_tree(root)
    rc = FakeKernelTree(root)
    cfg = settings(hp={'l3_ways': 3, 'mb_mbps': 2500}, noisy={'l3_ways': 1})
    CacheManager(rc, cfg).apply()
    assert rc.group('ovsrdt-pool-hp').mb == {0: 2500, 1: 2500}
    # An uncapped group keeps MBA_MAX_MBPS; resizing it rewrites no MB:100
    # (100 MiB/s would throttle it).
    cfg = settings(hp={'l3_ways': 3, 'mb_mbps': 2500}, noisy={'l3_ways': 2})
    steps = CacheManager(rc, cfg).apply().steps
    assert all('MB:' not in s.value for s in steps
               if s.group == 'ovsrdt-pool-noisy')
    assert rc.group('ovsrdt-pool-noisy').mb in ({}, {0: 4294967295,
                                                     1: 4294967295})
    # Lifting the cap writes the platform's maximum.
    cfg = settings(hp={'l3_ways': 3}, noisy={'l3_ways': 2})
    CacheManager(rc, cfg).apply()
    assert rc.group('ovsrdt-pool-hp').mb == {0: 4294967295, 1: 4294967295}


def test_mba_mbps_refuses_a_pool_percentage(tmp_path):
    mbps_tree(str(tmp_path / 'rc'))
    rc = FakeKernelTree(str(tmp_path / 'rc'))
    with pytest.raises(ConfigError) as err:
        CacheManager(rc, settings(hp={'l3_ways': 3, 'mb_percent': 50})).apply()
    assert str(err.value) == (
        "[pool:hp] mb_percent: '50' cannot be met on this host: %s; give "
        '[pool:hp] mb_mbps instead' % MBPS_KIND)


def test_percent_host_refuses_a_pool_bandwidth(tmp_path):
    from tests.unit.fakes import make_tree
    make_tree(str(tmp_path / 'rc'))
    rc = FakeKernelTree(str(tmp_path / 'rc'))
    with pytest.raises(ConfigError) as err:
        CacheManager(rc, settings(hp={'l3_ways': 3, 'mb_mbps': 800})).apply()
    assert str(err.value) == (
        "[pool:hp] mb_mbps: '800' cannot be met on this host: %s; give "
        '[pool:hp] mb_percent instead' % PCT_KIND)


def test_pool_with_both_caps_refused(tmp_path):
    mbps_tree(str(tmp_path / 'rc'))
    rc = FakeKernelTree(str(tmp_path / 'rc'))
    with pytest.raises(ConfigError, match=r'^\[pool:hp\] mb_percent and '
                       r'\[pool:hp\] mb_mbps exclude each other'):
        CacheManager(rc, settings(hp={'l3_ways': 3, 'mb_percent': 50,
                                      'mb_mbps': 9})).apply()


def test_cdp_pool_with_its_own_code_and_data_masks(tmp_path):
    root = str(tmp_path / 'rc')
    cdp_tree(root, mba=False)
    rc = FakeKernelTree(root)
    pools = {'hp': {'l3_code_cbm': '300', 'l3_data_cbm': '7f0',
                    'isolated': True},
             'noisy': {'l3_ways': 2}}
    CacheManager(rc, settings(**pools)).apply()
    text = schemata(rc, 'ovsrdt-pool-hp')
    assert 'L3CODE:0=300;1=300\nL3DATA:0=7f0;1=7f0\n' in text
    grp = rc.group('ovsrdt-pool-hp')
    assert grp.l3 == {0: CBM(0x7f0, 11), 1: CBM(0x7f0, 11)}   # both count
    for dom, mask in rc.group('ovsrdt-pool-noisy').l3.items():
        assert not mask.overlaps(CBM(0x7f0, 11)), dom
    # Held: a second apply writes nothing (no "equal masks" rewrite).
    assert CacheManager(rc, settings(**pools)).apply().steps == []
    # Back to one mask: both lines get it.
    pools['hp'] = {'l3_cbm': '7f0', 'isolated': True}
    CacheManager(rc, settings(**pools)).apply()
    grp = rc.group('ovsrdt-pool-hp')
    assert grp.l3code == grp.l3data == {0: CBM(0x7f0, 11), 1: CBM(0x7f0, 11)}


def test_cdp_split_masks_undone_exactly(tmp_path, monkeypatch):
    from ovs_rdt.exceptions import ResctrlError

    monkeypatch.setattr(manager, 'SETTLE', 0)      # (no second plan)

    class Refusing(FakeKernelTree):
        refuse = False

        def write(self, path, value):
            if self.refuse and path.endswith('/mode'):
                raise ResctrlError(path, value, 22, None, 'Invalid argument')
            super().write(path, value)

    root = str(tmp_path / 'rc')
    cdp_tree(root, mba=False)
    rc = Refusing(root)
    pools = {'hp': {'l3_code_cbm': '300', 'l3_data_cbm': '7f0'}}
    CacheManager(rc, settings(**pools)).apply()
    before = schemata(rc, 'ovsrdt-pool-hp')
    rc.refuse = True
    pools['hp'] = {'l3_code_cbm': '700', 'l3_data_cbm': '7f0',
                   'isolated': True}
    with pytest.raises(ResctrlError):
        CacheManager(rc, settings(**pools)).apply()
    assert schemata(rc, 'ovsrdt-pool-hp') == before


@pytest.mark.parametrize('pool, message', [
    ({'l3_code_cbm': '300'}, "[pool:hp] l3_code_cbm needs l3_data_cbm too: "
     'a code and a data mask'),
    ({'l3_code_cbm': '300', 'l3_data_cbm': '7f0', 'l3_ways': 2},
     '[pool:hp] sets both l3_ways and l3_code_cbm; choose one'),
    ({'l3_code_cbm': '600', 'l3_data_cbm': '00c'},
     '[pool:hp] l3_code_cbm 600 and l3_data_cbm c on domain 0 together '
     'are not one run of ways (60c): the pool holds the ways either uses'),
    ({'l3_code_cbm': '0=300', 'l3_data_cbm': '300'},
     '[pool:hp] l3_code_cbm and l3_data_cbm must name the same cache domains '
     '(domain 1 is in one only)'),
])
def test_cdp_split_masks_refused(tmp_path, pool, message):
    cdp_tree(str(tmp_path / 'rc'), mba=False)
    rc = FakeKernelTree(str(tmp_path / 'rc'))
    with pytest.raises(ConfigError) as err:
        CacheManager(rc, settings(hp=pool)).apply()
    assert str(err.value) == message
    assert 'ovsrdt-pool-hp' not in rc.group_names()


def test_split_masks_refused_without_cdp(tmp_path):
    from tests.unit.fakes import make_tree
    make_tree(str(tmp_path / 'rc'))
    rc = FakeKernelTree(str(tmp_path / 'rc'))
    with pytest.raises(ConfigError) as err:
        CacheManager(rc, settings(hp={'l3_code_cbm': '300',
                                      'l3_data_cbm': '7f0'})).apply()
    assert str(err.value) == (
        "[pool:hp] l3_code_cbm: '300' needs resctrl mounted with -o cdp "
        '(this host has one L3 mask per group: use l3_cbm)')


# -- mba_MBps_event ------------------------------------------------------------
def events_tree(root: str, features: str = 'llc_occupancy mbm_total_bytes '
                'mbm_local_bytes') -> None:
    mbps_tree(root)
    put(root, 'info/L3_MON/mon_features', features.replace(' ', '\n') + '\n')


def test_pool_mb_event_is_written_kept_and_shown(tmp_path):
    root = str(tmp_path / 'rc')
    events_tree(root)
    rc = FakeKernelTree(root)
    pools = {'hp': {'l3_ways': 3, 'mb_mbps': 2500,
                    'mb_event': 'mbm_total_bytes'},
             'noisy': {'l3_ways': 1}}
    steps = CacheManager(rc, settings(**pools)).apply().steps
    assert ('event', 'ovsrdt-pool-hp', 'mbm_total_bytes') in steps
    # The pool that asks for nothing keeps the kernel's choice.
    assert not [s for s in steps if s.op == 'event' and
                s.group == 'ovsrdt-pool-noisy']
    assert rc.read(rc.path('ovsrdt-pool-hp', 'mba_MBps_event')) == \
        'mbm_total_bytes\n'
    assert rc.group('ovsrdt-pool-hp').mb_event == 'mbm_total_bytes'
    assert rc.group('ovsrdt-pool-noisy').mb_event == 'mbm_local_bytes'
    # Held: a second apply writes nothing; a changed event one write.
    assert CacheManager(rc, settings(**pools)).apply().steps == []
    pools['hp']['mb_event'] = 'mbm_local_bytes'
    assert CacheManager(rc, settings(**pools)).apply().steps == [
        ('event', 'ovsrdt-pool-hp', 'mbm_local_bytes')]
    # Shown with the cap.
    from ovs_rdt.cmd import report
    plan = report.build(rc.platform(), rc.groups(), lambda g: [])
    row = next(r for r in plan['domains'][0]['groups']
               if r['group'] == 'ovsrdt-pool-hp')
    assert row['mb_event'] == 'mbm_local_bytes'
    assert row['mb_text'] == 'MB 2500 MiB/s of mbm_local_bytes'
    assert "software controller" in report.render(plan)


def test_pool_mb_event_refused_without_mba_mbps(tmp_path):
    from tests.unit.fakes import make_tree
    make_tree(str(tmp_path / 'rc'))
    rc = FakeKernelTree(str(tmp_path / 'rc'))
    with pytest.raises(ConfigError) as err:
        CacheManager(rc, settings(hp={'l3_ways': 3,
                                      'mb_event': 'mbm_total_bytes'})).apply()
    assert str(err.value) == (
        "[pool:hp] mb_event: 'mbm_total_bytes' cannot be met on this host: "
        '%s; the event only applies where resctrl is mounted with '
        '"-o mba_MBps"' % PCT_KIND)
    assert 'ovsrdt-pool-hp' not in rc.group_names()


def test_pool_mb_event_refused_where_not_counted(tmp_path):
    events_tree(str(tmp_path / 'rc'), 'llc_occupancy mbm_total_bytes')
    rc = FakeKernelTree(str(tmp_path / 'rc'))
    with pytest.raises(ConfigError) as err:
        CacheManager(rc, settings(hp={'l3_ways': 3,
                                      'mb_event': 'mbm_local_bytes'})).apply()
    assert str(err.value) == (
        "[pool:hp] mb_event: 'mbm_local_bytes' cannot be met on this host: "
        'L3 monitoring does not count it (info/L3_MON/mon_features: '
        'llc_occupancy mbm_total_bytes)')


def test_pool_mb_event_refused_before_linux_6_14(tmp_path):
    """mba_MBps told by the mount options only (no mba_MBps_event file):
    the kernel has no event to choose; refused, not failed at every write.
    """
    from tests.unit.fakes import make_tree
    root = str(tmp_path / 'rc')
    make_tree(root)
    put(root, 'schemata', 'MB:0=4294967295;1=4294967295\nL3:0=7ff;1=7ff\n')
    mounts = tmp_path / 'mounts'
    mounts.write_text('resctrl %s resctrl rw,mba_MBps 0 0\n'
                      % os.path.realpath(root))
    rc = FakeKernelTree(root, mounts=str(mounts))
    with pytest.raises(ConfigError) as err:
        CacheManager(rc, settings(hp={'l3_ways': 3, 'mb_mbps': 900,
                                      'mb_event': 'mbm_total_bytes'})
                     ).apply()
    assert str(err.value) == (
        "[pool:hp] mb_event: 'mbm_total_bytes' cannot be met on this host: "
        'its kernel has no mba_MBps_event (Linux 6.14 and later choose the '
        'event; before, the controller follows mbm_local_bytes)')
    # Without mb_event the pool's cap is written as MiB/s all the same.
    CacheManager(rc, settings(hp={'l3_ways': 3, 'mb_mbps': 900})).apply()
    assert rc.group('ovsrdt-pool-hp').mb == {0: 900, 1: 900}


def test_mba_mbps_remount_before_linux_6_14_is_seen(tmp_path):
    """No mba_MBps_event to tell it: the mount options are compared."""
    from ovs_rdt.core.model import UNIT_MBPS, UNIT_PERCENT
    from tests.unit.fakes import make_tree
    root = str(tmp_path / 'rc')
    make_tree(root)
    mounts = tmp_path / 'mounts'
    mounts.write_text('resctrl %s resctrl rw 0 0\n' % os.path.realpath(root))
    rc = FakeKernelTree(root, mounts=str(mounts))
    mgr = CacheManager(rc, settings())
    mgr.preview()
    assert rc.platform().mb.unit == UNIT_PERCENT
    mounts.write_text('resctrl %s resctrl rw,mba_MBps 0 0\n'
                      % os.path.realpath(root))
    put(root, 'schemata', 'MB:0=4294967295;1=4294967295\nL3:0=7ff;1=7ff\n')
    mgr.preview()
    assert rc.platform().mb.unit == UNIT_MBPS


def test_a_refused_event_write_undoes_the_plan(tmp_path, monkeypatch):
    from ovs_rdt.exceptions import ResctrlError

    monkeypatch.setattr(manager, 'SETTLE', 0)      # (no second plan)

    class Refusing(FakeKernelTree):
        def write(self, path, value):
            if path.endswith('mba_MBps_event') and 'total' in value:
                raise ResctrlError(path, value, 22, None, 'Invalid argument')
            super().write(path, value)

    root = str(tmp_path / 'rc')
    events_tree(root)
    rc = Refusing(root)
    pools = {'hp': {'l3_ways': 3, 'mb_mbps': 2500,
                    'mb_event': 'mbm_local_bytes'}}
    CacheManager(rc, settings(**pools)).apply()
    before = rc.read(rc.path('ovsrdt-pool-hp', 'schemata'))
    pools['hp'].update(l3_ways=4, mb_event='mbm_total_bytes')
    with pytest.raises(ResctrlError):
        CacheManager(rc, settings(**pools)).apply()
    assert rc.read(rc.path('ovsrdt-pool-hp', 'schemata')) == before
    assert rc.group('ovsrdt-pool-hp').mb_event == 'mbm_local_bytes'


def test_plan_writes_an_event_only_where_it_differs():
    from ovs_rdt.core.model import MBInfo, UNIT_MBPS
    platform = Platform(11, 16, (0,), mb=MBInfo(0, 1, True, (0,), UNIT_MBPS),
                        mon_features=('mbm_total_bytes', 'mbm_local_bytes'))
    root = Group('', {0: CBM(0xff, 11)})
    have = Group('ovsrdt-pool-a', {0: CBM(0x700, 11)},
                 mb_event='mbm_total_bytes')
    reqs = [Request('ovsrdt-pool-a', ways={0: 3},
                    mb_event='mbm_total_bytes'),
            Request('ovsrdt-pool-b', ways={0: 1}, mb_event='mbm_total_bytes'),
            Request('ovsrdt-pool-c', ways={0: 1})]
    steps = plan(platform, [root, have], reqs).steps
    assert [s for s in steps if s.op == 'event'] == [
        ('event', 'ovsrdt-pool-b', 'mbm_total_bytes')]
    assert steps.index(('mkdir', 'ovsrdt-pool-b', '')) < \
        steps.index(('event', 'ovsrdt-pool-b', 'mbm_total_bytes'))


# -- AMD -----------------------------------------------------------------------
def test_amd_caps_in_eighths_of_gbps(tmp_path):
    root = str(tmp_path / 'rc')
    amd_tree(root, domains=(0, 1))
    rc = FakeKernelTree(root)
    CacheManager(rc, settings(hp={'l3_ways': 3, 'mb_mbps': 1000})).apply()
    assert rc.group('ovsrdt-pool-hp').mb == {0: 9, 1: 9}
    text = schemata(rc, 'ovsrdt-pool-hp')
    assert 'SMBA' not in text.split('MB:')[-1]   # SMBA never written
    CacheManager(rc, settings(hp={'l3_ways': 3})).apply()
    assert rc.group('ovsrdt-pool-hp').mb == {0: 2048, 1: 2048}


def test_amd_refuses_percentages(tmp_path):
    amd_tree(str(tmp_path / 'rc'), domains=(0, 1))
    rc = FakeKernelTree(str(tmp_path / 'rc'))
    with pytest.raises(ConfigError) as err:
        CacheManager(rc, settings(hp={'l3_ways': 3, 'mb_percent': 50})).apply()
    assert str(err.value) == (
        "[pool:hp] mb_percent: '50' cannot be met on this host: %s; give "
        '[pool:hp] mb_mbps instead' % AMD_KIND)


def test_kept_group_keeps_its_bandwidth_cap(tmp_path):
    """A VM group found capped (no request at hand) keeps that cap."""
    root = str(tmp_path / 'rc')
    amd_tree(root, domains=(0, 1))
    rc = FakeKernelTree(root)
    mgr = CacheManager(rc, settings())
    mgr.allocate(Request(GROUP, ways={0: 2, 1: 2}, mb_mbps=1000))
    assert rc.group(GROUP).mb == {0: 9, 1: 9}
    mgr.apply()                                   # the VM group is kept
    assert rc.group(GROUP).mb == {0: 9, 1: 9}


# -- the same refusal on every node surface ---------------------------------------
@pytest.mark.parametrize('field, value, accepts, kind, hint', [
    ('mb_percent', '50', 'mb_mbps', MBPS_KIND, 'mb_mbps'),
    ('mb_percent', '50', 'mb_mbps', AMD_KIND, 'mb_mbps'),
    ('mb_mbps', '800', 'mb_percent', PCT_KIND, 'mb_percent'),
])
def test_knobs_refuse_the_other_kind(field, value, accepts, kind, hint):
    key = {'mb_percent': knobs.KEY_MB, 'mb_mbps': knobs.KEY_MB_MBPS}
    with pytest.raises(InvalidValue) as err:
        knobs.parse({knobs.KEY_WAYS: '2', key[field]: value}, (), 11, 10,
                    accepts, kind)
    assert str(err.value) == (
        "other_config:%s: '%s' cannot be met on this host: %s; give "
        'other_config:%s instead' % (key[field], value, kind, key[hint]))


def test_knobs_take_mbps_on_mbps_hosts():
    got = knobs.parse({knobs.KEY_WAYS: '2', knobs.KEY_MB_MBPS: '0800'}, (),
                      11, 10, 'mb_mbps', MBPS_KIND)
    assert (got.ways, got.mb_mbps, got.mb_percent) == (2, 800, None)


def test_hook_refuses_a_percentage_on_mba_mbps(node, capsys):
    put(node.root, 'schemata', 'MB:0=4294967295;1=4294967295\n'
        'L3:0=7ff;1=7ff\n')
    put(node.root, 'mba_MBps_event', 'mbm_local_bytes\n')
    assert node.run(xml(rdt('<rdt:l3 ways="2"/><rdt:mb percent="50"/>'))) == 1
    assert ("<rdt:mb percent>: '50' cannot be met on this host: %s; give "
            '<rdt:mb mbps> instead' % MBPS_KIND) in one_line(capsys.readouterr())


def test_hook_caps_in_mibps_on_mba_mbps(node):
    put(node.root, 'schemata', 'MB:0=4294967295;1=4294967295\n'
        'L3:0=7ff;1=7ff\n')
    put(node.root, 'mba_MBps_event', 'mbm_local_bytes\n')
    assert node.run(xml(rdt('<rdt:l3 ways="2"/><rdt:mb mbps="3000"/>'))) == 0
    assert node.rc().group(GROUP).mb == {0: 3000, 1: 3000}


def test_hook_refuses_a_bandwidth_on_percent_hosts(node, capsys):
    assert node.run(xml(rdt('<rdt:l3 ways="2"/><rdt:mb mbps="3000"/>'))) == 1
    assert ("<rdt:mb mbps>: '3000' cannot be met on this host: %s; give "
            '<rdt:mb percent> instead' % PCT_KIND) in \
        one_line(capsys.readouterr())


# -- io_alloc -----------------------------------------------------------------
def io_platform(io: int, width: int = 8) -> Platform:
    return Platform(width, 16, (0,), io_alloc='enabled',
                    io_alloc_cbm={0: CBM(io, width)})


def root_group(width: int = 8) -> Group:
    return Group('', {0: CBM.full(width)})


def test_isolated_groups_avoid_io_ways():
    result = plan(io_platform(0xc0), [root_group()],
                  [Request('ovsrdt-pool-hp', ways={0: 3})], system_min_ways=1)
    # Like shareable_bits: the pool packs away from them, and the default
    # group's run reaches into them (nothing stranded).
    assert result.l3['ovsrdt-pool-hp'][0] == CBM(0x7, 8)
    assert result.l3[''][0] == CBM(0xf8, 8)


def test_shared_groups_may_use_io_ways():
    result = plan(io_platform(0xc0), [root_group()],
                  [Request('ovsrdt-pool-n', ways={0: 3}, exclusive=False)],
                  system_min_ways=1)
    assert result.l3['ovsrdt-pool-n'][0] == CBM(0xe0, 8)


def test_the_system_floor_is_not_met_with_io_ways():
    # Ways 0-1 are I/O's: 5 isolated ways would leave the default group
    # 0x7, of which only one way is not I/O's, below its floor of 2.
    with pytest.raises(InsufficientWays, match='only 4 of 8 are free'):
        plan(io_platform(0x3), [root_group()],
             [Request('ovsrdt-pool-hp', ways={0: 5})], system_min_ways=2)
    result = plan(io_platform(0x3), [root_group()],
                  [Request('ovsrdt-pool-hp', ways={0: 4})], system_min_ways=2)
    assert result.l3[''][0] == CBM(0xf, 8)
    assert result.free[0] == 0


def test_explicit_isolated_mask_over_io_ways_refused():
    from ovs_rdt.exceptions import InvalidMask
    with pytest.raises(InvalidMask, match=r'io_alloc_cbm c0'):
        plan(io_platform(0xc0), [root_group()],
             [Request('ovsrdt-pool-hp', cbm={0: CBM(0x80, 8)})])
