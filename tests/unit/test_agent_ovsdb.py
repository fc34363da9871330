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
