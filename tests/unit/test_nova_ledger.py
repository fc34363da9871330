"""nova_plugin.ledger: where instances hold their ways, with a fake adapter.

The fake's database holds :class:`InstanceState` / :class:`MigrationState`
tuples as the adapter would make them of Nova's objects
(tests/nova/test_adapter.py checks those reads inside Nova; the moves
themselves run through Nova in tests/nova_functional).
"""
from __future__ import annotations

import datetime
from typing import Any

import pytest

from nova_plugin import ledger as ledger_mod
from nova_plugin.ledger import InstanceState, Ledger, MigrationState
from ovs_rdt.core.capacity import Holding

T0 = datetime.datetime(2025, 1, 1)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


class Flavor:
    def __init__(self, ways: int) -> None:
        self.ways = ways


def holding(uuid: str, flavor: Any, cells: frozenset[int] | None
            ) -> Holding | None:
    return None if flavor is None or not flavor.ways else \
        Holding(flavor.ways, cells)


def inst(uuid: str, host: str | None, ways: int, changed: float, *,
         gone: bool = False, deleted: bool = False,
         cells: frozenset[int] | None = None, old: int | None = None,
         new: int | None = None, flavor_id: int | None = None
         ) -> InstanceState:
    return InstanceState(
        uuid=uuid, changed=at(changed), gone=gone or deleted,
        deleted=deleted, host=(host, host) if host else None,
        flavor=Flavor(ways), flavor_id=ways if flavor_id is None
        else flavor_id, cells=cells,
        old_flavor=Flavor(old) if old is not None else None, old_cells=cells,
        new_flavor=Flavor(new) if new is not None else None, new_cells=cells)


def mig(uuid: str, source: str, dest: str | None, changed: float, *,
        in_progress: bool = True, id: int = 1, old: int = 0,
        new: int = 0) -> MigrationState:
    return MigrationState(
        id=id, instance_uuid=uuid, changed=at(changed),
        in_progress=in_progress, source=(source, source),
        dest=(dest, dest) if dest else None, old_flavor_id=old,
        new_flavor_id=new)


class FakeNova:
    """The adapter's database and Placement readers over plain tuples."""

    def __init__(self) -> None:
        self.now = at(100)
        self.instances: dict[str, InstanceState] = {}
        self.migrations: list[MigrationState] = []
        self.allocations: dict[str, list[str]] = {}
        self.reads: list[Any] = []
        self.loads: list[list[str]] = []
        self.fail = False
        self.counts: dict[str, int] = {}

    def utcnow(self) -> datetime.datetime:
        return self.now

    @staticmethod
    def cell_context(context: Any, cell: Any) -> Any:
        return (context, cell)

    def changed_instances(self, cctxt: Any, since: Any) -> list:
        if self.fail:
            raise RuntimeError('db gone')
        self.reads.append(since)
        return [(u, (i.changed, i.deleted)) for u, i in self.instances.items()
                if i.changed >= since]

    def changed_migrations(self, cctxt: Any, since: Any) -> list:
        return [m for m in self.migrations if m.changed >= since]

    def host_migrations(self, cctxt: Any, host: Any) -> list:
        return [m for m in self.migrations
                if m.in_progress and host in (m.source, m.dest)]

    def instances_by_uuid(self, cctxt: Any, uuids: Any) -> list:
        self.loads.append(sorted(uuids))
        return [self.instances[u] for u in uuids if u in self.instances]

    @staticmethod
    def instance_state(inst: InstanceState) -> InstanceState:
        return inst

    @staticmethod
    def migration_state(m: MigrationState) -> MigrationState:
        return m

    def allocation_providers(self, context: Any, uuid: str) -> list[str]:
        return list(self.allocations.get(uuid, ()))

    def placements(self, host_state: Any) -> int:
        return self.counts.get(host_state, 0)


@pytest.fixture
def nova() -> FakeNova:
    return FakeNova()


def held(led: Ledger, host: str) -> dict[str, list[int]]:
    return {u: [h.ways for h in hs]
            for u, hs in led.on_host((host, host)).items()}


# -- placements: as the resource tracker counts -------------------------------
def place(inst: InstanceState, mig: MigrationState | None,
          holding: Any) -> tuple:
    return ledger_mod.placements(ledger_mod.held_of(inst, holding), mig)


def test_an_instance_holds_its_flavor_on_its_host() -> None:
    i = inst('a', 'h1', 4, 1, cells=frozenset({1}))
    assert place(i, None, holding) == \
        ((('h1', 'h1'), Holding(4, frozenset({1}))),)
    assert place(i._replace(gone=True), None, holding) == ()
    assert place(inst('b', None, 4, 1), None, holding) == ()


