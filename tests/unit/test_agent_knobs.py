"""ovs_rdt.agent.knobs: the rdt-* keys, one specific error per fault."""
from __future__ import annotations

import pytest

from ovs_rdt.agent import knobs
from ovs_rdt.core.model import PMD_GROUP, ROOT
from ovs_rdt.exceptions import InvalidValue

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
    assert parse({'rdt-pmd-l3-ways': '4'}) == parse({'rdt-pmd-l3-ways': '04'})
    assert parse({'rdt-pmd-l3-ways': '4'}) != parse({'rdt-pmd-l3-ways': '3'})
    assert len({parse({}), parse({})}) == 1


@pytest.mark.parametrize('cfg, message', [
    ({'rdt-pmd-l3-ways': 'abc'},
     "other_config:rdt-pmd-l3-ways: 'abc' is not a whole number"),
    ({'rdt-pmd-l3-ways': ''},
     "other_config:rdt-pmd-l3-ways: '' is not a whole number"),
    # int() takes these; the hook, the filter and the API do not
    ({'rdt-pmd-l3-ways': '\u0663'},
     "other_config:rdt-pmd-l3-ways: '\u0663' is not a whole number"),
    ({'rdt-pmd-l3-ways': '+3'}, 'is not a whole number'),
    ({'rdt-pmd-l3-ways': '0_3'}, 'is not a whole number'),
    ({'rdt-pmd-l3-ways': ' 3'}, 'is not a whole number'),
    ({'rdt-pmd-l3-ways': '0'},
     "other_config:rdt-pmd-l3-ways: '0' must be from 1 to 64"),
    ({'rdt-pmd-l3-ways': '-2'}, "'-2' is not a whole number"),
    ({'rdt-pmd-l3-ways': '12'}, "other_config:rdt-pmd-l3-ways: '12' is more "
     "than the 11 ways of this host's L3 cache"),
    ({'rdt-pmd-pool': 'gold'}, "other_config:rdt-pmd-pool: 'gold' names no "
     'pool configured on this host (configured: hp, noisy; see [allocation] '
     'pools)'),
    ({'rdt-pmd-pool': ''}, "other_config:rdt-pmd-pool: '' is not a pool "
     'name'),
    ({'rdt-pmd-l3-ways': '4', 'rdt-pmd-pool': 'hp'},
     'other_config:rdt-pmd-l3-ways and other_config:rdt-pmd-pool exclude '
     'each other'),
    ({'rdt-vswitchd': 'all'}, "other_config:rdt-vswitchd: 'all' is not one "
     'of pmd, default, pool:<name>'),
    ({'rdt-vswitchd': ' pmd'}, "other_config:rdt-vswitchd: ' pmd' is not one"),
    ({'rdt-vswitchd': 'pool:gold'}, "other_config:rdt-vswitchd: 'pool:gold' "
     'names no pool configured on this host'),
    ({'rdt-vswitchd': 'pool:'}, "other_config:rdt-vswitchd: '' is not a "
     'pool name'),
    ({'rdt-pmd-l3-ways': '4', 'rdt-pmd-mb-percent': 'x'},
     "other_config:rdt-pmd-mb-percent: 'x' is not a whole number"),
    ({'rdt-pmd-l3-ways': '4', 'rdt-pmd-mb-percent': '0'},
     "other_config:rdt-pmd-mb-percent: '0' must be from 1 to 100"),
    ({'rdt-pmd-l3-ways': '4', 'rdt-pmd-mb-percent': '101'},
     "other_config:rdt-pmd-mb-percent: '101' must be from 1 to 100"),
    ({'rdt-pmd-mb-percent': '50'}, 'other_config:rdt-pmd-mb-percent needs '
     'other_config:rdt-pmd-l3-ways too'),
    ({'rdt-pmd-pool': 'hp', 'rdt-pmd-mb-percent': '50'},
     'other_config:rdt-pmd-mb-percent cannot go with '
     "other_config:rdt-pmd-pool: a pool's memory bandwidth cap is its "
     '[pool:hp] mb_percent'),
])
def test_each_fault_has_its_message(cfg: dict, message: str) -> None:
    with pytest.raises(InvalidValue) as err:
        parse(cfg)
    assert message in str(err.value)


def test_mb_without_mba_or_below_its_minimum() -> None:
    with pytest.raises(InvalidValue, match='no memory bandwidth'):
        parse({'rdt-pmd-l3-ways': '4', 'rdt-pmd-mb-percent': '50'},
              mb_min=None)
    with pytest.raises(InvalidValue, match='minimum memory bandwidth, 10%'):
        parse({'rdt-pmd-l3-ways': '4', 'rdt-pmd-mb-percent': '5'},
              mb_min=10)


def test_ways_unchecked_without_platform() -> None:
    assert parse({'rdt-pmd-l3-ways': '40'}, cbm_len=None).ways == 40
    with pytest.raises(InvalidValue, match='must be from 1 to 64'):
        parse({'rdt-pmd-l3-ways': '65'}, cbm_len=None)


def test_relevant_keeps_only_our_keys() -> None:
    assert knobs.relevant({'pmd-cpu-mask': '3', 'rdt-pmd-pool': 'hp',
                           'n-handler-threads': '1'}) == {
        'pmd-cpu-mask': '3', 'rdt-pmd-pool': 'hp'}


@pytest.mark.parametrize('text, cores', [
    ('0x3', {0, 1}), ('3', {0, 1}), ('0X10', {4}), (None, set()),
    ('', set()), ('zz', set()), ('0x0', set()), (' 0x3', set())])
def test_parse_cpu_mask(text: str | None, cores: set) -> None:
    assert knobs.parse_cpu_mask(text) == cores


@pytest.mark.parametrize('cfg', [
    {'rdt-pmd-l3-ways': '2\n', 'rdt-pmd-pool': '\x1b[2Jhp'},
    {'rdt-pmd-pool': 'evil\nrdt-status: ok'},
    {'rdt-vswitchd': 'pool:\u202eevil'}])
def test_values_in_messages_are_escaped(cfg: dict) -> None:
    # Found by tests/stress/test_fuzz.py: a control character in a knob
    # reached the one-line message (the log and rdt-status) as it was.
    with pytest.raises(InvalidValue) as exc:
        parse(cfg)
    assert str(exc.value).isprintable(), str(exc.value)
