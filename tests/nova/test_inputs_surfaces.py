"""The Nova API validators and the scheduler filter over tests.inputs_table.

The same rows as the node's surfaces (tests/unit/test_inputs_surfaces.py):
the same values accepted, the same refused with the same message, here for
the extra specs ``rdt:l3_ways``, ``rdt:pool``, ``rdt:mb_percent``.  Nova's
API validates one key at a time, so the rows that combine keys are the
filter's alone.
"""
from __future__ import annotations

from typing import Any

import pytest

from nova.api.validation.extra_specs import validators
from nova import exception

from tests.inputs_table import ONE_VALUE_ROWS, POOLS, ROWS, Row
from tests.nova.test_filter import host, passes, request

FIELDS = {f: 'rdt:' + f for f in ('l3_ways', 'l3_kib', 'pool',
                                  'mb_percent', 'mb_mbps')}
#: A host every valid request fits: 64 ways, the table's pools.
ROOMY = {'rdt_l3_ways': '64', 'rdt_system_ways': '0', 'rdt_closids': '16',
         'rdt_reserved_closids': '1', 'rdt_pools': ','.join(POOLS)}


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
def test_the_scheduler_filter(row: Row, debug_log: pytest.LogCaptureFixture,
                              rdt_conf: Any) -> None:
    # Ways so large that every size of the table is one way.
    rdt_conf(rdt_l3_way_kib=999999999)
    extra = {FIELDS[f]: v for f, v in row.values.items()}
    spec = request(**extra)
    if row.ok:
        assert passes(host(meta=ROOMY), spec) == ['h1']
        return
    assert passes(host(meta=ROOMY), spec) == []
    expected = 'fails RDT cache requirements: flavor %s: %s' % (
        spec.flavor.name, row.message(FIELDS))
    assert any(m.endswith(expected) for m in debug_log.messages), \
        debug_log.messages


def test_unknown_keys_refused_alike() -> None:
    """A typo in the namespace: the API's message is the filter's."""
    with pytest.raises(exception.ValidationError) as err:
        validators.validate('rdt:l3_way', '3')
    assert str(err.value) == ('rdt:l3_way: unknown ovs-rdt key (known: '
                              'rdt:l3_ways, rdt:l3_kib, rdt:pool, '
                              'rdt:mb_percent, rdt:mb_mbps)')
    assert passes(host(meta=ROOMY), request(**{'rdt:l3_way': '3'})) == []
