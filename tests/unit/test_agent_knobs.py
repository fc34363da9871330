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
    # A mistyped key is refused, never read as "no rdt-* keys set".
    ({'rdt-pmd-pools': 'hp', 'rdt-vswitchd': 'pmd'},
     'other_config:rdt-pmd-pools: unknown ovs-rdt key (known: '
     'rdt-pmd-l3-ways, rdt-pmd-pool, rdt-vswitchd, rdt-pmd-mb-percent, '
     'rdt-pmd-mb-mbps)'),
    ({'rdt-pmd-l3-ways': '4', 'rdt-pmd-l3-way': '4'},
     'other_config:rdt-pmd-l3-way: unknown ovs-rdt key'),
    ({'rdt-': 'x'}, 'other_config:rdt-: unknown ovs-rdt key'),
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
    # (Every rdt-* key: a typo added or removed is a change to act on.)
    assert knobs.relevant({'pmd-cpu-mask': '3', 'rdt-pmd-pool': 'hp',
                           'rdt-pmd-pools': 'hp', 'n-handler-threads': '1'}
                          ) == {'pmd-cpu-mask': '3', 'rdt-pmd-pool': 'hp',
                                'rdt-pmd-pools': 'hp'}


def test_same_unknown_key_message_as_a_flavors() -> None:
    from ovs_rdt.inputs import request

    with pytest.raises(InvalidValue) as flavor:
        request.from_extra_specs({'rdt:l3ways': '3'}, 'flavor x extra spec ')
    with pytest.raises(InvalidValue) as knob:
        parse({'rdt-l3ways': '3'})
    assert str(flavor.value).replace('flavor x extra spec rdt:l3ways', 'K') \
        .split(' (known')[0] == str(knob.value).replace(
            'other_config:rdt-l3ways', 'K').split(' (known')[0]


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
