import pytest

from ovs_rdt.conf import Settings
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Group, Request
from ovs_rdt.exceptions import ConfigError, InsufficientWays, ResctrlError
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
    plat = rc.platform()
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

    def refuse(name, mode):
        raise ResctrlError(rc.path(name, 'mode'), mode, 22,
                           'Schemata overlaps')

    monkeypatch.setattr(rc, 'write_mode', refuse)
    with pytest.raises(ResctrlError, match='Schemata overlaps'):
        mgr.apply()
    assert rc.group_names() == ['']
    assert masks(rc, '') == {0: '7ff', 1: '7ff'}


def test_pool_config_errors_name_the_option(rc):
    bad = table4(hp={'l3_ways': 3, 'l3_cbm': '7'})
    with pytest.raises(ConfigError, match=r'\[pool:hp\] sets both'):
        CacheManager(rc, bad).apply()
    bad = table4(hp={'l3_cbm': '0=7f0;5=3'})
    with pytest.raises(ConfigError, match=r"\[pool:hp\] l3_cbm: '0=7f0;5=3' "
                       'names cache domain 5, which this platform lacks'):
        CacheManager(rc, bad).apply()
    bad = table4(hp={'l3_cbm': '505'})
    with pytest.raises(ConfigError, match=r'\[pool:hp\] l3_cbm 505 is not '
                       'contiguous'):
        CacheManager(rc, bad).apply()
    bad = table4(hp={})
    with pytest.raises(ConfigError, match=r'needs l3_ways, l3_cbm or '
                       r'\(under CDP\) l3_code_cbm and l3_data_cbm'):
        CacheManager(rc, bad).apply()


def test_unconfigured_pool_kept_by_allocate_removed_by_apply(rc):
    CacheManager(rc, table4(old={'l3_ways': 2})).apply()
    mgr = CacheManager(rc, table4())
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 1, 1: 1}))
    assert 'ovsrdt-pool-old' in rc.group_names()
    mgr.apply()
    assert 'ovsrdt-pool-old' not in rc.group_names()
    assert 'ovsrdt-vm-a' in rc.group_names()


def test_release_frees_the_group_when_the_rest_no_longer_fits(rc):
    """Freeing never fails for want of room: the pools grew in the
    configuration past what fits, and a VM stops before any apply.
    """
    mgr = CacheManager(rc, table4(hp={'l3_ways': 7, 'isolated': True}))
    mgr.apply()
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 1}))
    hp = masks(rc, 'ovsrdt-pool-hp')
    grown = CacheManager(rc, table4(hp={'l3_ways': 10, 'isolated': True}))
    # previewed as it is made (an incoming migration's check)
    preview = grown.preview(remove='ovsrdt-vm-a')
    assert 'ovsrdt-vm-a' in rc.group_names()
    plan = grown.release('ovsrdt-vm-a')
    assert (preview.steps, preview.unplaced) == (plan.steps, plan.unplaced)
    assert 'ovsrdt-vm-a' not in rc.group_names()
    assert [tuple(s) for s in plan.steps] == [('rmdir', 'ovsrdt-vm-a', '')]
    assert 'ovsrdt-pool-hp needs 10 ways' in plan.unplaced
    assert masks(rc, 'ovsrdt-pool-hp') == hp
    # an allocation is still refused as a whole, changing nothing
    with pytest.raises(InsufficientWays):
        grown.allocate(Request('ovsrdt-vm-b', ways={0: 1}))
    assert 'ovsrdt-vm-b' not in rc.group_names()


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
    assert CacheManager.held_ways(vm, root) == {0: 2, 1: 2}
    assert CacheManager.existing_request(vm, root).ways == {0: 2, 1: 2}
    assert CacheManager.existing_request(pool, root).cbm == {1: CBM(0xc, 11)}
    from ovs_rdt.core.model import held_masks
    assert held_masks(vm, root) == {0: CBM(0x3, 11), 1: CBM(0xc, 11)}
