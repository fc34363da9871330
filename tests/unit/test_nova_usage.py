"""nova_plugin.usage: what a host's instances hold, with a fake adapter.

The fake reads plain objects the way nova_plugin.adapter reads Nova's
(tests/nova/test_adapter.py checks those reads inside Nova).
"""
from __future__ import annotations

import functools
import logging
from typing import Any

import pytest

from nova_plugin import aggregates
from nova_plugin import usage as instance_usage
from ovs_rdt.core.capacity import Holding


class Flavor:
    def __init__(self, name: str = 'f', **extra: str) -> None:
        self.name, self.extra_specs = name, extra


class Inst:
    """A loaded instance (flavor set) or a bare stub (flavor None)."""

    def __init__(self, uuid: str, flavor: Flavor | None = None,
                 cells: frozenset[int] | None = None,
                 context: Any = None) -> None:
        self.uuid, self.flavor, self.cells = uuid, flavor, cells
        self._context = context


class Host:
    def __init__(self, name: str, *instances: Inst) -> None:
        self.host, self.nodename = name, 'node-' + name
        self.instances = {i.uuid: i for i in instances}


class FakeAdapter:
    """nova_plugin.adapter's readers over the objects above."""

    def __init__(self) -> None:
        self.parsed = 0

    @staticmethod
    def cached(obj: Any, slot: str, default: Any = None) -> Any:
        return getattr(obj, slot, default)

    @staticmethod
    def cache(obj: Any, slot: str, value: Any) -> None:
        setattr(obj, slot, value)

    @staticmethod
    def same_instances(old: tuple, new: tuple) -> bool:
        return old == new   # Inst compares by identity, as Instance does

    @staticmethod
    def host_key(host: Host) -> tuple[str, str]:
        return host.host, host.nodename

    @staticmethod
    def stub_context(inst: Inst) -> Any:
        return inst._context if inst.flavor is None else None

    def instance_loaded(self, inst: Inst) -> tuple | None:
        if inst.flavor is None:
            return None
        self.parsed += 1
        return inst.flavor, inst.cells

    @staticmethod
    def flavor_extra_specs(flavor: Flavor) -> dict[str, str]:
        return flavor.extra_specs

    @staticmethod
    def flavor_name(flavor: Flavor) -> str:
        return flavor.name


class FakeLedger:
    """What the ledger has read: instances placed per host."""

    def __init__(self) -> None:
        self.version = 0
        self.placed: dict[tuple, dict[str, list[Holding]]] = {}

    def on_host(self, host: tuple) -> dict[str, list[Holding]]:
        return dict(self.placed.get(host, {}))

    def tracks(self, uuid: str) -> bool:
        return any(uuid in held for held in self.placed.values())

    def view(self, host: tuple, uuids: Any) -> tuple:
        return (self.version, self.on_host(host),
                {u for u in uuids if not self.tracks(u)})


@pytest.fixture
def nova() -> FakeAdapter:
    return FakeAdapter()


def ways(n: int, **kw: Any) -> Flavor:
    return Flavor(**{'rdt:l3_ways': str(n)}, **kw)


def holding_of(nova: FakeAdapter, way_kib: int | None = None) -> Any:
    return functools.partial(instance_usage.flavor_holding, nova,
                             way_kib=way_kib)


def of_host(nova: FakeAdapter, host: Host, led: Any = None,
            numa_l3: Any = None, read_stubs: Any = None) -> Any:
    return instance_usage.of_host(nova, led or FakeLedger(), host,
                                  host.instances, numa_l3, holding_of(nova),
                                  read_stubs or (lambda context, uuids: True))


def test_stubs_are_given_to_the_ledger_first(nova: FakeAdapter) -> None:
    """Bare stubs the ledger has not read: read (once per host and
    instance set), then counted where the ledger has them; a failed read
    fails the host (None).
    """
    led = FakeLedger()
    host = Host('a', Inst('1', context='cell'), Inst('2', ways(2)),
                Inst('3'))      # no context: this request's own, skipped
    asked = []

    def read(context: Any, uuids: list[str]) -> bool:
        asked.append((context, uuids))
        led.placed[('a', 'node-a')] = {'1': [Holding(4)]}
        led.version += 1
        return True
    assert of_host(nova, host, led, read_stubs=read).used_ways(0) == 6
    assert asked == [('cell', ['1'])]
    assert of_host(nova, host, led, read_stubs=read).used_ways(0) == 6
    assert len(asked) == 1
    other = Host('b', Inst('9', context='cell'))
    assert of_host(nova, other, led,
                   read_stubs=lambda context, uuids: False) is None


def test_instances_are_summed_per_domain(nova: FakeAdapter) -> None:
    host = Host('a', Inst('1', ways(3)), Inst('2', ways(2), frozenset({1})),
                Inst('3', Flavor(**{'rdt:pool': 'hp'})), Inst('4', Flavor()),
                Inst('5'))     # a stub of this request: holds nothing
    got = of_host(nova, host)
    assert (got.used_ways(0), got.used_ways(1)) == (3, 5)
    assert (got.dedicated, got.pools) == (2, {'hp': 1})