def test_a_move_holds_both_sides_until_confirmed_or_reverted() -> None:
    # resize h1 -> h2, 4 -> 6: before the destination finished, the
    # instance is on h1 with 4 and h2 holds 6; after, on h2 with 6 and h1
    # holds 4 for a revert
    before = inst('a', 'h1', 4, 1, new=6)
    after = inst('a', 'h2', 6, 2, old=4)
    moving = mig('a', 'h1', 'h2', 1, old=4, new=6)
    assert place(before, moving, holding) == (
        (('h1', 'h1'), Holding(4)), (('h2', 'h2'), Holding(6)))
    assert place(after, moving, holding) == (
        (('h2', 'h2'), Holding(6)), (('h1', 'h1'), Holding(4)))
    done = moving._replace(in_progress=False)
    assert place(after, done, holding) == (
        (('h2', 'h2'), Holding(6)),)
    # no destination yet (being scheduled): the source only
    assert place(before, moving._replace(dest=None), holding) == (
        (('h1', 'h1'), Holding(4)),)


def test_a_resize_in_place_holds_both_flavors() -> None:
    in_place = mig('a', 'h1', 'h1', 1, old=4, new=5)
    # before the finish: flavor 4 (id 4), the new 5 added
    assert place(inst('a', 'h1', 4, 1, new=5), in_place, holding) == (
        (('h1', 'h1'), Holding(4)), (('h1', 'h1'), Holding(5)))
    # after: flavor 5 (id 5), the old 4 added
    assert place(inst('a', 'h1', 5, 2, old=4), in_place, holding) == (
        (('h1', 'h1'), Holding(5)), (('h1', 'h1'), Holding(4)))


# -- refresh: the database's changes ------------------------------------------
def test_changed_instances_override_the_view(nova: FakeNova) -> None:
    led = Ledger(nova, holding)
    assert led.version == 0 and not led.tracks('a')
    nova.instances['a'] = inst('a', 'h1', 4, 150)
    led.refresh('ctx', 'cell1', [('h1', 'h1')])
    assert led.tracks('a') and held(led, 'h1') == {'a': [4]}
    # the first read reaches back to when the ledger was made
    assert nova.reads == [at(100 - ledger_mod.OVERLAP)]
    version = led.version
    nova.now = at(200)
    led.refresh('ctx', 'cell1')
    assert nova.reads[-1] == at(100 - ledger_mod.OVERLAP)
    assert nova.loads == [['a']]      # unchanged: not loaded again
    assert led.version == version
    nova.now = at(300)
    led.refresh('ctx', 'cell1')
    assert nova.reads[-1] == at(200 - ledger_mod.OVERLAP)


def test_moves_in_progress_of_a_new_host_whatever_their_age(
        nova: FakeNova) -> None:
    nova.instances['a'] = inst('a', 'h2', 6, 1, old=4)     # long ago
    nova.migrations.append(mig('a', 'h1', 'h2', 1, old=4, new=6))
    led = Ledger(nova, holding)
    led.refresh('ctx', 'cell1')
    assert held(led, 'h1') == {}
    led.refresh('ctx', 'cell1', [('h1', 'h1')])
    assert held(led, 'h1') == {'a': [4]} and held(led, 'h2') == {'a': [6]}
    # confirmed: the source's ways go
    nova.now = at(150)
    nova.migrations[0] = nova.migrations[0]._replace(in_progress=False,
                                                     changed=at(150))
    nova.instances['a'] = nova.instances['a']._replace(changed=at(150))
    led.refresh('ctx', 'cell1')
    assert held(led, 'h1') == {} and held(led, 'h2') == {'a': [6]}


def test_deleted_instances_hold_nothing_and_are_forgotten_later(
        nova: FakeNova, monkeypatch: pytest.MonkeyPatch) -> None:
    led = Ledger(nova, holding)
    nova.instances['a'] = inst('a', 'h1', 4, 150)
    led.refresh('ctx', 'cell1')
    nova.instances['a'] = inst('a', 'h1', 4, 160, deleted=True)
    led.refresh('ctx', 'cell1')
    assert held(led, 'h1') == {} and led.tracks('a')   # the view: ignored
    monkeypatch.setattr(ledger_mod, 'GONE_TTL', -1.0)
    led.refresh('ctx', 'cell1')
    assert not led.tracks('a')


