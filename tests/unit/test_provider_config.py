"""``ovs-rdt provider-config``: inventory arithmetic and the YAML it writes."""
from __future__ import annotations

import argparse
import os

import pytest
import yaml

from ovs_rdt.cmd import provider_config as pc
from ovs_rdt.conf import Settings
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import PMD_GROUP, Group, MBInfo, Platform, pool_group
from ovs_rdt import vm_group
from ovs_rdt.core.model import UNIT_AMD, UNIT_MBPS, UNIT_PERCENT
from ovs_rdt.exceptions import ConfigError
from ovs_rdt.manager import CacheManager
from tests.unit import fakes

W = 11


def cbm(value: int) -> CBM:
    return CBM(value, W)


def platform(**kw: object) -> Platform:
    args: dict = dict(cbm_len=W, num_closids=16, domains=(0, 1))
    args.update(kw)
    return Platform(**args)


def manager(system_min_ways: int, system_l3_cbm: str | None = None,
            pools: dict[str, int] | None = None) -> CacheManager:
    """The node's counting; ``pools``: name -> l3_ways configured."""
    return CacheManager(None, Settings.defaults(
        allocation={'system_min_ways': system_min_ways,
                    'system_l3_cbm': system_l3_cbm},
        pools={p: {'l3_ways': n} for p, n in (pools or {}).items()}))


def reserved_ways(plat: Platform, groups: list[Group], system_min_ways: int,
                  system_l3_cbm: str | None = None,
                  pools: dict[str, int] | None = None) -> dict[int, int]:
    """What provider-config reserves per domain (CacheManager.free_ways)."""
    free = manager(system_min_ways, system_l3_cbm, pools).free_ways(
        (plat, groups))
    return {d: f['reserved_ways'] for d, f in free.items()}


def inventory(plat: Platform, groups: list[Group], system_min_ways: int,
              pools: dict[str, int] | None = None,
              cache_groups: list[frozenset[int]] | None = None) -> dict:
    return pc.inventory(plat, groups, reserved_ways(
        plat, groups, system_min_ways, pools=pools), cache_groups)


def test_bare_node_reserves_the_system_minimum() -> None:
    groups = [Group('', {0: cbm(0x7ff), 1: cbm(0x7ff)})]
    inv = inventory(platform(), groups, system_min_ways=2)
    assert inv[pc.RC_WAYS] == {'total': 22, 'reserved': 4, 'min_unit': 1,
                               'max_unit': 18, 'step_size': 1,
                               'allocation_ratio': 1.0}
    assert inv[pc.RC_CLOSIDS] == {'total': 16, 'reserved': 1, 'min_unit': 1,
                                  'max_unit': 1, 'step_size': 1,
                                  'allocation_ratio': 1.0}


def test_pools_pmd_and_foreign_groups_are_reserved_vms_are_not() -> None:
    groups = [
        Group('', {0: cbm(0x00f), 1: cbm(0x03f)}),
        Group(pool_group('hp'), {0: cbm(0x030), 1: cbm(0x03f)}),  # 2 ways on 0
        Group(PMD_GROUP, {0: cbm(0x0c0), 1: cbm(0x0c0)}),        # 2 + 2
        Group('COS3', {0: cbm(0x600), 1: cbm(0x600)}),           # foreign
        Group(vm_group('5e3b0c43-0b0a-4a1e-9f53-6f2d8b6a1c11'),
              {0: cbm(0x100), 1: cbm(0x100)}),
    ]
    pools = {'hp': 2}
    per_dom = reserved_ways(platform(), groups, 2, pools=pools)
    # pool hp 2 (on domain 1 only once applied: a VM start keeps a pool
    # as it is) + pmd 2 + foreign 2 + system 2; the VM's way 0x100 is the
    # VMs': the PMD group and the VM move to make a run, as the allocator
    # does for a VM that needs one
    assert per_dom == {0: 8, 1: 6}
    free = manager(2, pools=pools).free_ways((platform(), groups))
    assert [free[d]['vm_ways'] for d in (0, 1)] == [2, 4]
    assert [free[d]['vm_held_ways'] for d in (0, 1)] == [1, 1]
    # What holds the reserve (issue 51 trial 9): one function's answer.
    assert free[0]['reserved_by'] == [
        ('system_min_ways', 2), ('ovsrdt-pool-hp', 2), (PMD_GROUP, 2),
        ("other tools' groups", 2)]
    # A pool no longer configured still counts: a VM start keeps it until
    # "apply" removes it (only apply changes pools).
    assert reserved_ways(platform(), groups, 2) == {0: 8, 1: 6}
    inv = inventory(platform(), groups, 2, pools)
    assert inv[pc.RC_WAYS]['reserved'] == 14
    assert inv[pc.RC_WAYS]['max_unit'] == 8
    assert inv[pc.RC_CLOSIDS]['reserved'] == 4   # root, pool, pmd, COS3


