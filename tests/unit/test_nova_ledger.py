"""nova_plugin.ledger: where instances hold their ways, with a fake adapter.

The fake's database holds :class:`InstanceState` / :class:`MigrationState`
tuples as the adapter would make them of Nova's objects
(tests/nova/test_adapter.py checks those reads inside Nova; the moves
themselves run through Nova in tests/nova_functional).
"""
from __future__ import annotations

import datetime
import threading
import time
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


@pytest.fixture
def nova() -> FakeNova:
    return FakeNova()


def held(led: Ledger, host: str) -> dict[str, list[int]]:
    return {u: [h.ways for h in hs]
            for u, hs in led.on_host((host, host)).items()}


# -- holdings: as the resource tracker counts -------------------------------
def place(inst: InstanceState, mig: MigrationState | None,
          holding: Any) -> tuple:
    return ledger_mod.holdings(ledger_mod.known(inst, holding), mig)


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


# -- reads in parallel: no lock held, the later read's state wins ---------------
def test_two_reads_at_once_do_not_wait_for_each_other(
        nova: FakeNova) -> None:
    """A slowed cell read (one request's) does not hold up another
    request's read of the same cell, and what the slow read returns does
    not replace the newer state the other read applied.
    """
    led = Ledger(nova, holding)
    nova.instances['a'] = inst('a', 'h1', 4, 150)
    entered, release = threading.Event(), threading.Event()
    real = nova.instances_by_uuid

    def slowed(cctxt: Any, uuids: Any) -> list:
        found = real(cctxt, uuids)
        if cctxt == ('slow', 'cell1'):
            entered.set()
            assert release.wait(10), 'never released'
        return found
    nova.instances_by_uuid = slowed                # type: ignore
    errors: list[BaseException] = []

    def read_slowly() -> None:
        try:
            led.refresh('slow', 'cell1')
        except BaseException as exc:   # pragma: no cover - shown below
            errors.append(exc)
    slow_read = threading.Thread(target=read_slowly)
    slow_read.start()
    assert entered.wait(10)
    # meanwhile 'a' moves to h2; another request reads at once
    nova.instances['a'] = inst('a', 'h2', 4, 160)
    started = time.monotonic()
    led.refresh('fast', 'cell1')
    assert time.monotonic() - started < 1, 'the second read waited'
    assert held(led, 'h2') == {'a': [4]} and held(led, 'h1') == {}
    release.set()
    slow_read.join(10)
    assert not slow_read.is_alive() and errors == []
    # the slow read began first: its h1 does not replace the newer h2
    assert held(led, 'h2') == {'a': [4]} and held(led, 'h1') == {}


def test_a_state_read_earlier_never_replaces_a_newer_one(
        nova: FakeNova) -> None:
    """By when it changed, whichever read began first: a read that began
    later may have queried first.
    """
    led = Ledger(nova, holding)
    nova.instances['x'] = inst('x', 'h1', 4, 150)
    led.refresh('ctx', 'cell1')
    with led._lock:
        led._apply(3, [inst('x', 'h2', 4, 160)], ())
        led._apply(4, [inst('x', 'h1', 4, 150)], ())
    assert held(led, 'h2') == {'x': [4]} and held(led, 'h1') == {}


# -- bare stubs of a host's view --------------------------------------------------
def test_stubs_are_read_once_and_a_purged_one_holds_nothing(
        nova: FakeNova) -> None:
    led = Ledger(nova, holding)
    nova.instances['a'] = inst('a', 'h1', 4, 1)        # long unchanged
    led.load(('ctx', 'cell1'), ['a', 'purged'])
    assert nova.loads == [['a', 'purged']]
    assert held(led, 'h1') == {'a': [4]}
    assert led.tracks('a') and led.tracks('purged')
    # a stub listed on h3 that the database has on h1 counts on h1 only
    assert held(led, 'h3') == {}


# -- instances in flight: where they may still land ------------------------------
H1, H2 = ('h1', 'h1'), ('h2', 'h2')
RPS = {'rp1': H1, 'rp2': H2}


