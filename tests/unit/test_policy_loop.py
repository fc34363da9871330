"""PolicyLoop against a reload: a decision in flight finishes first."""
from __future__ import annotations

import os
import threading
import time
from typing import Any

from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent import policy as agent_policy
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core import policy as pol

BOUNDS = pol.Bounds('hp', 'noisy', 3, 8, 2, 0.1)


class Settings:
    class resctrl:
        root = '/nonexistent-resctrl'


class SlowManager:
    """Holds a policy move until told to go; records what happened when."""

    def __init__(self, events: list[str], go: threading.Event) -> None:
        self.events, self.go = events, go

    def apply_policy_split(self, *args: Any) -> None:
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
        manager.apply_policy_split({0: 5})
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


class _Lock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class _Group:
    def __init__(self, name: str) -> None:
        self.name, self.mb = name, {}
        # HP holds 8 ways on each domain (the default group has no mask).
        self.l3 = {d: CBM(0xff, 20) for d in (0, 1)} \
            if name == 'ovsrdt-pool-hp' else {}


class _Platform:
    domains = (0, 1)
    mb = None
    mbm_assign_mode = None

    @staticmethod
    def way_bytes(dom: int) -> int:
        return 1 << 20


class _Resctrl:
    """HP's llc_occupancy goes up by 1 MiB at every read; each group a
    real directory (its inode is its identity), MBM counters as set.
    """

    NAMES = ('', 'ovsrdt-pool-hp', 'ovsrdt-pool-noisy')

    def __init__(self, root: str) -> None:
        self.occ = 0
        self.root = root
        self.total = {name: 0 for name in self.NAMES}
        for name in self.NAMES[1:]:
            os.makedirs(self.path(name), exist_ok=True)

    def path(self, name: str) -> str:
        return os.path.join(self.root, name)

    def group_names(self) -> list[str]:
        return list(self.NAMES)

    def tasks(self, name: str) -> list[int]:
        return []

    def recreate(self, name: str) -> None:
        """A new directory (a new inode: the old one still exists while
        the new one is made), its counter from zero.
        """
        os.rename(self.path(name), self.path(name) + '.old')
        os.makedirs(self.path(name))
        os.rmdir(self.path(name) + '.old')
        self.total[name] = 0

    def platform(self, cpus: bool = False) -> _Platform:
        return _Platform()

    def lock(self, exclusive: bool = True) -> _Lock:
        return _Lock()

    def groups(self) -> list[_Group]:
        return [_Group(''), _Group('ovsrdt-pool-hp'),
                _Group('ovsrdt-pool-noisy')]

    def read_mon(self, name: str) -> dict[int, dict[str, int]]:
        if name == 'ovsrdt-pool-hp':
            self.occ += 1 << 20
        return {d: {'llc_occupancy': self.occ,
                    'mbm_total_bytes': self.total[name]} for d in (0, 1)}


class _Manager:
    def __init__(self, root: str) -> None:
        self.resctrl = _Resctrl(root)


def test_reader_hands_the_interval_s_occupancy_readings_over(
        tmp_path) -> None:
    reader = agent_policy.Reader(_Manager(str(tmp_path)))
    reader.sample(BOUNDS)
    reader.sample(BOUNDS)
    out = reader.read(BOUNDS, None, frozenset(), now=1.0)
    mib = 1 << 20
    assert out[0].hp_samples == (1.0 * mib, 2.0 * mib)
    assert out[0].hp_occupancy == 3.0 * mib      # read() takes the last
    assert out[1].hp_samples == (1.0 * mib, 2.0 * mib)
    # Each reading counts in one interval only; a decision drops the
    # readings taken under the split before it.
    assert reader.read(BOUNDS, None, frozenset(), now=2.0)[0].hp_samples == ()
    reader.sample(BOUNDS)
    reader.rebase(BOUNDS, now=3.0)
    assert reader.read(BOUNDS, None, frozenset(), now=4.0)[0].hp_samples == ()


def test_a_re_created_group_is_a_counter_reset(tmp_path) -> None:
    """HP's group re-created between two reads, its new counter already
    past the old value: no rate (core.mbm's rule, the group directory's
    identity), where a drop-only check read a rate of the difference.
    """
    manager = _Manager(str(tmp_path))
    rc = manager.resctrl
    reader = agent_policy.Reader(manager)
    rc.total['ovsrdt-pool-hp'] = 100 << 20
    reader.read(BOUNDS, None, frozenset(), now=1.0)
    rc.total['ovsrdt-pool-hp'] = 110 << 20
    rc.total['ovsrdt-pool-noisy'] = 30 << 20
    out = reader.read(BOUNDS, None, frozenset(), now=2.0)
    assert out[0].hp_rate == 10 << 20 and out[0].be_rate == 30 << 20
    rc.recreate('ovsrdt-pool-hp')
    rc.total['ovsrdt-pool-hp'] = 150 << 20
    rc.total['ovsrdt-pool-noisy'] = 40 << 20
    out = reader.read(BOUNDS, None, frozenset(), now=3.0)
    assert out[0].hp_rate is None           # not 40 MiB/s
    assert out[0].be_rate == 10 << 20
    rc.total['ovsrdt-pool-hp'] = 155 << 20
    out = reader.read(BOUNDS, None, frozenset(), now=4.0)
    assert out[0].hp_rate == 5 << 20        # counts from the new group on
    # A drop is a reset too.
    rc.total['ovsrdt-pool-noisy'] = 1 << 20
    assert reader.read(BOUNDS, None, frozenset(), now=5.0)[0].be_rate is None