def test_overlapping_masks_count_once_and_cap_at_cbm_len() -> None:
    groups = [Group('', {0: cbm(0x003)}),
              Group('libvirt-a', {0: cbm(0x7f0)}),
              Group('libvirt-b', {0: cbm(0x7fc)})]
    per_dom = reserved_ways(platform(domains=(0,)), groups, 2)
    assert per_dom == {0: 11}
    inv = inventory(platform(domains=(0,)), groups, 2)
    assert inv[pc.RC_WAYS]['reserved'] == 11
    assert inv[pc.RC_WAYS]['max_unit'] == 1


def test_explicit_system_mask_and_min_cbm_bits() -> None:
    groups = [Group('', {0: cbm(0x00f)}), Group(PMD_GROUP, {0: cbm(0x00c)})]
    plat = platform(domains=(0,), min_cbm_bits=2)
    # the PMD mask overlaps the root's: it holds no ways of its own
    assert reserved_ways(plat, groups, 1) == {0: 2}
    assert reserved_ways(plat, groups, 1, '0=007') == {0: 3}
    assert inventory(plat, groups, 1)[pc.RC_WAYS]['min_unit'] == 2


def test_ways_count_per_cache_group_at_its_tightest_l3() -> None:
    """One unit is a way on every L3 of a cache group (EPYC: the CCDs of
    a NUMA node): a group has what its fullest L3 leaves.
    """
    plat = platform(domains=(0, 1, 2, 3))
    groups = [Group('', {d: cbm(0x1ff) for d in range(4)}),
              Group('COS1', {0: cbm(0x600), 1: cbm(0x400), 2: cbm(0x400),
                             3: cbm(0x400)})]    # another tool's class
    assert reserved_ways(plat, groups, 2) == {0: 4, 1: 3, 2: 3, 3: 3}
    inv = inventory(plat, groups, 2, cache_groups=[
        frozenset({0, 1}), frozenset({2, 3})])
    assert (inv[pc.RC_WAYS]['total'], inv[pc.RC_WAYS]['reserved'],
            inv[pc.RC_WAYS]['max_unit']) == (22, 4 + 3, 15)
    # each L3 its own group: the same as a domain count
    assert inventory(plat, groups, 2)[pc.RC_WAYS]['reserved'] == 13


def test_min_unit_is_at_least_one_on_amd() -> None:
    """AMD has min_cbm_bits 0 (empty masks allowed); Placement refuses an
    inventory whose min_unit is below 1, so nova-compute could not report
    the node's ways.
    """
    groups = [Group('', {0: cbm(0x7ff)})]
    plat = platform(domains=(0,), min_cbm_bits=0)
    assert inventory(plat, groups, 2)[pc.RC_WAYS]['min_unit'] == 1


