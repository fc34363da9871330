"""``ovs-rdt selftest``'s pure parts: the verdict on recorded figures, the
way and CPU choices, the write guard, stale clean-up, the probe's build and
what the kernel cannot be made to show here (a reused TID, a node without
mbm_total_bytes) with fakes; the real thing is in
tests/functional/test_selftest.py.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import pytest

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core import foreign
from ovs_rdt.core.kernel import new_group_masks
from ovs_rdt.core.model import UNIT_MBPS, Group, MBInfo, Platform
from ovs_rdt.exceptions import NotOwnedError, ProbeUnavailable
from ovs_rdt import procfs
from ovs_rdt.selftest import effect, probe, runner, verdict
from ovs_rdt.selftest.behaviours.bandwidth import check_mb
from ovs_rdt.selftest.behaviours import Behaviour
from ovs_rdt.selftest.behaviours.common import run_in
from ovs_rdt.selftest.behaviours.tasks import no_such_tid
from ovs_rdt.selftest.geometry import Geometry
from ovs_rdt.selftest.node import Node
from ovs_rdt.selftest.report import summary
from ovs_rdt.selftest.runner import Result
from tests.unit.fakes import make_tree

# Recorded with the probe (probe.c, 1 s a phase) on this project's test host, an
# "Intel(R) Xeon(R) Processor" VM whose kernel has no resctrl: nothing partitions
# its cache.  16 MiB working set, the neighbour streaming 1 GiB on the other core.
# Without partitioning, a "disjoint" phase is the neighbour still streaming:
NO_PARTITION = verdict.Figures(99.437, 123.703, 127.664)
# A run where the neighbour stopped for the last phase: what perfect
# partitioning would give the probe (no machine here has CAT to record it).
NEIGHBOUR_GONE = verdict.Figures(113.121, 198.095, 90.713)
# 3 MiB working set: the neighbour did not slow it at all.
NO_HARM = verdict.Figures(33.715, 32.726, 32.453)
# On the emulator (fuse.resctrl), 0.1 s a phase, occupancy from its model.
EMULATED = verdict.Figures(38.1, 47.3, 47.4, 220160, 209920, 219136)


def test_verdict_does_not_shield_without_partitioning() -> None:
    code, text = verdict.judge(NO_PARTITION)
    assert code == verdict.DOES_NOT
    assert text.startswith('the ways do not shield the probe: in the same ways the '
                           'neighbour slowed the probe x1.24; in disjoint ways -16% ')


def test_verdict_shields_when_the_disjoint_phase_recovers() -> None:
    code, text = verdict.judge(NEIGHBOUR_GONE)
    assert code == verdict.SHIELDS
    assert text.startswith('the ways shield the probe: ')
    # with the probe's occupancy: kept -> shields; lost -> not sure
    kept = verdict.Figures(113.121, 198.095, 90.713, 3_800_000, 900_000, 3_700_000)
    assert verdict.judge(kept)[0] == verdict.SHIELDS
    assert 'kept 97% of its occupancy' in verdict.judge(kept)[1]
    lost = verdict.Figures(113.121, 198.095, 90.713, 3_800_000, 900_000, 1_000_000)
    assert verdict.judge(lost)[0] == verdict.INCONCLUSIVE


def test_verdict_inconclusive() -> None:
    code, text = verdict.judge(NO_HARM)
    assert code == verdict.INCONCLUSIVE
    assert 'slowed the probe only x0.97' in text
    half = verdict.Figures(100.0, 200.0, 140.0)        # 60% of the harm undone
    assert verdict.judge(half)[0] == verdict.INCONCLUSIVE


def test_verdict_never_claims_isolation_on_an_emulator() -> None:
    why = '/x is a fuse.resctrl mount'
    for fig in (EMULATED, NEIGHBOUR_GONE, NO_PARTITION):
        code, text = verdict.judge(fig, why)
        assert code == verdict.EMULATED
        assert 'no isolation claimed' in text and '(/x is a fuse.resctrl mount)' in text


def test_runs() -> None:
    assert run_in(0b11110110, 2, 8) == 0b110
    assert run_in(0b11110110, 3, 8) == 0b1110000
    assert run_in(0b0101, 2, 4) is None


def test_writes_only_below_its_own_groups(tmp_path) -> None:
    node = Node(str(tmp_path), run=7)
    assert node.prefix == 'ovsrdt-selftest-7-'
    for rel in ('schemata', 'COS1/schemata', 'ovsrdt-pool-hp/tasks',
                'ovsrdt-selftest-8-a/tasks', 'ovsrdt-selftest-7-a/../COS1/tasks'):
        with pytest.raises(NotOwnedError, match='selftest refuses to touch'):
            node.write(rel, '1\n')
        assert not os.path.exists(tmp_path / rel)
    with pytest.raises(NotOwnedError):
        node.rmdir('qemu-1-vm1-vcpus_0')


def test_clean_stale_removes_dead_runs_only(tmp_path) -> None:
    live = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)',
                             'selftest'])
    try:
        names = ['ovsrdt-selftest-%d-mon' % live.pid, 'ovsrdt-selftest-999999999-a',
                 'ovsrdt-selftest-junk', 'COS1', 'ovsrdt-pool-hp',
                 'ovsrdt-selftest-%d-own' % os.getpid()]
        for name in names:
            (tmp_path / name).mkdir()
        node = Node(str(tmp_path))
        removed = runner.clean_stale(node)
        assert sorted(removed) == ['ovsrdt-selftest-%d-own' % os.getpid(),
                                   'ovsrdt-selftest-999999999-a', 'ovsrdt-selftest-junk']
        assert sorted(os.listdir(tmp_path)) == sorted(
            ['COS1', 'ovsrdt-pool-hp', 'ovsrdt-selftest-%d-mon' % live.pid])
    finally:
        live.kill()
        live.wait()


def sysfs_cpu(sysfs, n: int, l3: int, core: str, l2: str = '') -> None:
    base = sysfs / ('cpu%d' % n)
    for index, level, size in (('index3', 3, ''), ('index2', 2, l2)):
        (base / 'cache' / index).mkdir(parents=True)
        (base / 'cache' / index / 'level').write_text('%d\n' % level)
        (base / 'cache' / index / 'id').write_text('%d\n' % (l3 if level == 3 else n))
        if size:
            (base / 'cache' / index / 'size').write_text(size + '\n')
    (base / 'topology').mkdir()
    (base / 'topology' / 'thread_siblings_list').write_text(core + '\n')


def test_pick_cpus(tmp_path) -> None:
    sysfs_cpu(tmp_path, 0, 0, '0,4')
    sysfs_cpu(tmp_path, 4, 0, '0,4')           # CPU 0's hyperthread
    sysfs_cpu(tmp_path, 1, 1, '1,5')
    sysfs_cpu(tmp_path, 2, 0, '2,6', '2048K')
    sysfs_cpu(tmp_path, 3, 1, '3,7')
    rc = Node(str(tmp_path), str(tmp_path)).resctrl
    assert effect.pick_cpus(rc, {0, 1, 2, 3, 4}) == (3, 1, 1)
    assert effect.pick_cpus(rc, {0, 2, 4}) == (2, 0, 0)
    assert effect.pick_cpus(rc, {0, 4}) is None      # one core
    assert effect.pick_cpus(rc, {0, 1}) is None      # two L3s
    assert effect.pick_cpus(rc, {0, 9}) is None      # no sysfs for 9
    assert effect.l2_bytes(rc, 2) == 2 * 1024 * 1024 and effect.l2_bytes(rc, 0) == 0


def proc_thread(proc, pid: int, tid: int, comm: str, allowed: str) -> None:
    task = proc / str(pid) / 'task' / str(tid)
    task.mkdir(parents=True)
    (task / 'comm').write_text(comm + '\n')
    (task / 'status').write_text('Name:\t%s\nCpus_allowed_list:\t%s\n' % (comm, allowed))


def test_busy_cpus_are_left_out(tmp_path, monkeypatch) -> None:
    # Before: the probe and its neighbour could be pinned to a PMD core or
    # a pinned vCPU's.
    proc = tmp_path / 'proc'
    proc_thread(proc, 10, 11, 'pmd-c03/id:7', '3')
    proc_thread(proc, 20, 21, 'CPU 0/KVM', '1')            # pinned
    proc_thread(proc, 20, 22, 'CPU 1/KVM', '0-4095')       # not pinned
    proc_thread(proc, 30, 30, 'irqbalance', '2')
    assert procfs.busy_cpus(str(proc)) == {3: 'pmd-c03/id:7', 1: 'CPU 0/KVM'}
    sysfs = tmp_path / 'sys'
    for cpu in range(4):
        sysfs_cpu(sysfs, cpu, 0, str(cpu))
    rc = Node(str(tmp_path), str(sysfs)).resctrl
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2, 3})
    assert effect.choose_cpus(rc, None, str(proc)) == (2, 0, 0)
    proc_thread(proc, 10, 12, 'pmd-c02/id:8', '2')
    why = effect.choose_cpus(rc, None, str(proc))
    assert why == ('needs two cores sharing an L3 cache among the CPUs it may run on '
                   '(0-3), leaving out 1 (CPU 0/KVM), 2 (pmd-c02/id:8), 3 (pmd-c03/id:7): '
                   'name two with --cpus')
    assert effect.choose_cpus(rc, frozenset({1, 3}), str(proc)) == (3, 1, 0)
    assert effect.choose_cpus(rc, frozenset({1, 7}), str(proc)).startswith('--cpus 1,7: ')


def test_the_working_set_exceeds_l2() -> None:
    # Before: 2 ways of 1 MiB (1.5 MiB walked) on a CPU with a 2 MiB L2.
    assert effect.probe_ways(2, 1, 1 << 20, 2 << 20) == 6     # 4.5 MiB walked
    assert effect.probe_ways(2, 1, 1 << 20, 0) == 2           # L2 unknown
    assert effect.probe_ways(1, 3, 8 << 20, 1 << 20) == 3


def test_no_such_tid_is_beyond_pid_max(tmp_path) -> None:
    # Before: the TID of a thread that had exited, which the kernel may
    # give another task before the write.
    (tmp_path / 'sys' / 'kernel').mkdir(parents=True)
    (tmp_path / 'sys' / 'kernel' / 'pid_max').write_text('4194304\n')
    assert no_such_tid(str(tmp_path)) == 4194305
    assert no_such_tid() > int(open('/proc/sys/kernel/pid_max').read())


def test_run_one_reports_an_unexpected_error_and_goes_on(tmp_path) -> None:
    make_tree(str(tmp_path))
    (tmp_path / 'mon_data' / 'mon_L3_00').mkdir(parents=True)
    node = Node(str(tmp_path))

    def boom(node: Node, geo: Geometry) -> str:
        node.mkdir('boom')
        raise ValueError('no such thing')

    res = runner.run_one(node, Behaviour('boom', 'a bug', boom))
    assert (res.result, res.detail) == (
        runner.FAIL, "unexpected error: ValueError: no such thing (last_cmd_status 'ok\\n')")
    assert node.mine() == []
    assert res.as_dict() == {'name': 'boom', 'summary': 'a bug', 'result': 'FAIL',
                             'detail': res.detail}


class FakeNode:
    """Files in a dict; every write accepted unless it is in ``refuse``."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.writes: list[tuple[str, str]] = []

    def mkdir(self, tag: str) -> str:
        return tag

    def exists(self, rel: str) -> bool:
        return rel in self.files

    def read(self, rel: str) -> str:
        return self.files[rel]

    def accepted(self, rel: str, data: str) -> None:
        self.writes.append((rel, data))
        self.files[rel] = data

    def refused(self, rel: str, data: str, err: int, text: str) -> None:
        self.writes.append((rel, '(refused) ' + data))