def flight(led: Ledger, seq: int, order: int | None = None
           ) -> list[tuple[Any, int]]:
    return sorted((((None if hosts is None else tuple(h for h, _ in hosts)),
                    held.ways) for hosts, held in led.in_flight(seq, order)),
                  key=repr)


def test_an_instance_in_flight_narrows_to_where_it_may_land(
        nova: FakeNova) -> None:
    """Being filtered: every host, for instances expected after it;
    passed: the hosts the filter passed; claimed: those of them where
    Placement has it; placed by the database: the ledger's count, no
    longer in flight.
    """
    led = Ledger(nova, holding)
    a = led.expect('a', Holding(5, frozenset({0})), 1)
    b = led.expect('b', Holding(3), 2)
    assert a < b
    assert flight(led, 2, b) == [(None, 5)]      # expected later: counts a
    assert flight(led, 1, a) == []               # earlier: not b, nor itself
    led.passed('a', [H1, H2])
    led.passed('b', [H2])
    assert flight(led, 1, a) == [(('h2',), 3)]
    assert flight(led, 3) == [(('h1', 'h2'), 5), (('h2',), 3)]
    nova.allocations['a'] = ['rp1']
    led.look_up('ctx', RPS, 3)
    # on every domain: its NUMA cells are not known yet
    assert led.in_flight(3)[0] == (((H1),), Holding(5))
    # the compute claimed it: the database has it, it is no longer in flight
    nova.instances['a'] = inst('a', 'h1', 5, 101, cells=frozenset({0}))
    led.refresh('ctx', 'cell1')
    led.look_up('ctx', RPS, 3)
    assert held(led, 'h1') == {'a': [5]}
    assert flight(led, 3) == [(('h2',), 3)]


def test_interleaved_requests_the_later_instance_counts_the_other(
        nova: FakeNova) -> None:
    """Multi-create A claimed a0; boot B is expected; A's a1 is expected
    after B: a1 counts B, being filtered, on every host (request numbers
    alone would let each miss the other).
    """
    led = Ledger(nova, holding)
    led.expect('a0', Holding(4), 1)
    led.passed('a0', [H1])
    b = led.expect('b', Holding(4), 2)
    assert flight(led, 2, b) == [(('h1',), 4)]
    a1 = led.expect('a1', Holding(4), 1)
    assert flight(led, 1, a1) == [(None, 4)]
    assert flight(led, 2, b) == [(('h1',), 4)]     # a1: expected after b


def test_an_instance_that_is_not_claimed_stops_counting(
        nova: FakeNova, monkeypatch: pytest.MonkeyPatch) -> None:
    led = Ledger(nova, holding)
    led.expect('a', Holding(5), 1)
    led.passed('a', [])                  # no host passed: its request fails
    led.expect('d', Holding(5), 2)
    led.passed('d', [H1])
    led.drop('d')                        # a question, not a placement
    assert flight(led, 9) == []
    led.expect('c', Holding(5), 3)
    led.passed('c', [H1])
    led.look_up('ctx', {}, 9)
    assert flight(led, 9) == [(('h1',), 5)]
    # claimed, then the claim is gone (a later instance of its multi-create
    # failed, and Nova dropped the claims of the request)
    led.expect('m', Holding(2), 4)
    led.passed('m', [H1, H2])
    nova.allocations['m'] = ['rp2']
    led.look_up('ctx', RPS, 9)
    assert flight(led, 9) == [(('h1',), 5), (('h2',), 2)]
    del nova.allocations['m']
    led.look_up('ctx', {}, 9)
    assert flight(led, 9) == [(('h1',), 5)]
    # claimed, as the next instance of its request is filtered, and
    # dropped before another request looked
    led.expect('n1', Holding(2), 5)
    led.passed('n1', [H2])
    led.expect('n2', Holding(2), 5)
    led.passed('n2', [])               # fails: the request's claims go
    led.look_up('ctx', {}, 9)
    assert flight(led, 9) == [(('h1',), 5)]
    # no claim within UNCLAIMED_TTL of its pass: it failed after the filter
    monkeypatch.setattr(ledger_mod, 'UNCLAIMED_TTL', -1.0)
    led.look_up('ctx', {}, 9)
    assert flight(led, 9) == []


