"""ovs_rdt.agent.ovsdb without a server: the event and the snapshot."""
from __future__ import annotations

from typing import Any

from ovs_rdt.agent.ovsdb import KnobsEvent, Ovsdb


class Row:
    def __init__(self, **cols: Any) -> None:
        self.__dict__.update(cols)


def make() -> tuple[Ovsdb, list[int]]:
    wakes: list[int] = []
    return Ovsdb('unix:/nonexistent', 1, lambda: wakes.append(1)), wakes


def test_event_ignores_our_own_status_write() -> None:
    db, _ = make()
    ev = KnobsEvent(db)
    row = Row(other_config={}, external_ids={})
    assert ev.match_fn(ev.ROW_CREATE, row, None)
    assert ev.match_fn(ev.ROW_UPDATE, row, Row(other_config={}))
    assert ev.match_fn(ev.ROW_UPDATE, row, Row(cur_cfg=3))
    assert ev.match_fn(ev.ROW_UPDATE, row, Row(external_ids={}))
    assert not ev.match_fn(ev.ROW_UPDATE, row, Row(statistics={}))


def test_run_snapshots_and_wakes() -> None:
    db, wakes = make()
    ev = KnobsEvent(db)
    assert db.knobs() == (0, None)
    ev.run(ev.ROW_CREATE, Row(other_config={'rdt-pmd-l3-ways': '4'},
                              external_ids={}), None)
    assert db.knobs() == (1, {'rdt-pmd-l3-ways': '4'}) and len(wakes) == 1
    # Our status write echoed back: no wake-up, same sequence number.
    ev.run(ev.ROW_UPDATE, Row(other_config={'rdt-pmd-l3-ways': '4'},
                              external_ids={'rdt-status': 'ok: x'}),
           Row(external_ids={}))
    assert db.knobs()[0] == 1 and len(wakes) == 1
    # cur_cfg bump (ovs-vswitchd applied a change): wake, same knobs.
    ev.run(ev.ROW_UPDATE, Row(other_config={'rdt-pmd-l3-ways': '4'},
                              external_ids={}), Row(cur_cfg=2))
    assert db.knobs()[0] == 1 and len(wakes) == 2


def test_stop_before_connect_is_clean() -> None:
    db, _ = make()
    db.set_status('ok: x')
    db.start()
    db.stop()
    assert not db._thread.is_alive()


def test_port_events_wake_up() -> None:
    """ovs-vswitchd numbering a port added with --no-wait (no cur_cfg bump:
    the Open_vSwitch row does not change) may create PMD threads.
    """
    from ovs_rdt.agent.ovsdb import PORTS_TABLE, PortsEvent
    db, wakes = make()
    ev = PortsEvent(db)
    assert ev.table == PORTS_TABLE
    assert set(ev.events) == {ev.ROW_CREATE, ev.ROW_UPDATE, ev.ROW_DELETE}
    ev.run(ev.ROW_UPDATE, Row(ofport=[3]), Row(ofport=[]))
    ev.run(ev.ROW_DELETE, Row(ofport=[3]), None)
    assert len(wakes) == 2 and db.knobs() == (0, None)


def test_failed_status_write_warned_once(caplog: Any) -> None:
    """ovsdb-server up but refusing our writes (a read-only remote, a
    missing row): retried every RETRY seconds, warned about once.
    """
    import logging

    class Api:
        fail = True

        def db_set(self, *args: Any) -> Any:
            return self

        def execute(self, **kwargs: Any) -> None:
            if self.fail:
                raise RuntimeError('refused')

    db, _ = make()
    api = Api()
    db._api, db._conn = api, Row(idl=None)  # type: ignore[assignment]
    with caplog.at_level(logging.INFO, logger='ovs_rdt.agent.ovsdb'):
        for _ in range(20):
            assert not db._write('ok: x')
        api.fail = False
        assert db._write('ok: x')
    assert [r.levelname for r in caplog.records] == ['WARNING', 'INFO']


class Api:
    """A status write; ``rows``: what the IDL gives the event thread
    meanwhile (in order, before the write returns).
    """

    def __init__(self, db: Ovsdb, rows: list[dict[str, str]],
                 handled: bool = False) -> None:
        self.db, self.rows, self.handled = db, rows, handled

    def db_set(self, *args: Any) -> Any:
        return self

    def execute(self, **kwargs: Any) -> None:
        ev = KnobsEvent(self.db)
        assert self.db._handler is not None
        for ids in self.rows:
            self.db._handler.notifications.put((ev, ev.ROW_UPDATE, Row(
                other_config={}, external_ids=ids), Row(external_ids={})))
        if self.handled:            # the event thread was quick
            self.db._handler.notifications.join()


def writer(rows: list[dict[str, str]], handled: bool = False) -> Ovsdb:
    """An Ovsdb with ovsdbapp's real event thread, and a fake write."""
    from ovsdbapp.backend.ovs_idl import event as ovs_event

    db, _ = make()
    db._handler = ovs_event.RowEventHandler()
    db._api = Api(db, rows, handled)  # type: ignore[assignment]
    db._conn = Row(idl=None)  # type: ignore[assignment]
    return db


def test_a_row_after_the_write_s_own_is_newer() -> None:
    """The write's own row and then rdt-status removed by hand: written
    again, not taken as there (the write's success is not the database's
    state once a newer row came).
    """
    db = writer([{'rdt-status': 'ok: x'}, {}], handled=True)
    try:
        assert db._write('ok: x')
        assert db._db_status is None
    finally:
        assert db._handler is not None
        db._handler.shutdown()


def test_rows_older_than_the_write_do_not_undo_it() -> None:
    """A row from before the write (the removal's cur_cfg bump) handled
    after the write returned, then its own: nothing written twice.
    """
    db = writer([{}, {'rdt-status': 'ok: x'}])
    try:
        assert db._write('ok: x')
        assert db._db_status == 'ok: x'
    finally:
        assert db._handler is not None
        db._handler.shutdown()


def test_a_stuck_event_thread_does_not_make_it_write_again(
        monkeypatch: Any) -> None:
    from ovs_rdt.agent import ovsdb

    monkeypatch.setattr(ovsdb, 'BARRIER_WAIT', 0.1)
    db = writer([])
    assert db._handler is not None
    db._handler.shutdown()              # its thread ends: nothing handled
    db._handler.notify_thread.join(5)
    assert db._write('ok: x')
    assert db._db_status == 'ok: x'