def test_ways_shared_with_io_are_not_for_vms() -> None:
    """DDIO: shareable_bits 600; VMs' isolated groups cannot have them."""
    plat = platform(domains=(0,), shareable_bits=0x600)
    bare = [Group('', {0: cbm(0x7ff)})]
    # the default group keeps its minimum in the I/O ways
    assert reserved_ways(plat, bare, 1) == {0: 2}
    assert reserved_ways(plat, bare, 2) == {0: 2}
    # 3: the I/O ways and the one below them (VMs pack from the bottom,
    # away from the I/O ways, so none is stranded)
    assert reserved_ways(plat, bare, 3) == {0: 3}
    assert inventory(plat, bare, 3)[pc.RC_WAYS]['max_unit'] == 8


def test_a_shared_pool_may_have_the_ways_shared_with_io() -> None:
    """room(isolated=False): a pool with ``isolated = false`` may take
    the I/O ways an isolated group may not; the default group keeps its
    one way.
    """
    plat = platform(domains=(0,), shareable_bits=0x600)
    bare = [Group('', {0: cbm(0x7ff)})]
    assert manager(1).room((plat, bare)) == {0: 9}
    assert manager(1).room((plat, bare), isolated=False) == {0: 10}


def test_yaml_layout() -> None:
    doc = pc.document({'CUSTOM_X': {'total': 2, 'allocation_ratio': 1.0}},
                      ['CUSTOM_T'], name="it's")
    text = pc.to_yaml(doc, 'hello\n\nworld')
    assert text == '''\
# hello
#
# world
meta:
  schema_version: '1.0'
providers:
- identification:
    name: it's
  inventories:
    additional:
    - CUSTOM_X:
        total: 2
        allocation_ratio: 1.0
  traits:
    additional:
    - CUSTOM_T
'''
    assert yaml.safe_load(text) == doc
    # words YAML reads as booleans or null stay strings
    for word in ('yes', 'no', 'on', 'off', 'null', 'true', '1.0', '0x1'):
        assert yaml.safe_load(pc.to_yaml({'k': word})) == {'k': word}


def test_default_identification_and_traits() -> None:
    mba = MBInfo(10, 10, True, (0,))
    doc = pc.document({}, pc.traits_of(platform(mb=mba)))
    assert doc['providers'][0]['identification'] == {'uuid': '$COMPUTE_NODE'}
    assert doc['providers'][0]['traits'] == {
        'additional': ['CUSTOM_RDT_L3_CAT', 'CUSTOM_RDT_MBA',
                       'CUSTOM_RDT_MB_PERCENT']}
    assert pc.traits_of(platform()) == ['CUSTOM_RDT_L3_CAT']
    # a trait per configured pool, for pool flavors to require
    assert pc.traits_of(platform(), ['hp', 'noisy.v2']) == [
        'CUSTOM_RDT_L3_CAT', 'CUSTOM_RDT_POOL_HP', 'CUSTOM_RDT_POOL_NOISY_V2']
    # The kind of cap a host takes, so flavors can require it.
    for unit, delay_linear, kind in (
            (UNIT_MBPS, True, ['CUSTOM_RDT_MB_MBPS']),
            (UNIT_AMD, False, ['CUSTOM_RDT_MB_MBPS']),
            (UNIT_PERCENT, False, [])):      # non-linear: takes no cap
        mb = MBInfo(0, 1, delay_linear, (0,), unit)
        assert pc.traits_of(platform(mb=mb)) == \
            ['CUSTOM_RDT_L3_CAT', 'CUSTOM_RDT_MBA'] + kind


