"""ovs_rdt.agent.service: the loop, signals and status, with fakes."""
from __future__ import annotations

import os
import select
import signal
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from ovs_rdt.agent import ovsdb as ovsdb_mod
from ovs_rdt.agent import service
from ovs_rdt.conf import Settings
from ovs_rdt.core.model import PMD_GROUP
from ovs_rdt.exceptions import ResctrlError
from tests.unit.test_agent_placement import FakeManager


class Manager(FakeManager):
    applied = 0
    #: The steps ``apply`` would take now (none: resctrl holds the plan).
    drift: list[str] = []

    def apply(self) -> None:
        self.applied += 1
        self.drift = []

    def preview(self, prune: bool = False) -> Any:
        assert prune
        return SimpleNamespace(steps=list(self.drift))


class FakeOvsdb:
    instances: list['FakeOvsdb'] = []

    def __init__(self, remote: str, timeout: int, wake: Any) -> None:
        self.wake = wake
        self.statuses: list[str] = []
        self.knob_values: dict[str, str] | None = {'rdt-pmd-l3-ways': '4'}
        self.stopped = False
        FakeOvsdb.instances.append(self)

    def start(self) -> None:
        self.wake()

    def knobs(self) -> tuple[int, dict[str, str] | None]:
        return 1, self.knob_values

    def set_status(self, text: str) -> None:
        if not self.statuses or self.statuses[-1] != text:
            self.statuses.append(text)

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def agent(monkeypatch: Any, tmp_path: Any) -> service.Agent:
    monkeypatch.setattr(ovsdb_mod, 'Ovsdb', FakeOvsdb)
    managers: list[Manager] = []

    def build(settings: Any) -> Manager:
        managers.append(Manager())
        return managers[-1]

    monkeypatch.setattr(service, 'build', build)
    conf = tmp_path / 'a.conf'
    conf.write_text('[ovs]\nvswitchd_pidfile = %s\n' % (tmp_path / 'v.pid'))
    settings = Settings.defaults(
        ovs={'vswitchd_pidfile': str(tmp_path / 'v.pid'),
             'rescan_interval': 1})
    FakeOvsdb.instances.clear()
    return service.Agent(settings, ['--config-file', str(conf)])


def run_with(agent: service.Agent, script: Any) -> int:
    result: list[int] = []
    sigs = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    old = {s: signal.getsignal(s) for s in sigs}
    thread = threading.Thread(target=script, daemon=True)
    thread.start()
    try:
        result.append(agent.run())
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    thread.join(5)
    return result[0]


