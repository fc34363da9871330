"""nova_plugin.passes: one request's pass over its instances, without Nova."""
from __future__ import annotations

import gc
from typing import Any

import pytest

from nova_plugin import passes
from nova_plugin import usage
from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.core.capacity import Holding, Usage


def used(*holdings: Holding) -> Usage:
    out = Usage()
    for held in holdings:
        out.add(held)
    return out


def test_spec_holding() -> None:
    """What a flavor's specs hold (the filter's pass of a request)."""
    assert usage.spec_holding({'rdt:l3_ways': '3', 'rdt:mb_percent': '50'},
                              None) == Holding(3)
    assert usage.spec_holding({'rdt:pool': 'hp'}, None) == \
        Holding(0, None, 'hp')
    assert usage.spec_holding({'hw:numa_nodes': '1'}, None) is None
    with pytest.raises(InvalidValue,
                       match="^rdt:l3_ways: 'x' is not a whole number$"):
        usage.spec_holding({'rdt:l3_ways': 'x'}, None)


def test_a_size_counts_as_the_smallest_ways_that_hold_it() -> None:
    """rdt:l3_kib: ceil(kib / [ovs_rdt] rdt_l3_way_kib) ways on any host."""
    assert usage.spec_holding({'rdt:l3_kib': '7680'}, 2560) == Holding(3)
    assert usage.spec_holding({'rdt:l3_kib': '7681'}, 2560) == Holding(4)
    with pytest.raises(InvalidValue) as err:
        usage.spec_holding({'rdt:l3_kib': '7680'}, None)
    assert str(err.value) == (
        'rdt:l3_kib cannot be counted: [ovs_rdt] rdt_l3_way_kib '
        '(the KiB of the smallest L3 way of the cloud) is not set')


def test_newly_consumed_counts_rises_only() -> None:
    p = passes.Pass(Holding(1))
    assert p.newly_consumed('a', 5) == 0      # first look: the baseline
    assert p.newly_consumed('a', 7) == 2
    assert p.newly_consumed('a', 7) == 0
    assert p.newly_consumed('a', 0) == 0      # a compute report reset it
    assert p.newly_consumed('a', 1) == 1      # counted from the reset
    assert p.newly_consumed('b', 9) == 0      # per host


def test_placed_instances_hold_what_the_request_asks_on_their_cells() -> None:
    p = passes.Pass(Holding(3))
    p.place('a', 2, frozenset({1}))
    p.place('a', 1, None)
    base = used(Holding(1))
    seen = p.host_usage(base, 'a', lambda uuid: ())
    assert (seen.used_ways(0), seen.used_ways(1)) == (1 + 3, 1 + 3 + 3 + 3)
    assert seen.dedicated == 1 + 3
    assert (base.used_ways(0), base.dedicated) == (1, 1)   # not changed
    assert p.host_usage(base, 'b', lambda uuid: ()) is base
    pool = passes.Pass(Holding(0, None, 'hp'))
    pool.place('a', 2, frozenset({1}))      # pools hold no ways: no cells
    assert pool.placed['a'] == [Holding(0, None, 'hp')] * 2


def test_own_instances_do_not_count_against_themselves() -> None:
    mine, other = Holding(4), Holding(2)
    p = passes.Pass(Holding(4))
    p.add_instance('moved')
    p.add_instance(None)
    assert p.uuids == {'moved'}
    instances = {'moved': mine, 'other': other}
    asked = []

    def own(uuid: str) -> list[Holding]:
        asked.append(uuid)
        return [instances[uuid]]
    seen = p.host_usage(used(mine, other), 'a', own)
    assert (seen.used_ways(0), seen.dedicated) == (2, 1)
    assert asked == ['moved']     # only the request's own instances
    # an instance of the request holding nothing there: nothing taken off
    seen = p.host_usage(used(mine, other), 'a', lambda uuid: ())
    assert seen.used_ways(0) == 6
    # resized in place, pending confirmation: both of its holdings go
    seen = p.host_usage(used(mine, other, Holding(3)), 'a',
                        lambda uuid: [mine, Holding(3)])
    assert (seen.used_ways(0), seen.dedicated) == (2, 1)


class Spec:
    """Weakly referenceable, as RequestSpec is."""


def test_passes_restart_at_index_0_and_end_with_their_request() -> None:
    made: list[passes.Pass] = []

    def new() -> passes.Pass:
        made.append(passes.Pass(Holding(1)))
        return made[-1]

    book = passes.Passes()
    spec: Any = Spec()
    first = book.start(spec, 0, new)
    assert book.start(spec, 1, new) is first
    assert book.start(spec, None, new) is first
    again = book.start(spec, 0, new)
    assert again is not first and len(made) == 2
    assert 0 < first.seq < again.seq      # numbered in the order they start
    other = Spec()
    assert book.start(other, None, new) is not again   # a pass per request
    assert len(book) == 2
    del spec, other
    gc.collect()
    assert len(book) == 0


def test_placed_cells_are_held_on_the_hosts_l3_domains() -> None:
    snc3 = {0: frozenset({0}), 1: frozenset({0}), 2: frozenset({1})}
    p = passes.Pass(Holding(3))
    p.place('a', 1, frozenset({0, 1}))
    p.place('a', 1, frozenset({2}))
    seen = p.host_usage(Usage(snc3), 'a', lambda uuid: ())
    assert seen.numa_l3 is snc3
    assert (seen.used_ways(0), seen.used_ways(1), seen.dedicated) == (3, 3, 2)


def test_other_requests_in_flight_count_on_the_host() -> None:
    p = passes.Pass(Holding(3))
    base = used(Holding(1))
    seen = p.host_usage(base, 'a', lambda uuid: (), [Holding(4), Holding(2)])
    assert (seen.used_ways(0), seen.dedicated) == (7, 3)
    assert base.used_ways(0) == 1