def _args(**kw: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    pc.add_arguments(parser)
    argv = []
    for key, value in kw.items():
        argv += ['--' + key, str(value)]
    return parser.parse_args(argv)


def test_run_on_a_resctrl_tree(tmp_path: 'os.PathLike[str]') -> None:
    root = os.path.join(str(tmp_path), 'resctrl')
    fakes.make_tree(root, cbm_len=11, domains=(0, 1))
    os.mkdir(os.path.join(root, 'COS1'))   # another tool's group
    with open(os.path.join(root, 'COS1', 'schemata'), 'w') as fh:
        fh.write('L3:0=600;1=600\n')
    settings = Settings.defaults(
        resctrl={'root': root, 'sysfs_cpu_root': str(tmp_path)},
        allocation={'system_min_ways': 2},
        pools={'hp': {'l3_ways': 3}})
    out = os.path.join(str(tmp_path), 'ovs-rdt.yaml')
    assert pc.run(settings, _args(output=out)) == 0
    text = open(out).read()
    assert oct(os.stat(out).st_mode & 0o777) == '0o644'
    # per domain: pool hp 3 (not created yet: counted from the config) and
    # the system's 2, which stay over COS1's ways (the mask mkdir gave it
    # shares them with the default group: no group of ours may have them)
    assert 'reserved per domain: 0=5 1=5 (each: system_min_ways 2, ' \
        'ovsrdt-pool-hp 3).' in text
    # no NUMA nodes in sysfs here: each L3 domain is a cache group
    assert ('CUSTOM_RDT_L3_WAY counts a way on every L3 cache of one cache '
            'group: L3 0; L3 1.') in text
    assert 'CUSTOM_RDT_POOL_HP' in yaml.safe_load(text)['providers'][0][
        'traits']['additional']
    [provider] = yaml.safe_load(text)['providers']
    inventories = {k: v for item in provider['inventories']['additional']
                   for k, v in item.items()}
    assert inventories['CUSTOM_RDT_L3_WAY'] == {
        'total': 22, 'reserved': 10, 'min_unit': 1, 'max_unit': 12,
        'step_size': 1, 'allocation_ratio': 1.0}
    # 8: MBA has fewer CLOSIDs than L3 here; root, pool hp, COS1 hold one
    assert inventories['CUSTOM_RDT_CLOSID']['total'] == 8
    assert inventories['CUSTOM_RDT_CLOSID']['reserved'] == 3
    assert provider['identification'] == {'uuid': '$COMPUTE_NODE'}


def test_run_refuses_a_bad_uuid() -> None:
    # The one UUID rule (inputs.uuids), as every other surface words it.
    with pytest.raises(ConfigError) as err:
        pc.run(Settings.defaults(), _args(uuid='nope'))
    assert str(err.value) == ("--uuid: 'nope' is not a UUID "
                              '(or $COMPUTE_NODE)')


def test_doc_example() -> None:
    """doc/nova.md: 11 ways x 2 sockets, 2 system + pool hp 2 + PMD 2."""
    groups = [Group('', {0: cbm(0x01f), 1: cbm(0x01f)}),
              Group(pool_group('hp'), {0: cbm(0x060), 1: cbm(0x060)}),
              Group(PMD_GROUP, {0: cbm(0x180), 1: cbm(0x180)})]
    assert reserved_ways(platform(), groups, 2, pools={'hp': 2}) == \
        {0: 6, 1: 6}
    inv = inventory(platform(), groups, 2, {'hp': 2})
    assert (inv[pc.RC_WAYS]['total'], inv[pc.RC_WAYS]['reserved'],
            inv[pc.RC_WAYS]['max_unit']) == (22, 12, 10)
    assert inv[pc.RC_CLOSIDS]['reserved'] == 3


def test_run_names_the_provider(tmp_path: 'os.PathLike[str]',
                                capsys: pytest.CaptureFixture) -> None:
    root = os.path.join(str(tmp_path), 'resctrl')
    fakes.make_tree(root)
    settings = Settings.defaults(resctrl={'root': root,
                                          'sysfs_cpu_root': str(tmp_path)})
    args = _args(name='compute-1')
    args.name = 'provider-config'   # what oslo.config's subcommand sets
    assert pc.run(settings, args) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert doc['providers'][0]['identification'] == {'name': 'compute-1'}