def test_the_ledgers_instances_count_where_it_places_them(
        nova: FakeAdapter) -> None:
    """An instance the ledger read counts where it has it (here: the
    other side of a move, and not at the view's old flavor).
    """
    led = FakeLedger()
    host = Host('a', Inst('1', ways(3)), Inst('2', ways(2)))
    led.placed[('a', 'node-a')] = {'2': [Holding(5), Holding(2)],
                                   '9': [Holding(1)]}
    got = of_host(nova, host, led)
    assert got.used_ways(0) == 3 + 5 + 2 + 1
    assert instance_usage.holdings_on(nova, led, ('a', 'node-a'),
                                      host.instances, '2',
                                      holding_of(nova)) == \
        [Holding(5), Holding(2)]
    assert instance_usage.holdings_on(nova, led, ('a', 'node-a'),
                                      host.instances, '1',
                                      holding_of(nova)) == [Holding(3)]
    assert instance_usage.holdings_on(nova, led, ('a', 'node-a'),
                                      host.instances, '7',
                                      holding_of(nova)) == []


def test_cached_while_the_host_keeps_the_same_objects(
        nova: FakeAdapter) -> None:
    led = FakeLedger()
    host = Host('a', Inst('1', ways(3)), Inst('2', ways(2)))
    first = of_host(nova, host, led)
    assert of_host(nova, host, led) is first
    assert nova.parsed == 2
    # a new Instance object (Nova replaces changed ones): recounted, the
    # unchanged instance is not parsed again
    host.instances['2'] = Inst('2', ways(4))
    assert of_host(nova, host, led).used_ways(0) == 7
    assert nova.parsed == 3
    # the ledger changed: recounted
    cached = of_host(nova, host, led)
    led.version += 1
    assert of_host(nova, host, led) is not cached


def test_invalid_specs_count_as_nothing_with_one_warning(
        nova: FakeAdapter, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    bad = Inst('1', Flavor('odd', **{'rdt:l3_ways': '3', 'rdt:pool': 'p'}))

    def holding(inst: Inst) -> Holding | None:
        return instance_usage.instance_holding(nova, inst, holding_of(nova))
    assert holding(bad) is None
    assert holding(bad) is None
    assert len(caplog.messages) == 1
    assert caplog.messages[0].startswith(
        'Instance 1 counted as holding no cache ways: its flavor odd has '
        'invalid extra specs: ')
    assert holding(Inst('2', ways(2), frozenset({0}))) == \
        Holding(2, frozenset({0}))


def test_a_size_is_counted_with_the_clouds_smallest_way(
        nova: FakeAdapter, caplog: pytest.LogCaptureFixture) -> None:
    sized = Flavor('sized', **{'rdt:l3_kib': '7680'})
    held = holding_of(nova, 3072)
    assert held('1', sized, None) == Holding(3)
    assert held('2', sized, frozenset({1})) == Holding(3, frozenset({1}))
    # unset: counted as nothing, with a warning
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    assert holding_of(nova)('3', sized, None) is None
    assert caplog.messages == [
        'Instance 3 counted as holding no cache ways: its flavor sized has '
        'invalid extra specs: rdt:l3_kib cannot be counted: [ovs_rdt] '
        'rdt_l3_way_kib (the KiB of the smallest L3 way of the cloud) is not '
        'set']


def test_numa_cells_are_held_on_their_l3_domains(nova: FakeAdapter) -> None:
    snc3 = aggregates.host_numa_l3(('0:0;1:0;2:0;3:1;4:1;5:1',), None)
    host = Host('a', Inst('1', ways(3), frozenset({0, 1})),
                Inst('2', ways(2), frozenset({4})), Inst('3', ways(1)))
    got = of_host(nova, host, numa_l3=snc3)
    # nodes 0 and 1 share L3 0: held there once
    assert (got.used_ways(0), got.used_ways(1)) == (3 + 1, 2 + 1)
    assert got.numa_l3 is snc3


def test_the_cached_sum_follows_the_hosts_map(nova: FakeAdapter) -> None:
    led = FakeLedger()
    host = Host('a', Inst('1', ways(3), frozenset({1})))
    plain = of_host(nova, host, led)
    assert plain.used_ways(1) == 3
    assert of_host(nova, host, led) is plain
    snc = aggregates.host_numa_l3(('0:0;1:0',), None)
    mapped = of_host(nova, host, led, snc)
    assert mapped is not plain and mapped.used_ways(0) == 3
    # the same text gives the same object: the sum stays cached
    assert of_host(nova, host, led, aggregates.host_numa_l3(
        ('0:0;1:0',), None)) is mapped
    assert nova.parsed == 1     # recounted, not parsed again
