"""The policy pools through the manager and the allocator: seed 002 Table 6
layouts, the split kept by every other operation, kernel-safe order."""
from __future__ import annotations

import pytest

from ovs_rdt.conf import Settings
from ovs_rdt.core.allocator import plan
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Request
from ovs_rdt.manager import CacheManager
from tests.unit.fakes import FakeKernelTree
from tests.unit.fakes import make_tree

HP, BE = 'ovsrdt-pool-hp', 'ovsrdt-pool-noisy'


def table6(enabled: bool = True, order: tuple = ('hp', 'noisy'),
           mb: int | None = None) -> Settings:
    pools = {'hp': {'l3_ways': 8, 'isolated': True},
             'noisy': {'l3_ways': 2, 'mb_percent': mb}}
    return Settings.defaults(
        allocation={'system_l3_cbm': 'c00'},
        pools={name: pools[name] for name in order},
        policy=dict(enabled=enabled, high_priority='hp', best_effort='noisy',
                    hp_min_ways=3, hp_max_ways=8, be_min_ways=2))


@pytest.fixture
def rc(tmp_path):
    make_tree(str(tmp_path / 'rc'), cbm_len=12, domains=(0,), mba=False,
              way_bytes=1 << 20, cpus_per_domain=16)
    return FakeKernelTree(str(tmp_path / 'rc'))


def masks(rc) -> tuple[str, str, str]:
    return (str(rc.group('').l3[0]), str(rc.group(HP).l3[0]),
            str(rc.group(BE).l3[0]))


@pytest.mark.parametrize('order', [('hp', 'noisy'), ('noisy', 'hp')])
def test_table6_masks_for_every_split(rc, order) -> None:
    mgr = CacheManager(rc, table6(order=order))
    mgr.apply()
    assert masks(rc) == ('c00', '3fc', '3')
    seen = {}
    for hp in (5, 3, 8, 4, 7, 6):
        mgr.apply_policy_split({0: hp})
        seen[hp] = masks(rc)
    assert seen[3] == ('c00', '380', '7f')         # Table 6's other end
    assert seen[5] == ('c00', '3e0', '1f')         # Figure 10: 5 and 5
    for hp, (system, hp_mask, be_mask) in seen.items():
        assert system == 'c00'
        assert bin(int(hp_mask, 16)).count("1") == hp
        assert bin(int(be_mask, 16)).count("1") == 10 - hp
        assert int(be_mask, 16) == (1 << (10 - hp)) - 1   # at the bottom


def test_other_operations_keep_the_split(rc) -> None:
    mgr = CacheManager(rc, table6())
    mgr.apply()
    mgr.apply_policy_split({0: 4})
    # A new CacheManager (the libvirt hook, "ovs-rdt apply") keeps it.
    other = CacheManager(rc, table6())
    assert other.apply().steps == []
    assert masks(rc) == ('c00', '3c0', '3f')
    # Disabled: back to the configured 8 and 2.
    CacheManager(rc, table6(enabled=False)).apply()
    assert masks(rc) == ('c00', '3fc', '3')


def test_invalid_split_falls_back_to_configured(rc) -> None:
    CacheManager(rc, table6(enabled=False)).apply()
    mgr = CacheManager(rc, table6())
    # A split outside the bounds (here by hand) is not kept.
    rc.write_schemata(BE, 'L3:0=1\n')
    mgr.apply()
    assert masks(rc) == ('c00', '3fc', '3')


def test_trading_ways_never_overlaps() -> None:
    """The pool giving ways up is written first, whatever the order."""
    from ovs_rdt.core.model import Group, Platform
    plat = Platform(cbm_len=12, num_closids=16, domains=(0,))
    cur = [Group('', {0: CBM(0xc00, 12)}),
           Group(HP, {0: CBM(0x3e0, 12)}, mode='exclusive'),
           Group(BE, {0: CBM(0x01f, 12)})]
    for hp_ways in (8, 3):
        reqs = [Request(HP, ways={0: hp_ways}),
                Request(BE, ways={0: 10 - hp_ways}, exclusive=False)]
        steps = plan(plat, cur, reqs, 2, {0: CBM(0xc00, 12)}).steps
        writes = [s.group for s in steps if s.op == 'schemata']
        assert writes == ([BE, HP] if hp_ways == 8 else [HP, BE])
        assert steps[0] == ('mode', HP, 'shareable')
        assert steps[-1] == ('mode', HP, 'exclusive')
