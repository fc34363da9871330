"""ovs_rdt.agent.orphans with an in-memory CacheManager and resctrl."""
from __future__ import annotations

import os
from typing import Any

import pytest

from ovs_rdt.agent.orphans import NodeReconciler
from ovs_rdt.agent.service import log_own_groups
from tests.unit.test_agent_placement import HP, FakeManager


@pytest.fixture
def mgr() -> FakeManager:
    return FakeManager()


UUID = '8a1f0a6e-0d4c-4b0b-9d55-3c1f8b2a9e11'


def fake_qemu(proc: str, pid: int, uuid: str) -> None:
    os.makedirs(os.path.join(proc, str(pid)))
    with open(os.path.join(proc, str(pid), 'cmdline'), 'wb') as fh:
        fh.write(b'\0'.join([b'/usr/bin/qemu-system-x86_64', b'-name',
                             b'guest=vm1,debug-threads=on', b'-uuid',
                             uuid.encode()]) + b'\0')


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reconciler(mgr: FakeManager, tmp_path: Any, grace: float = 0.0,
               clock: Any = None, domains: Any = None) -> NodeReconciler:
    proc = tmp_path / 'proc'
    proc.mkdir(exist_ok=True)
    return NodeReconciler(mgr, str(proc), domains, grace=grace,
                          clock=clock or Clock())


def test_reconciler_removes_orphans_after_two_passes(mgr, tmp_path) -> None:
    live, dead, busy = (UUID, UUID.replace('8a', '9b'),
                        UUID.replace('8a', '7c'))
    fake_qemu(str(tmp_path / 'proc'), 10, live.upper())
    for uuid, tasks in ((live, set()), (dead, set()), (busy, {55})):
        mgr.resctrl.members['ovsrdt-vm-' + uuid] = set(tasks)
    node = reconciler(mgr, tmp_path)
    assert sorted(log_own_groups(mgr)) == sorted(
        [HP] + ['ovsrdt-vm-' + u for u in (live, dead, busy)])
    assert node.reconcile() == []          # first sighting: a suspect
    assert node.reconcile() == ['ovsrdt-vm-' + dead]
    assert 'ovsrdt-vm-' + live in mgr.resctrl.members
    assert 'ovsrdt-vm-' + busy in mgr.resctrl.members


def test_reconciler_forgets_suspect_that_came_alive(mgr, tmp_path) -> None:
    mgr.resctrl.members['ovsrdt-vm-' + UUID] = set()
    node = reconciler(mgr, tmp_path)
    node.reconcile()
    fake_qemu(str(tmp_path / 'proc'), 10, UUID)  # QEMU started after prepare
    assert node.reconcile() == []
    assert node.reconcile() == []


def test_starting_vm_group_survives_a_long_stall(mgr, tmp_path) -> None:
    """Between the hook's "prepare" and QEMU's start: a group, no task, no
    process; many passes (a short [agent] reconcile_interval) in minutes.
    """
    clock = Clock()
    mgr.resctrl.members['ovsrdt-vm-' + UUID] = set()
    node = reconciler(mgr, tmp_path, grace=600, clock=clock)
    for _ in range(100):                 # 100 passes over 9.9 minutes
        assert node.reconcile() == []
        clock.now += 6
    fake_qemu(str(tmp_path / 'proc'), 10, UUID)    # started at last
    clock.now += 600
    assert node.reconcile() == []
    assert 'ovsrdt-vm-' + UUID in mgr.resctrl.members
    # Stopped without the release hook: a fresh grace period from now.
    import shutil
    shutil.rmtree(str(tmp_path / 'proc' / '10'))
    assert node.reconcile() == []
    clock.now += 599
    assert node.reconcile() == []
    clock.now += 1
    assert node.reconcile() == ['ovsrdt-vm-' + UUID]


def test_qemu_found_by_uuid_whatever_its_name(mgr, tmp_path) -> None:
    proc = tmp_path / 'proc'
    proc.mkdir()
    others = [UUID.replace('8a', p) for p in ('01', '02', '03')]
    argvs = {11: [b'/usr/bin/kvm', b'-uuid', UUID.encode()],   # a symlink
             12: [b'/opt/emu', b'--uuid', others[0].encode()],
             13: [b'/opt/emu', b'-uuid=' + others[1].encode()]}
    for pid, argv in argvs.items():
        (proc / str(pid)).mkdir()
        (proc / str(pid) / 'cmdline').write_bytes(b'\0'.join(argv) + b'\0')
    for uuid in [UUID] + others:
        mgr.resctrl.members['ovsrdt-vm-' + uuid] = set()
    node = reconciler(mgr, tmp_path)
    node.reconcile()
    assert node.reconcile() == ['ovsrdt-vm-' + others[2]]