def test_a_claimed_instance_counts_however_long_its_compute_takes(
        nova: FakeNova, monkeypatch: pytest.MonkeyPatch) -> None:
    led = Ledger(nova, holding)
    led.expect('a', Holding(4), 1)
    led.passed('a', [H1])
    nova.allocations['a'] = ['rp1']
    led.look_up('ctx', RPS, 2)
    monkeypatch.setattr(ledger_mod, 'UNCLAIMED_TTL', -1.0)
    led.look_up('ctx', RPS, 3)
    assert flight(led, 3) == [(('h1',), 4)]
    monkeypatch.setattr(ledger_mod, 'IN_FLIGHT_TTL', -1.0)
    led.look_up('ctx', RPS, 3)
    assert flight(led, 3) == []


def test_filtered_again_for_alternates_a_claimed_instance_stays(
        nova: FakeNova) -> None:
    """Nova filters a multi-create's last instance again for its
    alternates (same uuid, same request): what it passes then, or that it
    passes nothing, does not move or drop its claim.
    """
    led = Ledger(nova, holding)
    led.expect('a0', Holding(4), 1)
    led.passed('a0', [H1, H2])
    led.expect('a1', Holding(4), 1)
    led.passed('a1', [H2])
    nova.allocations.update(a0=['rp1'], a1=['rp2'])
    led.expect('a1', Holding(4), 1)
    led.passed('a1', [])
    led.look_up('ctx', RPS, 2)
    assert flight(led, 2) == [(('h1',), 4), (('h2',), 4)]


def test_a_claim_made_during_a_look_up_is_not_taken_for_a_dropped_one(
        nova: FakeNova) -> None:
    led = Ledger(nova, holding)
    led.expect('a0', Holding(4), 1)
    led.passed('a0', [H1, H2])
    real = nova.allocation_providers

    def racing(context: Any, uuid: str) -> list[str]:
        found = real(context, uuid)          # not claimed yet
        nova.allocations['a0'] = ['rp1']     # Nova claims a0 ...
        led.expect('a1', Holding(4), 1)      # ... and filters a1
        return found
    nova.allocation_providers = racing               # type: ignore
    led.look_up('ctx', RPS, 2)
    nova.allocation_providers = real                 # type: ignore
    assert (('h1', 'h2'), 4) in flight(led, 2)
    led.look_up('ctx', RPS, 2)
    assert (('h1',), 4) in flight(led, 2)


def test_an_evacuated_instance_counts_where_it_passed(
        nova: FakeNova) -> None:
    """An evacuation keeps the source's allocation: before the scheduler
    claims the destination, Placement has it on no host it passed.
    """
    led = Ledger(nova, holding)
    nova.allocations['e'] = ['rp1']
    led.expect('e', Holding(4), 1)
    led.passed('e', [H2])
    led.look_up('ctx', RPS, 2)
    assert flight(led, 2) == [(('h2',), 4)]
    nova.allocations['e'] = ['rp1', 'rp2']     # claimed on the destination
    led.look_up('ctx', RPS, 2)
    assert flight(led, 2) == [(('h2',), 4)]


def test_a_deleted_instance_in_flight_stops_counting(nova: FakeNova) -> None:
    led = Ledger(nova, holding)
    led.expect('a', Holding(5), 1)
    led.passed('a', [H1])
    nova.allocations['a'] = ['rp1']
    nova.instances['a'] = inst('a', None, 5, 120, deleted=True)
    led.refresh('ctx', 'cell1')
    led.look_up('ctx', RPS, 2)
    assert flight(led, 2) == []


def test_a_failed_look_up_applies_nothing(nova: FakeNova) -> None:
    led = Ledger(nova, holding)
    led.expect('a', Holding(5), 1)
    led.passed('a', [H1, H2])
    nova.allocations['a'] = ['rp2']

    def failing(context: Any, uuid: str) -> list:
        raise RuntimeError('placement unreachable')
    nova.allocation_providers = failing           # type: ignore
    with pytest.raises(RuntimeError):
        led.look_up('ctx', RPS, 2)
    assert flight(led, 2) == [(('h1', 'h2'), 5)]