def test_a_failed_read_applies_nothing(nova: FakeNova) -> None:
    led = Ledger(nova, holding)
    nova.instances['a'] = inst('a', 'h1', 4, 150)
    nova.fail = True
    with pytest.raises(RuntimeError):
        led.refresh('ctx', 'cell1')
    assert not led.tracks('a')
    nova.fail = False
    led.refresh('ctx', 'cell1')
    assert nova.reads == [at(100 - ledger_mod.OVERLAP)]   # from the start


def test_a_failed_instance_read_keeps_the_moves_it_saw_for_later(
        nova: FakeNova) -> None:
    """A move read before the instances' read failed is read again: the
    ledger stored it before and the next read found nothing new, so the
    move's destination was never counted.
    """
    led = Ledger(nova, holding)
    nova.instances['a'] = inst('a', 'h2', 6, 150)
    led.refresh('ctx', 'c', [('h1', 'h1'), ('h2', 'h2')])
    assert held(led, 'h2') == {'a': [6]}
    nova.now = at(300)
    nova.migrations.append(mig('a', 'h2', 'h1', 250, old=6, new=6))
    nova.instances['b'] = inst('b', 'h3', 2, 250)   # one more to load

    def failing(context: Any, uuids: Any) -> Any:
        raise RuntimeError('database unreachable')
    loader = nova.instances_by_uuid
    nova.instances_by_uuid = failing               # type: ignore
    with pytest.raises(RuntimeError):
        led.refresh('ctx', 'c')
    nova.instances_by_uuid = loader                # type: ignore
    led.refresh('ctx', 'c')
    assert held(led, 'h1') == {'a': [6]}
    assert held(led, 'h2') == {'a': [6]}


# -- expected instances: Placement knows before the database -------------------
def test_an_expected_instance_counts_where_placement_has_it(
        nova: FakeNova) -> None:
    led = Ledger(nova, holding)
    spec = object.__new__(type('Spec', (), {}))
    seq = led.expect('b', Holding(5, frozenset({0})), spec)
    led.passed('b', ['hs1'])
    nova.allocations['b'] = ['rp1']
    providers = {'rp1': ('h1', 'h1')}
    other = type('Spec', (), {})()
    later = led.expect('c', Holding(1), other)
    assert later > seq
    led.settle('ctx', providers, {'c'}, later)
    # on every domain: its NUMA cells are not known yet
    assert led.on_host(('h1', 'h1')) == {'b': [Holding(5)]}
    # the compute claimed it: the database has it, the expectation goes
    nova.instances['b'] = inst('b', 'h1', 5, 101, cells=frozenset({0}))
    led.refresh('ctx', 'cell1')
    led.settle('ctx', providers, {'c'}, later)
    assert held(led, 'h1') == {'b': [5]}


def test_a_later_request_waits_for_an_earlier_ones_claim(
        nova: FakeNova, monkeypatch: pytest.MonkeyPatch) -> None:
    led = Ledger(nova, holding)
    first, second = type('S', (), {})(), type('S', (), {})()
    led.expect('a', Holding(5), first)
    led.passed('a', ['hs1'])
    before = led.expect('b', Holding(5), second)
    slept = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 3:          # the earlier request claims meanwhile
            nova.allocations['a'] = ['rp1']
    monkeypatch.setattr(ledger_mod.time, 'sleep', sleep)
    led.settle('ctx', {'rp1': ('h1', 'h1')}, {'b'}, before)
    assert len(slept) == 3 and held(led, 'h1') == {'a': [5]}
    # the earlier request does not wait for the later one
    slept.clear()
    led.passed('b', ['hs1'])
    led.settle('ctx', {'rp1': ('h1', 'h1')}, {'a'}, 1)
    assert slept == []


def test_a_request_that_will_not_be_claimed_is_not_waited_for(
        nova: FakeNova, monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(ledger_mod.time, 'sleep', slept.append)
    led = Ledger(nova, holding)
    first, second = type('S', (), {})(), type('S', (), {})()
    led.expect('a', Holding(5), first)
    led.passed('a', [])              # no host passed: it fails
    led.expect('c', Holding(5), second)
    led.passed('c', ['hs1'])
    nova.counts['hs1'] = 1           # a host it passed was consumed
    third = type('S', (), {})()
    led.expect('d', Holding(5), third)
    led.passed('d', ['hs2'])
    led.drop('d')                    # a question, not a placement
    last = led.expect('e', Holding(5), type('S', (), {})())
    led.settle('ctx', {}, {'e'}, last)
    assert slept == []
    # and nothing is allocated to them: they hold nothing, and are gone
    assert led.on_host(('h1', 'h1')) == {}
    nova.allocations['c'] = ['rp1']
    led.settle('ctx', {'rp1': ('h1', 'h1')}, {'e'}, last)
    assert led.on_host(('h1', 'h1')) == {}