def test_libvirt_answers_at_once(mgr, tmp_path, caplog) -> None:
    """With libvirt's list of running domains: no grace, no /proc scan."""
    running, gone, busy = (UUID, UUID.replace('8a', '9b'),
                           UUID.replace('8a', '7c'))
    for uuid, tasks in ((running, set()), (gone, set()), (busy, {55})):
        mgr.resctrl.members['ovsrdt-vm-' + uuid] = set(tasks)
    asked = []

    def domains() -> set[str]:
        asked.append(1)
        return {running}

    node = reconciler(mgr, tmp_path, grace=600, domains=domains)
    (tmp_path / 'proc' / 'notanumber').mkdir()
    assert node.reconcile() == ['ovsrdt-vm-' + gone]   # the first pass
    # (The hook may have run and failed: the agent cannot tell.)
    assert 'libvirt does not run its domain, and no release hook removed ' \
        'it (none installed, one that failed: see the hook\'s log, or ' \
        'libvirtd ended first)' in caplog.text
    assert len(asked) == 2          # listed, then asked again just before
    assert 'ovsrdt-vm-' + running in mgr.resctrl.members
    # A domain libvirt no longer runs whose group still holds a task (its
    # QEMU not reaped yet): pending, removed once empty.
    assert node.pending == ['ovsrdt-vm-' + busy]
    mgr.resctrl.members['ovsrdt-vm-' + busy] = set()
    assert node.reconcile() == ['ovsrdt-vm-' + busy]
    assert node.pending == []


def test_without_libvirt_proc_and_grace_decide(mgr, tmp_path) -> None:
    """libvirt away (None): the grace of before, from the first pass
    without it; a running QEMU's group is kept.
    """
    clock = Clock()
    answer: list[Any] = [None]
    mgr.resctrl.members['ovsrdt-vm-' + UUID] = set()
    node = reconciler(mgr, tmp_path, grace=600, clock=clock,
                      domains=lambda: answer[0])
    assert node.reconcile() == []
    clock.now += 600
    fake_qemu(str(tmp_path / 'proc'), 10, UUID)
    assert node.reconcile() == []
    # libvirt back: it runs the domain (its QEMU too): kept.
    answer[0] = {UUID}
    assert node.reconcile() == []
    assert 'ovsrdt-vm-' + UUID in mgr.resctrl.members


def test_no_status_file_is_read(mgr, tmp_path, monkeypatch) -> None:
    """libvirt's private files (/run/libvirt/qemu/*.xml) are no interface:
    nothing of the agent opens them any more.
    """
    import builtins
    opened: list[str] = []
    real = builtins.open

    def spy(path: Any, *args: Any, **kw: Any) -> Any:
        opened.append(str(path))
        return real(path, *args, **kw)

    monkeypatch.setattr(builtins, 'open', spy)
    mgr.resctrl.members['ovsrdt-vm-' + UUID] = set()
    node = reconciler(mgr, tmp_path)
    node.reconcile()
    node.reconcile()
    assert not [p for p in opened if p.endswith('.xml')]


def test_only_vm_groups_named_by_uuid_are_removed(mgr, tmp_path) -> None:
    for name in ('ovsrdt-vm-test', 'ovsrdt-pool-vm', 'ovsrdt-ovs-pmd',
                 'COS1', 'ovsrdt-vm-' + UUID.upper()):
        mgr.resctrl.members[name] = set()
    node = reconciler(mgr, tmp_path)
    node.reconcile()
    assert node.reconcile() == []


def test_nested_pid_namespace_removes_nothing(mgr, tmp_path) -> None:
    node = reconciler(mgr, tmp_path)
    (tmp_path / 'proc' / 'self').mkdir()
    (tmp_path / 'proc' / 'self' / 'status').write_text(
        'Name:\tpython3\nNSpid:\t4242\t7\n')
    mgr.resctrl.members['ovsrdt-vm-' + UUID] = set()
    for _ in range(3):
        assert node.reconcile() == []
    (tmp_path / 'proc' / 'self' / 'status').write_text('NSpid:\t4242\n')
    node.reconcile()
    assert node.reconcile() == ['ovsrdt-vm-' + UUID]


def test_failed_removal_is_counted(mgr, tmp_path) -> None:
    from ovs_rdt.agent.counters import Counters
    from ovs_rdt.exceptions import ResctrlError

    def refuse(name: str) -> None:
        raise ResctrlError('/fake/' + name, 'rmdir', 16, None, 'busy')

    mgr.release = refuse
    mgr.resctrl.members['ovsrdt-vm-' + UUID] = set()
    counters = Counters()
    node = NodeReconciler(mgr, str(tmp_path), grace=0, clock=Clock(),
                          counters=counters)
    node.reconcile()
    assert node.reconcile() == []
    assert counters.snapshot('errors') == {(('source', 'reconcile'),): 1.0}


def test_a_release_the_hook_finishes_meanwhile_is_not_an_orphan(
        mgr, tmp_path, caplog) -> None:
    # The release hook removes the group while the reconciler waits for
    # the resctrl lock (libvirt says the domain stopped meanwhile).  The
    # reconciler checks again under the lock: nothing to remove, and no
    # "no release hook removed it".
    import contextlib

    group = 'ovsrdt-vm-' + UUID
    mgr.resctrl.members[group] = set()

    @contextlib.contextmanager
    def lock(exclusive: bool = True):
        mgr.resctrl.members.pop(group, None)     # the hook's release, done
        yield
    mgr.resctrl.lock = lock
    node = reconciler(mgr, tmp_path, domains=set)
    assert node.reconcile() == []
    assert ('release', group) not in mgr.calls
    assert 'no release hook removed it' not in caplog.text
