"""nova_plugin.aggregates: a host's capacity from metadata, without Nova."""
from __future__ import annotations

import logging

import pytest

from nova_plugin import aggregates
from nova_plugin import opts
from ovs_rdt.core.capacity import Holding, HostCapacity, Usage
from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.inputs import host_capacity
from tests.inputs_table import ROWS, Row

NONE = (None,) * 5

#: How a refused aggregate value is logged.
PREFIX = ('Bad aggregate metadata, the host fails RDT requests until it '
          'is fixed: ')


def agg(**meta: str) -> tuple:
    return tuple(meta.get(k) for k in aggregates.KEYS)


def test_one_aggregate() -> None:
    got = aggregates.host_capacity((agg(
        rdt_l3_ways='11', rdt_system_ways='2', rdt_closids='16',
        rdt_reserved_closids='3', rdt_pools='hp, x,'),), NONE)
    assert got == HostCapacity(11, 2, 16, 3, frozenset({'hp', 'x'}))


def test_several_aggregates_take_the_tightest_values() -> None:
    got = aggregates.host_capacity((
        agg(rdt_l3_ways='11', rdt_system_ways='2', rdt_closids='16',
            rdt_reserved_closids='1', rdt_pools='hp,x'),
        agg(rdt_l3_ways='8', rdt_system_ways='3', rdt_closids='20',
            rdt_reserved_closids='4', rdt_pools='x,y')), NONE)
    assert got == HostCapacity(8, 3, 16, 4, frozenset({'x'}))


def test_defaults_fill_in_key_by_key() -> None:
    conf = {'rdt_l3_ways': 11, 'rdt_system_ways': 2, 'rdt_closids': 16,
            'rdt_reserved_closids': None, 'rdt_pools': ['hp']}
    defaults = aggregates.defaults(conf)
    assert defaults == (11, 2, 16, None, ('hp',))
    assert aggregates.host_capacity((), defaults) == \
        HostCapacity(11, 2, 16, 0, frozenset({'hp'}))
    assert aggregates.host_capacity((agg(rdt_system_ways='0'),), defaults) \
        == HostCapacity(11, 0, 16, 0, frozenset({'hp'}))


def test_no_capacity_without_ways_and_closids() -> None:
    assert aggregates.host_capacity((), NONE) is None
    assert aggregates.host_capacity((agg(rdt_l3_ways='11'),), NONE) is None
    assert aggregates.host_capacity((agg(rdt_closids='16'),), NONE) is None


@pytest.mark.parametrize('bad', ['eleven', '-1', '+3', ' 11', '1' * 30])
def test_a_bad_value_leaves_the_capacity_unknown_with_one_warning(
        bad: str, caplog: pytest.LogCaptureFixture) -> None:
    """Not another aggregate's value, nor the option's: either could
    promise ways the operator meant to keep.
    """
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    aggs = (agg(rdt_l3_ways='11', rdt_closids='16', rdt_system_ways=bad),
            agg(rdt_system_ways='4'))
    defaults = (11, 2, 16) + NONE[3:]
    assert aggregates.host_capacity(aggs, defaults) is None
    assert aggregates.host_capacity(aggs, defaults) is None
    why = 'must be from 0 to 64' if bad.isdigit() else 'is not a whole number'
    assert [m for m in caplog.messages if repr(bad) in m] \
        == [PREFIX + 'rdt_system_ways: %r %s' % (bad, why)]


L3_WAYS_ROWS = [row for row in ROWS if list(row.values) == ['l3_ways']]


@pytest.mark.parametrize('row', L3_WAYS_ROWS, ids=repr)
def test_l3_ways_metadata_follows_the_option_rule(
        row: Row, caplog: pytest.LogCaptureFixture) -> None:
    """``rdt_l3_ways`` metadata takes and refuses what the option (and
    ``rdt:l3_ways``) does, with its message: ``0`` and ``65`` included,
    which it took as a host of 0 or 65 ways.
    """
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    raw = row.values['l3_ways']
    aggs = (agg(rdt_l3_ways=raw, rdt_closids='16'),)
    defaults = (11,) + NONE[1:]
    got = aggregates.host_capacity(aggs, defaults)
    if row.ok:
        assert got == HostCapacity(row.expect[0], 0, 16, 0)
        assert not caplog.messages
        return
    assert got is None
    assert caplog.messages == [
        PREFIX + row.message({'l3_ways': 'rdt_l3_ways'})]


