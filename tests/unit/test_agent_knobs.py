"""ovs_rdt.agent.knobs: the rdt-* keys, one specific error per fault."""
from __future__ import annotations

import pytest

from ovs_rdt.agent import knobs
from ovs_rdt.exceptions import AnnotationError
from ovs_rdt.model import PMD_GROUP, ROOT

POOLS = ('hp', 'noisy')


def parse(cfg: dict, **kw: object) -> knobs.Placement:
    kw.setdefault('cbm_len', 11)
    return knobs.parse(cfg, POOLS, **kw)  # type: ignore[arg-type]


def test_nothing_set_is_inactive() -> None:
    p = parse({'pmd-cpu-mask': '0x3', 'other': 'x'})
    assert not p.active
    assert p.pmd_group == ROOT and p.other_group == ROOT


def test_ways_default_vswitchd_follows_pmds() -> None:
    p = parse({'rdt-pmd-l3-ways': '4'})
    assert p.ways == 4 and p.pmd_group == PMD_GROUP
    assert p.other_group == PMD_GROUP and p.active


def test_pool_and_vswitchd_variants() -> None:
    p = parse({'rdt-pmd-pool': 'hp', 'rdt-vswitchd': 'default'})
    assert p.pmd_group == 'ovsrdt-pool-hp' and p.other_group == ROOT
    p = parse({'rdt-pmd-l3-ways': '2', 'rdt-vswitchd': 'pool:noisy'})
    assert p.pmd_group == PMD_GROUP and p.other_group == 'ovsrdt-pool-noisy'
    p = parse({'rdt-vswitchd': 'pool:hp'})
    assert p.pmd_group == ROOT and p.other_group == 'ovsrdt-pool-hp'
    assert p.active


def test_mb_percent() -> None:
    p = parse({'rdt-pmd-l3-ways': '3', 'rdt-pmd-mb-percent': '50'})
    assert p.mb_percent == 50


def test_placements_compare_by_value() -> None:
    assert parse({'rdt-pmd-l3-ways': '4'}) == parse({'rdt-pmd-l3-ways': ' 4'})
    assert parse({'rdt-pmd-l3-ways': '4'}) != parse({'rdt-pmd-l3-ways': '3'})
    assert len({parse({}), parse({})}) == 1


@pytest.mark.parametrize('cfg, words', [
    ({'rdt-pmd-l3-ways': 'abc'}, ["rdt-pmd-l3-ways='abc'", 'whole number']),
    ({'rdt-pmd-l3-ways': ''}, ['rdt-pmd-l3-ways', 'whole number']),
    ({'rdt-pmd-l3-ways': '0'}, ['rdt-pmd-l3-ways=0', 'at least 1']),
    ({'rdt-pmd-l3-ways': '-2'}, ['rdt-pmd-l3-ways=-2', 'at least 1']),
    ({'rdt-pmd-l3-ways': '12'}, ['rdt-pmd-l3-ways=12', '11 ways']),
    ({'rdt-pmd-pool': 'gold'}, ['rdt-pmd-pool=gold', 'no such pool',
                                'hp, noisy']),
    ({'rdt-pmd-pool': ''}, ['rdt-pmd-pool=', 'names no pool']),
    ({'rdt-pmd-l3-ways': '4', 'rdt-pmd-pool': 'hp'}, ['both set']),
    ({'rdt-vswitchd': 'all'}, ["rdt-vswitchd='all'", 'pmd, default']),
    ({'rdt-vswitchd': 'pool:gold'}, ['rdt-vswitchd=pool:gold',
                                     'no such pool']),
    ({'rdt-pmd-l3-ways': '4', 'rdt-pmd-mb-percent': 'x'},
     ['rdt-pmd-mb-percent', 'whole number']),
    ({'rdt-pmd-l3-ways': '4', 'rdt-pmd-mb-percent': '0'},
     ['rdt-pmd-mb-percent=0', 'at least 1']),
    ({'rdt-pmd-l3-ways': '4', 'rdt-pmd-mb-percent': '101'},
     ['rdt-pmd-mb-percent=101', 'at most 100']),
    ({'rdt-pmd-mb-percent': '50'}, ['needs rdt-pmd-l3-ways']),
    ({'rdt-pmd-pool': 'hp', 'rdt-pmd-mb-percent': '50'},
     ['[pool:hp]', 'mb_percent']),
])
def test_each_fault_has_its_message(cfg: dict, words: list) -> None:
    with pytest.raises(AnnotationError) as err:
        parse(cfg)
    for word in words:
        assert word in str(err.value)


def test_mb_without_mba() -> None:
    with pytest.raises(AnnotationError, match='no memory bandwidth'):
        parse({'rdt-pmd-l3-ways': '4', 'rdt-pmd-mb-percent': '50'},
              has_mba=False)


def test_ways_unchecked_without_platform() -> None:
    assert parse({'rdt-pmd-l3-ways': '40'}, cbm_len=None).ways == 40


def test_relevant_keeps_only_our_keys() -> None:
    assert knobs.relevant({'pmd-cpu-mask': '3', 'rdt-pmd-pool': 'hp',
                           'n-handler-threads': '1'}) == {
        'pmd-cpu-mask': '3', 'rdt-pmd-pool': 'hp'}


@pytest.mark.parametrize('text, cores', [
    ('0x3', {0, 1}), ('3', {0, 1}), ('0X10', {4}), (None, set()),
    ('', set()), ('zz', set()), ('0x0', set())])
def test_parse_cpu_mask(text: str | None, cores: set) -> None:
    assert knobs.parse_cpu_mask(text) == cores
