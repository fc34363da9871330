"""The rdt: extra-spec validators, through Nova's own validate()."""
from __future__ import annotations

import pytest

from nova.api.validation.extra_specs import validators
from nova import exception

from nova_plugin import validators as rdt_validators


def test_registered_through_the_entry_point() -> None:
    for name in ('rdt:l3_ways', 'rdt:pool', 'rdt:mb_percent'):
        assert validators.VALIDATORS[name] in rdt_validators.register()
    assert 'rdt' in validators.NAMESPACES


@pytest.mark.parametrize('name, value', [
    ('rdt:l3_ways', '1'), ('rdt:l3_ways', '64'),
    ('rdt:pool', 'noisy'), ('rdt:pool', 'hp.v2_a-1'),
    ('rdt:mb_percent', '1'), ('rdt:mb_percent', '100'),
    ('rdt:l3_ways', ' 3 '), ('rdt:l3_ways', '03'),
])
def test_accepted(name: str, value: str) -> None:
    validators.validate(name, value)


@pytest.mark.parametrize('name, value, message', [
    ('rdt:l3_ways', 'abc', "'abc' is not a valid integer value"),
    ('rdt:l3_ways', '0', "'0' is less than the min value of '1'"),
    ('rdt:l3_ways', '65', "'65' is greater than the max value of '64'"),
    ('rdt:l3_ways', '2.5', 'is not a valid integer value'),
    # int() takes these, the filter and the hook do not
    ('rdt:l3_ways', '+3', "'\\+3' is not a valid integer value"),
    ('rdt:l3_ways', '0_3', 'is not a valid integer value'),
    ('rdt:l3_ways', '\u0663', 'is not a valid integer value'),
    ('rdt:l3_ways', '0000000003', 'is not a valid integer value'),
    ('rdt:mb_percent', '5_0', 'is not a valid integer value'),
    ('rdt:l3_ways', '-1', "'-1' is less than the min value of '1'"),
    ('rdt:mb_percent', '0', 'less than the min value'),
    ('rdt:mb_percent', '101', 'greater than the max value'),
    ('rdt:pool', '../etc', 'is not of the format'),
    ('rdt:pool', 'two words', 'is not of the format'),
    ('rdt:pool', '', 'is not of the format'),
    ('rdt:l3_way', '3', "extra spec 'rdt:l3_way' does not appear to be a "
                        "valid extra spec"),
    ('rdt:pools', 'noisy', 'does not appear to be a valid extra spec'),
])
def test_refused(name: str, value: str, message: str) -> None:
    with pytest.raises(exception.ValidationError, match=message):
        validators.validate(name, value)


@pytest.mark.parametrize('value', ['3', ' 3 ', '03', '+3', '0_3', '\u0663',
                                   '-1', '2.5', '0000000003'])
def test_the_api_accepts_what_the_filter_accepts(value: str) -> None:
    from nova_plugin import specs
    from ovs_rdt.exceptions import AnnotationError

    try:
        specs.parse({'rdt:l3_ways': value})
        parsed = True
    except AnnotationError:
        parsed = False
    try:
        validators.validate('rdt:l3_ways', value)
        valid = True
    except exception.ValidationError:
        valid = False
    assert valid == parsed


def test_other_namespaces_untouched() -> None:
    validators.validate('hw:cpu_policy', 'dedicated')
    validators.validate('rdtx:anything', 'goes')
