"""The rdt: extra-spec validators, through Nova's own validate().

The values themselves (which are refused, with which message) are checked
against every other surface in test_inputs_surfaces.py.
"""
from __future__ import annotations

import pytest

from nova.api.validation.extra_specs import validators
from nova import exception

from nova_plugin import validators as rdt_validators


def test_registered_through_the_entry_point() -> None:
    for name in ('rdt:l3_ways', 'rdt:pool', 'rdt:mb_percent', 'rdt:mb_mbps',
                 'rdt:{key}', 'resources:CUSTOM_RDT_L3_WAY',
                 'resources:CUSTOM_RDT_CLOSID'):
        assert validators.VALIDATORS[name] in rdt_validators.register()
    assert 'rdt' in validators.NAMESPACES


def test_documented_for_nova_api_reference() -> None:
    ways = validators.VALIDATORS['rdt:l3_ways'].value
    assert (ways['type'], ways['min'], ways['max']) == (int, 1, 64)
    assert validators.VALIDATORS['rdt:pool'].value['pattern']


@pytest.mark.parametrize('name, value', [
    ('rdt:l3_ways', '1'), ('rdt:l3_ways', '64'), ('rdt:l3_ways', '03'),
    ('rdt:pool', 'noisy'), ('rdt:pool', 'hp.v2_a-1'),
    ('rdt:mb_percent', '1'), ('rdt:mb_percent', '100'),
    ('resources:CUSTOM_RDT_L3_WAY', '0'), ('resources:CUSTOM_RDT_L3_WAY', '24'),
    ('resources:CUSTOM_RDT_CLOSID', '1'),
    # other resource classes: Nova's own validator
    ('resources:CUSTOM_RDT_OTHER', '3'), ('resources1:CUSTOM_RDT_L3_WAY', '3'),
])
def test_accepted(name: str, value: str) -> None:
    validators.validate(name, value)


@pytest.mark.parametrize('name, value, message', [
    # Nova's own int validator takes these; the filter and the hook do not.
    ('rdt:l3_ways', '+3', "rdt:l3_ways: '+3' is not a whole number"),
    ('rdt:l3_ways', ' 3 ', "rdt:l3_ways: ' 3 ' is not a whole number"),
    ('rdt:l3_ways', '\u0663', "rdt:l3_ways: '\u0663' is not a whole number"),
    ('rdt:mb_percent', '5_0', "rdt:mb_percent: '5_0' is not a whole number"),
    ('rdt:l3_ways', '65', "rdt:l3_ways: '65' must be from 1 to 64"),
    ('rdt:pool', 'two words', "rdt:pool: 'two words' is not a pool name"),
    ('rdt:pools', 'noisy', 'rdt:pools: unknown ovs-rdt key (known: '
     'rdt:l3_ways, rdt:l3_kib, rdt:pool, rdt:mb_percent, rdt:mb_mbps)'),
    # ours, not Nova's int(): the filter and the hook refuse them alike
    ('resources:CUSTOM_RDT_L3_WAY', '+6',
     "resources:CUSTOM_RDT_L3_WAY: '+6' is not a whole number"),
    ('resources:CUSTOM_RDT_L3_WAY', '-1',
     "resources:CUSTOM_RDT_L3_WAY: '-1' is not a whole number"),
    ('resources:CUSTOM_RDT_CLOSID', '2',
     "resources:CUSTOM_RDT_CLOSID: '2' must be from 0 to 1"),
])
def test_refused(name: str, value: str, message: str) -> None:
    with pytest.raises(exception.ValidationError) as err:
        validators.validate(name, value)
    assert str(err.value).startswith(message)


def test_other_namespaces_untouched() -> None:
    validators.validate('hw:cpu_policy', 'dedicated')
    validators.validate('rdtx:anything', 'goes')
