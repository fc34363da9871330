"""``ovs-rdt selftest``'s pure parts: the verdict on recorded figures, the
geometry helpers, the write guard, stale clean-up and CPU choice (fakes for
resctrl and sysfs; the real thing is in tests/functional/test_selftest.py).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ovs_rdt.core.model import Group
from ovs_rdt.selftest import effect, runner, verdict
from ovs_rdt.selftest.geometry import mount_entry, parse, run_in
from ovs_rdt.selftest.node import Node
from ovs_rdt.selftest.report import summary
from ovs_rdt.selftest.runner import Result

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


def test_parse_and_runs() -> None:
    assert parse('    MB:0=100;1=100\nL3DATA:0=7ff;1=7f0\n') == {
        'MB': {0: '100', 1: '100'}, 'L3DATA': {0: '7ff', 1: '7f0'}}
    assert parse('0=e000;1=e000\n') == {'': {0: 'e000', 1: 'e000'}}
    assert run_in(0b11110110, 2, 8) == 0b110
    assert run_in(0b11110110, 3, 8) == 0b1110000
    assert run_in(0b0101, 2, 4) is None


def test_mount_entry(tmp_path) -> None:
    mounts = tmp_path / 'mounts'
    root = tmp_path / 'r'
    root.mkdir()
    mounts.write_text('resctrl /sys/fs/resctrl resctrl rw,cdp 0 0\n'
                      'resctrl %s fuse.resctrl rw,nosuid 0 0\n' % root)
    assert mount_entry(str(root), str(mounts)) == ('fuse.resctrl', ['rw', 'nosuid'])
    assert mount_entry('/sys/fs/resctrl/', str(mounts)) == ('resctrl', ['rw', 'cdp'])
    assert mount_entry(str(tmp_path), str(mounts)) is None


def test_writes_only_below_its_own_groups(tmp_path) -> None:
    node = Node(str(tmp_path), run=7)
    assert node.prefix == 'ovsrdt-selftest-7-'
    for rel in ('schemata', 'COS1/schemata', 'ovsrdt-pool-hp/tasks',
                'ovsrdt-selftest-8-a/tasks', 'ovsrdt-selftest-7-a/../COS1/tasks'):
        with pytest.raises(RuntimeError, match='selftest refuses to touch'):
            node.write(rel, '1\n')
        assert not os.path.exists(tmp_path / rel)
    with pytest.raises(RuntimeError):
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


def test_pick_cpus(tmp_path) -> None:
    def cpu(n: int, l3: int, core: str) -> None:
        base = tmp_path / ('cpu%d' % n)
        (base / 'cache' / 'index3').mkdir(parents=True)
        (base / 'topology').mkdir()
        (base / 'cache' / 'index3' / 'id').write_text('%d\n' % l3)
        (base / 'topology' / 'thread_siblings_list').write_text(core + '\n')

    cpu(0, 0, '0,4')
    cpu(4, 0, '0,4')                       # CPU 0's hyperthread
    cpu(1, 1, '1,5')
    cpu(2, 0, '2,6')
    cpu(3, 1, '3,7')
    assert effect.pick_cpus(str(tmp_path), {0, 1, 2, 3, 4}) == (3, 1, 1)
    assert effect.pick_cpus(str(tmp_path), {0, 2, 4}) == (2, 0, 0)
    assert effect.pick_cpus(str(tmp_path), {0, 4}) is None      # one core
    assert effect.pick_cpus(str(tmp_path), {0, 1}) is None      # two L3s
    assert effect.pick_cpus(str(tmp_path), {0, 9}) is None      # no sysfs for 9


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