def test_mba_mbps_event_follows_only_an_event_the_node_counts() -> None:
    # Before: mbm_total_bytes was written on a node without it (the kernel
    # refuses it: 'Unsupported event id'), a FAIL on a healthy kernel.
    plat = Platform(11, 8, (0, 1), mb=MBInfo(10, 10, True, (0, 1), UNIT_MBPS),
                    mon_features=('llc_occupancy', 'mbm_local_bytes'))
    geo = Geometry(plat, {'L3': {0: '7ff', 1: '7ff'}, 'MB': {0: '4294967295'}},
                   ['L3', 'L3_MON', 'MB', 'last_cmd_status'])
    node: Any = FakeNode({'mb/schemata': '', 'mb/mba_MBps_event': 'mbm_local_bytes\n'})
    assert check_mb(node, geo) == ('MiB/s taken as written, past 32 bits refused; '
                                   'mba_MBps_event follows mbm_local_bytes on request')
    assert ('mb/mba_MBps_event', 'mbm_total_bytes\n') not in node.writes


def test_sparse_new_group_masks_whole_or_cut() -> None:
    # Before: only the lowest run was predicted, while tip's
    # cbm_ensure_valid() keeps a sparse-mask platform's mask whole.
    plat = Platform(16, 16, (0,), min_cbm_bits=0, sparse_masks=True)
    others = [('shareable', 0xff0f), ('exclusive', 0x00f0)]
    assert new_group_masks(plat, 0, others) == (0x000f, 0xff0f)
    plat.sparse_masks = False
    assert new_group_masks(plat, 0, others) == (0x000f,)
    plat.sparse_masks = True
    groups = [Group('', {0: CBM(0xff0f, 16)}), Group('x', {0: CBM(0xf0, 16)}, mode='exclusive'),
              Group('y', {0: CBM(0xff0f, 16)})]
    assert foreign.unwritten(plat, groups[2], 0, groups)


