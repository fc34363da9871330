"""nova_plugin.usage: what a host's instances hold, with a fake adapter.

The fake reads plain objects the way nova_plugin.adapter reads Nova's
(tests/nova/test_adapter.py checks those reads inside Nova).
"""
from __future__ import annotations

import datetime
import logging
from typing import Any

import pytest

from nova_plugin import aggregates
from nova_plugin import throttle
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
        self.db: dict[str, Inst] = {}
        self.queries: list[list[str]] = []
        self.parsed = 0
        self.fail = False

    @staticmethod
    def private_slot(name: str) -> str:
        return '_ovs_rdt_' + name

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
    def utcnow() -> datetime.datetime:
        return datetime.datetime(2025, 1, 1)

    @staticmethod
    def is_loadable_stub(inst: Inst) -> bool:
        return inst.flavor is None and inst._context is not None

    def instance_loaded(self, inst: Inst) -> tuple | None:
        if inst.flavor is None:
            return None
        self.parsed += 1
        return inst.flavor, inst.cells

    def load_instances(self, stubs: list) -> dict[str, Inst]:
        self.queries.append([i.uuid for i in stubs])
        if self.fail:
            raise RuntimeError('db gone')
        return {i.uuid: self.db[i.uuid] for i in stubs if i.uuid in self.db}

    @staticmethod
    def flavor_extra_specs(flavor: Flavor) -> dict[str, str]:
        return flavor.extra_specs

    @staticmethod
    def flavor_name(flavor: Flavor) -> str:
        return flavor.name


@pytest.fixture
def nova() -> FakeAdapter:
    return FakeAdapter()


def ways(n: int, **kw: Any) -> Flavor:
    return Flavor(**{'rdt:l3_ways': str(n)}, **kw)


def of_host(usage: instance_usage.InstanceUsage, host: Host) -> Any:
    return usage.of_host(host, host.instances)


def test_instances_are_summed_per_domain(nova: FakeAdapter) -> None:
    host = Host('a', Inst('1', ways(3)), Inst('2', ways(2), frozenset({1})),
                Inst('3', Flavor(**{'rdt:pool': 'hp'})), Inst('4', Flavor()),
                Inst('5'))     # a stub of this request: holds nothing
    got = of_host(instance_usage.InstanceUsage(nova), host)
    assert (got.used_ways(0), got.used_ways(1)) == (3, 5)
    assert (got.dedicated, got.pools) == (2, {'hp': 1})


def test_cached_while_the_host_keeps_the_same_objects(
        nova: FakeAdapter) -> None:
    usage = instance_usage.InstanceUsage(nova)
    host = Host('a', Inst('1', ways(3)), Inst('2', ways(2)))
    first = of_host(usage, host)
    assert of_host(usage, host) is first
    assert nova.parsed == 2
    # a new Instance object (Nova replaces changed ones): recounted, the
    # unchanged instance is not parsed again
    host.instances['2'] = Inst('2', ways(4))
    assert of_host(usage, host).used_ways(0) == 7
    assert nova.parsed == 3


