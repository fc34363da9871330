"""``ovs-rdt provider-config`` output, loaded by Nova's own loader."""
from __future__ import annotations

import os

from nova.compute import provider_config as nova_provider_config

from ovs_rdt.cmd import provider_config as pc
from ovs_rdt.conf import Settings
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import PMD_GROUP, Group, MBInfo, Platform
from ovs_rdt.manager import CacheManager


def _write(folder: str, text: str) -> str:
    path = os.path.join(folder, 'ovs-rdt.yaml')
    with open(path, 'w') as fh:
        fh.write(text)
    return path


def test_nova_loads_and_validates_the_file(tmp_path: os.PathLike) -> None:
    plat = Platform(cbm_len=11, num_closids=16, domains=(0, 1),
                    mb=MBInfo(10, 10, True, (0, 1)))
    groups = [Group('', {0: CBM(0x03f, 11), 1: CBM(0x03f, 11)}),
              Group(PMD_GROUP, {0: CBM(0x600, 11), 1: CBM(0x600, 11)})]
    free = CacheManager(None, Settings.defaults(
        allocation={'system_min_ways': 2})).free_ways((plat, groups))
    inv = pc.inventory(plat, groups, {d: f['reserved_ways']
                                      for d, f in free.items()})
    _write(str(tmp_path), pc.to_yaml(
        pc.document(inv, pc.traits_of(plat, ['hp', 'be.v2-1'])),
        'a comment'))
    configs = nova_provider_config.get_provider_configs(str(tmp_path))
    assert list(configs) == ['$COMPUTE_NODE']
    provider = configs['$COMPUTE_NODE']
    assert provider['inventories']['additional'] == [
        {'CUSTOM_RDT_L3_WAY': {'total': 22, 'reserved': 8, 'min_unit': 1,
                               'max_unit': 14, 'step_size': 1,
                               'allocation_ratio': 1.0}},
        {'CUSTOM_RDT_CLOSID': {'total': 16, 'reserved': 2, 'min_unit': 1,
                               'max_unit': 1, 'step_size': 1,
                               'allocation_ratio': 1.0}}]
    assert provider['traits']['additional'] == [
        'CUSTOM_RDT_L3_CAT', 'CUSTOM_RDT_MBA', 'CUSTOM_RDT_MB_PERCENT',
        'CUSTOM_RDT_POOL_BE_V2_1', 'CUSTOM_RDT_POOL_HP']


def test_named_provider(tmp_path: os.PathLike) -> None:
    doc = pc.document({pc.RC_WAYS: {'total': 11}}, [],
                      name="compute-1's node")
    path = _write(str(tmp_path), pc.to_yaml(doc))
    parsed = nova_provider_config._parse_provider_yaml(path)
    assert parsed['providers'][0]['identification'] == {
        'name': "compute-1's node"}
    assert parsed['meta'] == {'schema_version': '1.0'}


def test_uuid_provider(tmp_path: os.PathLike) -> None:
    uuid = '5e3b0c43-0b0a-4a1e-9f53-6f2d8b6a1c11'
    doc = pc.document({pc.RC_WAYS: {'total': 11}}, [], uuid=uuid)
    _write(str(tmp_path), pc.to_yaml(doc))
    assert list(nova_provider_config.get_provider_configs(str(tmp_path))) \
        == [uuid]