@pytest.mark.parametrize('key', sorted(host_capacity.RANGES))
def test_every_number_option_and_its_metadata_share_one_range(
        key: str) -> None:
    """The nova.conf option and the aggregate metadata of each number
    refuse the same values with the same words.
    """
    opt = {o.name: o for o in opts.OPTS}[key]
    low, high = host_capacity.RANGES[key]
    for raw in (str(low - 1) if low else '-1', str(high + 1)):
        with pytest.raises(ValueError) as err:
            opt.type(raw)
        assert str(err.value) == '[ovs_rdt] ' + str(pytest.raises(
            InvalidValue, host_capacity.parse, key, raw, key).value)
    assert opt.type(str(low)) == low and opt.type(str(high)) == high


# -- rdt_numa_l3 ----------------------------------------------------------------
SNC3 = '0:0;1:0;2:0;3:1;4:1;5:1'


def test_capacity_reads_the_metadata_in_order_and_not_the_map() -> None:
    assert aggregates.METADATA == (*aggregates.KEYS, aggregates.NUMA_L3)
    raw = (agg(rdt_l3_ways='11', rdt_closids='16') + (SNC3,),)
    assert aggregates.host_capacity(raw, NONE) == HostCapacity(11, 0, 16, 0)


def test_numa_l3_from_aggregates_else_the_default() -> None:
    snc3 = {0: frozenset({0}), 1: frozenset({0}), 2: frozenset({0}),
            3: frozenset({1}), 4: frozenset({1}), 5: frozenset({1})}
    assert aggregates.host_numa_l3((SNC3,), None) == snc3
    assert aggregates.host_numa_l3((None,), SNC3) == snc3
    assert aggregates.host_numa_l3(('0:0;1:1', None), SNC3) == \
        {0: frozenset({0}), 1: frozenset({1})}      # metadata wins
    assert aggregates.host_numa_l3((), None) is None
    assert aggregates.host_numa_l3((None, None), None) is None


def test_several_maps_take_every_l3_any_of_them_lists() -> None:
    assert aggregates.host_numa_l3(('0:0;1:1', '0:0;1:0;2:2'), None) == \
        {0: frozenset({0}), 1: frozenset({0, 1}), 2: frozenset({2})}


def test_one_map_object_per_text() -> None:
    """The usage cache compares maps by identity (nova_plugin.usage)."""
    first = aggregates.host_numa_l3((SNC3,), None)
    assert aggregates.host_numa_l3((SNC3,), None) is first
    assert aggregates.host_numa_l3((None,), SNC3) is \
        aggregates.host_numa_l3((None,), SNC3)


def test_a_bad_map_is_ignored_with_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    for _ in range(2):
        assert aggregates.host_numa_l3(('0:0,1:0',), None) is None
        assert aggregates.host_numa_l3(('0:0,1:0', '0:1'), None) == \
            {0: frozenset({1})}
    assert caplog.messages == [
        "Ignoring aggregate metadata: rdt_numa_l3: '0:0,1:0' is not a NUMA "
        "node to L3 map (NODE:L3S;...): '0,1:0' is not a list of L3 ids"] * 2


def test_domains_and_nodes() -> None:
    used = Usage()
    used.add(Holding(2, frozenset({3})))
    # no map: node id == L3 id; unknown nodes: where ways are held, and 0
    assert aggregates.domains_and_nodes(None, frozenset({0, 1}), used) == \
        (frozenset({0, 1}), frozenset({0, 1}))
    assert aggregates.domains_and_nodes(None, None, used) == \
        (frozenset({0, 3}), frozenset({0, 3}))
    # a map: its L3 domains; the nodes Nova reports, else the map's
    snc3 = aggregates.host_numa_l3((SNC3,), None)
    assert aggregates.domains_and_nodes(snc3, frozenset({0, 1}), used) == \
        (frozenset({0, 1}), frozenset({0, 1}))
    assert aggregates.domains_and_nodes(snc3, None, used) == \
        (frozenset({0, 1}), frozenset(range(6)))