def test_the_probe_is_built_for_the_run_privately(tmp_path, monkeypatch) -> None:
    # Before: built once into ~/.cache/ovs-rdt and run from there if it was
    # executable, whoever put it there (the user's cache under sudo -E).
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'cache'))
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    with probe.built() as fd:
        path = os.readlink('/proc/self/fd/%d' % fd)
        assert os.path.dirname(os.path.dirname(path)) == str(tmp_path)
        st = os.stat(os.path.dirname(path))
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
        chase = probe.Probe(fd, 'chase', min(os.sched_getaffinity(0)), 1 << 20)
        chase.init()
        assert chase.measure(0.01) > 0
        chase.stop()
    assert os.listdir(tmp_path) == []


def test_a_probe_that_cannot_be_built_is_unavailable(tmp_path, monkeypatch) -> None:
    # Before: an unwritable cache (OSError) or a compiler that hangs
    # (TimeoutExpired) ended the selftest with a traceback.
    blocked = tmp_path / 'file'
    blocked.write_text('')
    for var in ('XDG_CACHE_HOME', 'HOME'):
        monkeypatch.setenv(var, str(blocked))
    monkeypatch.setattr(tempfile, 'tempdir', str(blocked))
    with pytest.raises(ProbeUnavailable, match='no directory to build the probe in'):
        with probe.built():
            pass
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))
    slow = tmp_path / 'slowcc'
    slow.write_text('#!/bin/sh\nsleep 5\n')
    slow.chmod(0o755)
    monkeypatch.setenv('CC', str(slow))
    monkeypatch.setattr(probe, 'TIMEOUT', 0.2)
    with pytest.raises(ProbeUnavailable, match='timed out after 0.2 seconds'):
        with probe.built():
            pass
    assert [n for n in os.listdir(tmp_path) if n.startswith('ovsrdt-probe')] == []