def test_invalid_specs_count_as_nothing_with_one_warning(
        nova: FakeAdapter, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    usage = instance_usage.InstanceUsage(nova)
    bad = Inst('1', Flavor('odd', **{'rdt:l3_ways': '3', 'rdt:pool': 'p'}))
    assert usage.holding(bad) is None
    assert usage.holding(bad) is None
    assert len(caplog.messages) == 1
    assert caplog.messages[0].startswith(
        'Instance 1 counted as holding no cache ways: its flavor odd has '
        'invalid extra specs: ')
    assert usage.holding(Inst('2', ways(2), frozenset({0}))) == \
        Holding(2, frozenset({0}))


def test_a_size_is_counted_with_the_clouds_smallest_way(
        nova: FakeAdapter, caplog: pytest.LogCaptureFixture) -> None:
    way_kib: list[int | None] = [3072]
    usage = instance_usage.InstanceUsage(nova, lambda: way_kib[0])
    sized = Flavor('sized', **{'rdt:l3_kib': '7680'})
    assert usage.holding(Inst('1', sized)) == Holding(3)
    assert usage.holding(Inst('2', sized, frozenset({1}))) == \
        Holding(3, frozenset({1}))
    way_kib[0] = None      # unset: counted as nothing, with a warning
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    assert usage.holding(Inst('3', sized)) is None
    assert caplog.messages == [
        'Instance 3 counted as holding no cache ways: its flavor sized has '
        'invalid extra specs: rdt:l3_kib cannot be counted: [ovs_rdt] '
        'rdt_l3_way_kib (the KiB of the smallest L3 way of the cloud) is not '
        'set']


def test_stubs_are_loaded_in_one_query_and_reused_per_host(
        nova: FakeAdapter, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(instance_usage.time, 'monotonic', lambda: now[0])
    nova.db = {'1': Inst('1', ways(4)), '2': Inst('2', ways(1),
                                                  frozenset({1}))}
    usage = instance_usage.InstanceUsage(nova)

    def stubs(name: str) -> Host:
        return Host(name, *(Inst(u, context='ctx') for u in ('1', '2', '3')))

    got = of_host(usage, stubs('a'))
    assert (got.used_ways(0), got.used_ways(1)) == (4, 5)
    assert nova.queries == [['1', '2', '3']]   # '3' was deleted: nothing
    # new stubs on the same host (a refresh): no query
    assert of_host(usage, stubs('a')).used_ways(1) == 5
    assert len(nova.queries) == 1
    # the same instances on another host (moved): loaded again
    of_host(usage, stubs('b'))
    assert len(nova.queries) == 2
    # after LOADED_TTL: loaded again
    now[0] += instance_usage.LOADED_TTL + 1
    of_host(usage, stubs('a'))
    assert len(nova.queries) == 3


def test_a_failed_load_fails_the_host_and_warns_once_a_minute(
        nova: FakeAdapter, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    now = [1000.0]
    monkeypatch.setattr(instance_usage.time, 'monotonic', lambda: now[0])
    nova.fail = True
    usage = instance_usage.InstanceUsage(nova)
    hosts = [Host(n, Inst('1', context='ctx'), Inst('2', ways(3)))
             for n in 'abc']
    assert [of_host(usage, h) for h in hosts] == [None] * 3
    assert len(caplog.messages) == 1
    assert 'could not load the flavors of the instances on a' in \
        caplog.messages[0]
    now[0] += throttle.WARN_INTERVAL
    nova.fail = False
    nova.db = {'1': Inst('1', ways(2))}
    assert of_host(usage, hosts[0]).used_ways(0) == 5   # not cached as None
    assert len(caplog.messages) == 1


def test_numa_cells_are_held_on_their_l3_domains(nova: FakeAdapter) -> None:
    snc3 = aggregates.host_numa_l3(('0:0;1:0;2:0;3:1;4:1;5:1',), None)
    host = Host('a', Inst('1', ways(3), frozenset({0, 1})),
                Inst('2', ways(2), frozenset({4})), Inst('3', ways(1)))
    got = instance_usage.InstanceUsage(nova).of_host(host, host.instances,
                                                     snc3)
    # nodes 0 and 1 share L3 0: held there once
    assert (got.used_ways(0), got.used_ways(1)) == (3 + 1, 2 + 1)
    assert got.numa_l3 is snc3


def test_the_cached_sum_follows_the_hosts_map(nova: FakeAdapter) -> None:
    usage = instance_usage.InstanceUsage(nova)
    host = Host('a', Inst('1', ways(3), frozenset({1})))
    plain = usage.of_host(host, host.instances)
    assert plain.used_ways(1) == 3
    assert usage.of_host(host, host.instances) is plain
    snc = aggregates.host_numa_l3(('0:0;1:0',), None)
    mapped = usage.of_host(host, host.instances, snc)
    assert mapped is not plain and mapped.used_ways(0) == 3
    # the same text gives the same object: the sum stays cached
    assert usage.of_host(host, host.instances, aggregates.host_numa_l3(
        ('0:0;1:0',), None)) is mapped
    assert nova.parsed == 1     # recounted, not parsed again
