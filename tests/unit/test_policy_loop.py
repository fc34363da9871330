"""PolicyLoop against a reload: a decision in flight finishes first."""
from __future__ import annotations

import threading
import time
from typing import Any

from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent import policy as agent_policy
from ovs_rdt.core import policy as pol

BOUNDS = pol.Bounds('hp', 'noisy', 3, 8, 2, 0.1)


class Settings:
    class resctrl:
        root = '/nonexistent-resctrl'


class SlowManager:
    """Holds a resplit until told to go; records what happened when."""

    def __init__(self, events: list[str], go: threading.Event) -> None:
        self.events, self.go = events, go

    def resplit(self, *args: Any) -> None:
        self.events.append('resplit started')
        self.go.wait(5)
        self.events.append('resplit done')


def test_reload_waits_for_the_decision_in_flight(tmp_path, monkeypatch
                                                 ) -> None:
    events: list[str] = []
    go = threading.Event()
    loop = agent_policy.PolicyLoop(lambda s: SlowManager(events, go),
                                   Counters(), lambda: (frozenset(), None),
                                   state_dir=str(tmp_path))
    monkeypatch.setattr(agent_policy, 'Reader', lambda manager: object())
    assert loop.prepare(Settings, BOUNDS)
    decision = pol.Decision(0, 8, 5, 2, 5, 'shrink', 'fits', 'test')

    def tick(now: Any) -> list[pol.Decision]:
        with loop._cond:
            manager = loop.manager
        manager.resplit({0: 5})
        return [decision]
    monkeypatch.setattr(loop, '_tick', tick)
    worker = threading.Thread(target=loop.tick)
    worker.start()
    while 'resplit started' not in events:
        time.sleep(0.01)

    def reload() -> None:
        loop.prepare(Settings, None)
        events.append('disabled')
    reloader = threading.Thread(target=reload)
    reloader.start()
    time.sleep(0.2)
    assert 'disabled' not in events        # it waits for the decision
    go.set()
    worker.join(5)
    reloader.join(5)
    assert events == ['resplit started', 'resplit done', 'disabled']
    assert loop.bounds is None
    # and no decision after it
    assert agent_policy.PolicyLoop._tick(loop, None) == []
