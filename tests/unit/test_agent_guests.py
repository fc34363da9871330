"""ovs_rdt.agent.guests: libvirt's events driving VM groups, with a fake
libvirt view (the real one: tests/unit/test_agent_virt.py, and
tests/functional/test_agent_libvirt.py through a real libvirtd)."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

import pytest

from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent.guests import GuestPlacer, GuestWatch
from ovs_rdt.agent import virt
from ovs_rdt.conf import Settings
from tests.unit.test_agent_placement import FakeManager

UUID = '8a1f0a6e-0d4c-4b0b-9d55-3c1f8b2a9e11'
GROUP = 'ovsrdt-vm-' + UUID


class FakeView:
    def __init__(self, uri: str, on_event: Callable[[str, str, str], None],
                 running: dict[str, str]) -> None:
        self.uri = uri
        self.on_event = on_event
        self.running = running
        self.closed = threading.Event()
        self.reason = ''
        self.xmls: list[str] = []

    def domains(self) -> tuple[dict[str, str], set[str]]:
        if self.closed.is_set():
            raise virt.LibvirtUnavailable('libvirt at %s: client socket is '
                                          'closed' % self.uri)
        return dict(self.running), set(self.running)

    def xml(self, uuid: str) -> str | None:
        self.xmls.append(uuid)
        return None

    def close(self) -> None:
        pass

    def lose(self) -> None:
        """libvirtd went away (EOF)."""
        self.reason = 'end of file'
        self.closed.set()
        self.on_event('', '', virt.CLOSED)


class Libvirt:
    """The opener: refuses while ``up`` is false; remembers the views."""

    def __init__(self) -> None:
        self.up = True
        self.running: dict[str, str] = {}
        self.views: list[FakeView] = []
        self.attempts = 0

    def __call__(self, uri: str, on_event: Any) -> FakeView:
        self.attempts += 1
        if not self.up:
            raise virt.LibvirtUnavailable(
                "libvirt at %s: Failed to connect socket to '/x': No such "
                "file or directory" % uri)
        view = FakeView(uri, on_event, self.running)
        self.views.append(view)
        return view


def wait(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError('timed out')


@pytest.fixture
def watch(tmp_path: Any) -> Any:
    made: list[GuestWatch] = []

    def make(libvirt: Libvirt, mgr: FakeManager,
             interval: int = 60) -> GuestWatch:
        settings = Settings.defaults(agent={'reconcile_interval': interval},
                                     libvirt={'uri': 'qemu:///fake'})
        (tmp_path / 'proc').mkdir(exist_ok=True)
        gw = GuestWatch(settings, lambda s: mgr, Counters(),
                        proc=str(tmp_path / 'proc'), opener=libvirt)
        gw.start()
        made.append(gw)
        return gw

    yield make
    for gw in made:
        gw.stop()


def test_a_stopped_domain_s_group_goes_at_the_event(watch) -> None:
    libvirt, mgr = Libvirt(), FakeManager()
    libvirt.running[UUID] = 'vm1'
    mgr.resctrl.members[GROUP] = set()
    gw = watch(libvirt, mgr)
    wait(lambda: gw.names() == {UUID: 'vm1'})
    assert GROUP in mgr.resctrl.members        # it runs: kept
    del libvirt.running[UUID]
    libvirt.views[0].on_event(UUID, 'vm1', 'stopped')
    wait(lambda: GROUP not in mgr.resctrl.members, timeout=1.0)
    assert mgr.calls == [('release', GROUP)]


def test_a_started_domain_is_looked_at(watch) -> None:
    libvirt, mgr = Libvirt(), FakeManager()
    gw = watch(libvirt, mgr)
    wait(lambda: gw.connected)
    libvirt.views[0].on_event(UUID, 'vm1', 'started')
    wait(lambda: libvirt.views[0].xmls == [UUID])


def test_lost_connection_one_line_backoff_and_a_pass_after(
        watch, caplog) -> None:
    caplog.set_level(logging.INFO, 'ovs_rdt.agent.guests')
    libvirt, mgr = Libvirt(), FakeManager()
    libvirt.running[UUID] = 'vm1'
    mgr.resctrl.members[GROUP] = set()
    gw = watch(libvirt, mgr)
    wait(lambda: gw.connected)
    libvirt.up = False
    libvirt.views[0].lose()
    wait(lambda: libvirt.attempts >= 3)      # 0.5 s, then 1 s apart
    assert not gw.connected and gw.names() is None
    # Meanwhile the domain stopped: without libvirt, the grace holds.
    del libvirt.running[UUID]
    assert GROUP in mgr.resctrl.members
    libvirt.up = True
    wait(lambda: GROUP not in mgr.resctrl.members, timeout=5)
    lines = [r.getMessage() for r in caplog.records
             if r.levelno >= logging.INFO]
    assert len([m for m in lines if 'lost the connection' in m]) == 1
    assert len([m for m in lines if 'again' in m]) == 1
    errors = gw.counters.snapshot('errors')[(('source', 'libvirt'),)]
    assert errors == libvirt.attempts - 2 + 1  # failed attempts + the loss


def test_never_reachable_warns_once_and_counts(watch, caplog) -> None:
    caplog.set_level(logging.DEBUG, 'ovs_rdt.agent.guests')
    libvirt = Libvirt()
    libvirt.up = False
    gw = watch(libvirt, FakeManager())
    wait(lambda: libvirt.attempts >= 3)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert 'qemu:///fake' in warnings[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert gw.counters.snapshot('errors')[(('source', 'libvirt'),)] >= 3


def test_placer_leaves_alone_what_does_not_run_or_asks_nothing(
        tmp_path: Any) -> None:
    mgr = FakeManager()
    placer = GuestPlacer(mgr, Settings.defaults(), proc=str(tmp_path))
    assert placer.place(UUID, None) == []
    plain = ("<domain type='kvm'><name>vm1</name><uuid>%s</uuid>"
             "<vcpu>1</vcpu></domain>" % UUID)
    assert placer.place(UUID, plain) == []
    assert mgr.calls == []


def test_placer_failure_logged_once_and_counted(tmp_path: Any,
                                                caplog) -> None:
    mgr = FakeManager()
    counters = Counters()
    placer = GuestPlacer(mgr, Settings.defaults(), counters,
                         proc=str(tmp_path))
    bad = ("<domain type='kvm'><name>vm1</name><uuid>%s</uuid><metadata>"
           "<rdt:rdt xmlns:rdt='urn:ovs-rdt:libvirt:1'><rdt:l3 ways='x'/>"
           "</rdt:rdt></metadata></domain>" % UUID)
    for _ in range(3):
        assert placer.place(UUID, bad) == []
    errors = [r.getMessage() for r in caplog.records
              if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "'x'" in errors[0] and 'vm1' in errors[0]
    assert counters.snapshot('errors') == {(('source', 'reconcile'),): 3.0}