def wait(check: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, 'timed out'
        time.sleep(0.01)


def test_loop_status_sighup_sigterm(agent: service.Agent) -> None:
    first = agent.manager

    def script() -> None:
        wait(lambda: FakeOvsdb.instances and FakeOvsdb.instances[0].statuses)
        os.kill(os.getpid(), signal.SIGHUP)
        wait(lambda: agent.manager is not first)
        os.kill(os.getpid(), signal.SIGTERM)

    assert run_with(agent, script) == 0
    ovs = FakeOvsdb.instances[0]
    assert ovs.stopped
    assert ovs.statuses[0].startswith('ok: PMD threads -> ovsrdt-ovs-pmd')
    assert 'ovs-vswitchd is not running' in ovs.statuses[0]
    assert first.applied == 1 and agent.manager.applied == 1
    # SIGTERM keeps allocations: nothing released.
    assert PMD_GROUP in first.resctrl.members
    assert not any(c[0] == 'release' for c in first.calls)


def test_the_safety_rescan_applies_what_resctrl_no_longer_holds(
        agent: service.Agent) -> None:
    """A process killed half-way through a plan left a VM's group
    shareable (or a selftest its groups): with no event, the next safety
    re-scan applies again; while resctrl holds the plan, it does not.
    """
    applied = []

    def script() -> None:
        try:
            wait(lambda: agent.manager.applied == 1)
            time.sleep(1.5)             # a re-scan with nothing to do
            applied.append(agent.manager.applied)
            agent.manager.drift = ['mode ovsrdt-vm-x exclusive']
            wait(lambda: agent.manager.applied == 2)
        finally:
            applied.append(agent.manager.applied)
            os.kill(os.getpid(), signal.SIGTERM)

    assert run_with(agent, script) == 0
    assert applied == [1, 2]


def test_a_pass_longer_than_the_interval_does_not_start_the_next_at_once(
        agent: service.Agent, monkeypatch: Any) -> None:
    """The pools refused for as long as the agent re-scans (a refusal
    planned again for SETTLE holds the lock 2 s, more than rescan_interval
    here): the next safety re-scan, which tries again, comes a whole
    interval after the pass ends, not at once.  On a clock of its own:
    each try "takes" 2 s, a wait takes what it was given.
    """
    clock = [1000.0]
    tries: list[tuple[float, float]] = []   # (start, end) of each try

    def apply() -> None:
        start = clock[0]
        clock[0] += 2.0
        tries.append((start, clock[0]))
        if len(tries) == 5:
            agent._stop = True
        raise ResctrlError('/fake/schemata', 'L3:0=7', 28, None,
                           'No space left on device')

    def wait(rfds: list, wfds: list, xfds: list, timeout: float) -> tuple:
        ready = select.select(rfds, [], [], 0)[0]
        if not ready:
            clock[0] += timeout
        return ready, [], []

    monkeypatch.setattr(agent.manager, 'apply', apply)
    monkeypatch.setattr(service, 'time',
                        SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(service, 'select', SimpleNamespace(select=wait))
    assert agent.run() == 0
    assert len(tries) == 5
    # (The first two: the start's try, then the first pass's.)
    gaps = [b[0] - a[1] for a, b in zip(tries[1:], tries[2:])]
    assert min(gaps) >= agent.settings.ovs.rescan_interval, gaps


def test_a_bug_comparing_with_the_plan_does_not_end_the_agent(
        agent: service.Agent, caplog: Any) -> None:
    def boom(prune: bool = False) -> Any:
        raise StopIteration()

    agent.manager.preview = boom          # type: ignore[method-assign]
    assert agent.drifted() is False
    assert agent.drifted() is False
    assert caplog.text.count('unexpected error comparing resctrl') == 1
    assert agent.counters.snapshot('errors')[(('source', 'pools'),)] == 2


def test_bad_knob_reported_not_fatal(agent: service.Agent) -> None:
    def script() -> None:
        wait(lambda: FakeOvsdb.instances)
        ovs = FakeOvsdb.instances[0]
        wait(lambda: ovs.statuses)
        ovs.knob_values = {'rdt-pmd-l3-ways': 'abc'}
        ovs.wake()
        wait(lambda: ovs.statuses[-1].startswith('error:'))
        os.kill(os.getpid(), signal.SIGTERM)

    assert run_with(agent, script) == 0
    assert "other_config:rdt-pmd-l3-ways: 'abc' is not a whole number" in \
        FakeOvsdb.instances[0].statuses[-1]


def test_unexpected_exception_is_contained(agent: service.Agent,
                                           monkeypatch: Any) -> None:
    def boom(*a: Any, **k: Any) -> str:
        raise ValueError('bug')

    monkeypatch.setattr(agent.placer, 'sync', boom)

    def script() -> None:
        wait(lambda: FakeOvsdb.instances and FakeOvsdb.instances[0].statuses)
        os.kill(os.getpid(), signal.SIGTERM)

    assert run_with(agent, script) == 0
    assert FakeOvsdb.instances[0].statuses == ['error: internal error: bug']


def test_main_bad_config_exits_2(tmp_path: Any, capsys: Any) -> None:
    conf = tmp_path / 'bad.conf'
    conf.write_text('[ovs]\nrescan_interval = soon\n')
    assert service.main(['--config-file', str(conf)]) == 2
    assert 'rescan_interval' in capsys.readouterr().err


def test_main_missing_config_exits_2(tmp_path: Any) -> None:
    assert service.main(['--config-file', str(tmp_path / 'none')]) == 2


def test_sighup_follows_a_new_pidfile(agent: service.Agent,
                                      tmp_path: Any) -> None:
    conf = tmp_path / 'a.conf'
    moved = tmp_path / 'run' / 'ovs-vswitchd.pid'
    moved.parent.mkdir()

    def script() -> None:
        wait(lambda: FakeOvsdb.instances and FakeOvsdb.instances[0].statuses)
        conf.write_text('[ovs]\nvswitchd_pidfile = %s\n' % moved)
        os.kill(os.getpid(), signal.SIGHUP)
        wait(lambda: agent.watch.path == str(moved))
        os.kill(os.getpid(), signal.SIGTERM)

    assert run_with(agent, script) == 0
    assert agent.settings.ovs.vswitchd_pidfile == str(moved)


def test_policy_view_reads_the_drop_counters_at_each_interval():
    """The policy's drops come from the OVSDB replica when it asks, not
    from the main loop's last wake-up (review: up to 10 s late); only
    PMD-polled ports count.
    """
    from types import SimpleNamespace

    from ovs_rdt.agent.service import Agent

    stats = {'dpdk0': ('dpdk', {'rx_dropped': 1, 'tx_dropped': 2,
                                'rx_missed_errors': 3, 'rx_packets': 900}),
             'vhu0': ('dpdkvhostuserclient', {'tx_dropped': 5}),
             'br0': ('internal', {'tx_dropped': 50})}
    agent = SimpleNamespace(_pmd_cache_domains=frozenset({0}),
                            ovsdb=SimpleNamespace(
                                interface_stats=lambda: stats))
    assert Agent.policy_view(agent) == (frozenset({0}), 11)
    stats['dpdk0'][1]['rx_dropped'] = 10
    assert Agent.policy_view(agent) == (frozenset({0}), 20)
    # The replica empty (reconnecting): unknown, so no jump of drops later.
    saved = dict(stats)
    stats.clear()
    assert Agent.policy_view(agent) == (frozenset({0}), None)
    stats.update(saved)
    agent._pmd_cache_domains = frozenset()         # HP holds no PMD thread
    assert Agent.policy_view(agent) == (frozenset(), None)
