"""The Nova API validators and the scheduler filter over tests.inputs_table.

The same rows as the node's surfaces (tests/unit/test_inputs_surfaces.py):
the same values accepted, the same refused with the same message, here for
the extra specs ``rdt:l3_ways``, ``rdt:pool``, ``rdt:mb_percent``, ...
Nova's API validates one key at a time, so the rows that combine keys are
the filter's alone; and what the node accepts the filter passes only when
Placement counts it (``rdt:l3_ways`` alone it does not, a pool goes with its
trait): those rows fail with the line that says so.
"""
from __future__ import annotations

import logging

import pytest

from nova.api.validation.extra_specs import validators
from nova import exception

from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.inputs import placement
from tests.inputs_table import ONE_VALUE_ROWS, ROWS, Row
from tests.nova.test_filter import passes, request

FIELDS = {f: 'rdt:' + f for f in ('l3_ways', 'l3_kib', 'pool',
                                  'mb_percent', 'mb_mbps')}


@pytest.mark.parametrize('row', ONE_VALUE_ROWS, ids=repr)
def test_the_api_validators(row: Row) -> None:
    [(field, value)] = row.values.items()
    if row.ok:
        validators.validate(FIELDS[field], value)
        return
    with pytest.raises(exception.ValidationError) as err:
        validators.validate(FIELDS[field], value)
    assert str(err.value) == row.message(FIELDS)


@pytest.mark.parametrize('row', ROWS, ids=repr)
def test_the_scheduler_filter(row: Row,
                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    extra = {FIELDS[f]: v for f, v in row.values.items()}
    spec = request(extra)
    assert passes(spec) == []
    if row.ok:
        # valid on the node; Placement does not count it as written
        with pytest.raises(InvalidValue) as err:
            placement.schedulable(extra)
        why = str(err.value)
    else:
        why = row.message(FIELDS)
    expected = 'flavor %s: %s' % (spec.flavor.name, why)
    assert any(m.endswith(expected) for m in caplog.messages), \
        caplog.messages


def test_unknown_keys_refused_alike() -> None:
    """A typo in the namespace: the API's message is the filter's."""
    with pytest.raises(exception.ValidationError) as err:
        validators.validate('rdt:l3_way', '3')
    assert str(err.value) == ('rdt:l3_way: unknown ovs-rdt key (known: '
                              'rdt:l3_ways, rdt:l3_kib, rdt:pool, '
                              'rdt:mb_percent, rdt:mb_mbps)')
    assert passes(request({'rdt:l3_way': '3'})) == []