def test_selftest_groups_are_not_ovs_rdts_to_plan() -> None:
    # Before: every ovsrdt-* group counted as ovs-rdt's, so "apply" or the
    # agent would rewrite (or remove) a selftest's group while it measured.
    assert Group('ovsrdt-pool-hp', {}).owned
    assert not Group('ovsrdt-selftest-123-probe', {}).owned


def test_summary_names_the_failed_behaviours() -> None:
    results = [Result('info', '', 'pass', ''), Result('tasks', '', 'FAIL', 'x'),
               Result('cdp', '', 'skip', ''), Result('closids', '', 'FAIL', 'y')]
    assert summary(results) == (
        '4 behaviours: 1 pass, 2 FAIL, 1 skip -- the kernel differs from what ovs-rdt '
        'relies on in: tasks, closids')


@pytest.fixture
def cos1(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Node:
    """A node with another tool's group COS1; the watch after a try that
    changed something made short.
    """
    make_tree(str(tmp_path))
    (tmp_path / 'mon_data' / 'mon_L3_00').mkdir(parents=True)
    (tmp_path / 'COS1').mkdir()
    for name, text in (('mode', 'shareable\n'), ('schemata', 'L3:0=ff;1=ff\n'),
                       ('tasks', '')):
        (tmp_path / 'COS1' / name).write_text(text)
    monkeypatch.setattr(runner, 'IDLE_MIN', 0.2)
    return Node(str(tmp_path))


def test_another_writer_during_a_check_is_no_kernel_difference(cos1: Node) -> None:
    """A tool that does not take the lock writes another group's schemata
    (or makes a group) while a behaviour runs: the behaviour is tried again,
    and said so if it is disturbed every time, the tool seen writing while
    the selftest did nothing; never a FAIL.
    """
    root = cos1.root
    disturb = ['schemata', 'mkdir']

    def check(node: Node, geo: Geometry) -> str:
        node.mkdir('probe')
        what = disturb.pop(0) if disturb else None
        if what == 'schemata':
            write(root, 'COS1/schemata', 'L3:0=1;1=1\n')
        elif what == 'mkdir':
            os.mkdir(os.path.join(root, 'COS2'))
        return 'as the kernel does'

    res = runner.run_one(cos1, Behaviour('calm', 'quiet after two tries', check))
    assert (res.result, res.detail) == (runner.PASS, 'as the kernel does')
    assert cos1.mine() == []

    # pqos in a loop: every 20 ms, while the check runs and between
    stop = threading.Event()

    def pqos() -> None:
        n = 0
        while not stop.wait(0.02):
            n += 1
            write(root, 'COS1/schemata', 'L3:0=%x;1=1\n' % (n % 0xff + 1))

    def busy(node: Node, geo: Geometry) -> str:
        node.mkdir('probe')
        time.sleep(0.1)
        return 'as the kernel does'

    writer = threading.Thread(target=pqos)
    writer.start()
    try:
        res = runner.run_one(cos1, Behaviour('busy', 'disturbed', busy))
    finally:
        stop.set()
        writer.join()
    assert (res.result, res.detail) == (runner.SKIP, (
        'another writer changed resctrl during the check, 3 times, and while the '
        'selftest did nothing (COS1 (schemata)): a tool that does not take the lock; '
        'run the selftest again when it is quiet'))
    assert cos1.mine() == []


def test_a_kernel_that_changes_another_group_every_time_fails(cos1: Node) -> None:
    """What changes another group at each try, and never while the selftest
    does nothing, only the selftest's own writes can have changed: the
    kernel.  Before: after three tries, "another writer" (a skip, exit 0).
    """
    tries = []

    def check(node: Node, geo: Geometry) -> str:
        node.mkdir('probe')
        tries.append(1)     # "the kernel" at the selftest's mkdir
        write(cos1.root, 'COS1/schemata', 'L3:0=%x;1=ff\n' % len(tries))
        return 'as the kernel does'

    res = runner.run_one(cos1, Behaviour('mkdir', 'a new group', check))
    assert (res.result, res.detail, len(tries)) == (
        runner.FAIL, 'as the kernel does; changed COS1 (schemata)', runner.TRIES)
    assert cos1.mine() == []


def write(root: str, rel: str, text: str) -> None:
    with open(os.path.join(root, rel), 'w') as fh:
        fh.write(text)
