"""``ovs-rdt selftest`` as an operator runs it, on the mounted emulator.

Every profile and mount option passes the behaviours in
test_emulator_conformance.py (the same descriptions, the same runner);
here: the command itself, its failure on an emulator started with each
kernel divergence (naming the behaviour), a run killed mid-way and the
next one cleaning up, libvirt's and the real pqos's groups untouched and
their ways left to them, a node with no room for a group (a skip, not a
FAIL), what newer kernels do differently, and the effect part holding the
lock while its groups exist.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Iterator

import pytest

from ovs_rdt.emulator.faults import DIVERGENCES
from ovs_rdt.selftest.behaviours import BEHAVIOURS, Behaviour
from ovs_rdt.selftest import effect, probe
from ovs_rdt.selftest.node import Node, Skip
from ovs_rdt.selftest.runner import PASS, SKIP, run_one
from ovs_rdt import SELFTEST_GROUP_PREFIX
from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.fixtures.pqos import Pqos

Factory = Callable[..., EmulatorFixture]
#: The behaviour each divergence of the emulator must fail.
CAUGHT_BY = {
    'sparse-masks': 'schemata-refused',
    'status-text': 'schemata-refused',
    'exclusive-overlap': 'exclusive',
    'tasks-stay': 'tasks',
    'num-closids': 'closids',
    'mb-granularity': 'mb',
    'mbm-frozen': 'mon-data',
}
HELPERS = ('ovsrdt-load', 'ovsrdt-probe', 'ovsrdt-stream')


@pytest.fixture(scope='module')
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``TMPDIR``, where the probe is built for each run (and removed)."""
    return str(tmp_path_factory.mktemp('tmp'))


def cpus(emu: EmulatorFixture) -> frozenset[int]:
    """Two CPUs for the effect part: a PMD thread or pinned vCPU of
    another test on this host would otherwise leave it none.
    """
    pick = effect.pick_cpus(Node(emu.root, emu.sysfs).rc, os.sched_getaffinity(0))
    assert pick is not None
    return frozenset(pick[:2])


def selftest(emu: EmulatorFixture, cache: str, *args: str,
             conf: str | None = None) -> subprocess.CompletedProcess:
    config = conf or os.path.join(os.path.dirname(emu.root), 'selftest.conf')
    if conf is None:
        with open(config, 'w') as fh:
            fh.write('[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n' % (emu.root, emu.sysfs))
        args += ('--cpus', '%d,%d' % tuple(cpus(emu)))
    env = dict(os.environ, TMPDIR=cache)
    return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main', 'selftest',
                           '--config-file', config, *args], capture_output=True,
                          text=True, timeout=120, env=env, check=False)


def leftovers(emu: EmulatorFixture) -> list[str]:
    return sorted(n for n in os.listdir(emu.root) if n.startswith(SELFTEST_GROUP_PREFIX))


def helpers_running() -> list[str]:
    found = []
    for pid in os.listdir('/proc'):
        try:
            with open('/proc/%s/comm' % pid) as fh:
                comm = fh.read().strip()
        except OSError:
            continue
        if comm in HELPERS:
            found.append('%s %s' % (pid, comm))
    return found


def no_helpers_left() -> None:
    deadline = time.monotonic() + 10
    while helpers_running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert helpers_running() == []


def test_table_json_and_only(emulated_resctrl: EmulatorFixture, cache: str) -> None:
    res = selftest(emulated_resctrl, cache)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith('ovs-rdt selftest of %s (fuse.resctrl' % emulated_resctrl.root)
    # The emulated platform, not the host's CPU, is what it tests (trial 11).
    assert ') on an emulated platform, 2 L3 cache domains of 11 ways (the ' \
        "host's CPU: " in lines[0], lines[0]
    for behaviour in BEHAVIOURS:
        assert any(line.split()[:1] == [behaviour.name] for line in lines), behaviour.name
    # skip: snc, cdp, io-alloc, mbm-assign (no such feature), exclusive
    # (not tried: the default group holds every way)
    assert '16 behaviours: 11 pass, 0 FAIL, 5 skip' in lines
    assert any(line.startswith('verdict: emulated: no hardware partitions the cache '
                               'here (%s is a fuse.resctrl mount' % emulated_resctrl.root)
               for line in lines), res.stdout
    assert 'shield' not in res.stdout.replace('partitions', '')
    assert leftovers(emulated_resctrl) == []
    # --json, each part alone
    res = selftest(emulated_resctrl, cache, '--json', '--only', 'behaviour')
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc['ok'] is True and doc['effect'] is None
    assert [b['name'] for b in doc['behaviours']] == [b.name for b in BEHAVIOURS]
    assert doc['node']['fstype'] == 'fuse.resctrl' and doc['node']['kernel']
    res = selftest(emulated_resctrl, cache, '--json', '--only', 'effect')
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc['behaviours'] == [] and doc['effect']['verdict'] == 'emulated'
    assert [p['phase'] for p in doc['effect']['phases']] == [
        'alone', 'neighbour in the same ways', 'neighbour in disjoint ways']
    assert all(p['ns_per_access'] > 0 and p['llc_occupancy'] is not None
               for p in doc['effect']['phases'])
    assert leftovers(emulated_resctrl) == [] and os.listdir(cache) == []
    no_helpers_left()


def test_bad_arguments_and_no_resctrl(tmp_path: Any, cache: str) -> None:
    conf = tmp_path / 'x.conf'
    conf.write_text('[resctrl]\nroot = %s\n' % tmp_path)
    emu: Any = None
    res = selftest(emu, cache, '--ways', '0', conf=str(conf))
    assert res.returncode == 2
    assert res.stderr.startswith('ovs-rdt selftest: error: --ways must be at least 1')
    res = selftest(emu, cache, '--seconds', '6', conf=str(conf))
    assert res.returncode == 2 and 'at most 5 (got --ways 2 --seconds 6)' in res.stderr
    res = selftest(emu, cache, '--cpus', '1-3', conf=str(conf))
    assert res.returncode == 2
    assert res.stderr == "ovs-rdt selftest: error: --cpus: '1-3' names 3 CPUs, not two\n"
    res = selftest(emu, cache, conf=str(conf))
    assert res.returncode == 1
    assert res.stderr.startswith('ovs-rdt selftest: error: resctrl is not mounted at %s'
                                 % tmp_path)


def test_every_divergence_is_named() -> None:
    assert sorted(CAUGHT_BY) == sorted(DIVERGENCES)


@pytest.mark.parametrize('divergence', sorted(CAUGHT_BY))
def test_fails_naming_the_behaviour(emulator_factory: Factory, cache: str,
                                    divergence: str) -> None:
    emu = emulator_factory('xeon-gold-6230', ['--diverge', divergence])
    res = selftest(emu, cache, '--only', 'behaviour')
    assert res.returncode == 1, res.stdout
    name = CAUGHT_BY[divergence]
    row = [line for line in res.stdout.splitlines() if line.split()[:1] == [name]]
    assert row and row[0].split()[1] == 'FAIL', res.stdout
    summary = res.stdout.splitlines()[-1]
    assert 'the kernel differs from what ovs-rdt relies on in: ' in summary
    assert name in summary.split(': ')[-1].split(', ')
    assert leftovers(emu) == []


def test_killed_run_is_cleaned_up_by_the_next(emulated_resctrl: EmulatorFixture,
                                              cache: str) -> None:
    emu = emulated_resctrl
    # Killed (SIGKILL) in the behaviour part: a group, its monitor group, a
    # memory load moved into it.
    emu.set_faults('write /ovsrdt-selftest-*-mon/mon_groups/m/tasks KILL 1')
    res = selftest(emu, cache, '--only', 'behaviour')
    assert res.returncode == -9, res.stdout
    first = leftovers(emu)
    assert len(first) == 1 and first[0].endswith('-mon'), first
    no_helpers_left()
    # Killed in the effect part, moving the streaming neighbour: the next
    # run removed the first's group, this one leaves its own two.
    emu.set_faults('write /ovsrdt-selftest-*-neighbour/tasks KILL 1')
    res = selftest(emu, cache, '--only', 'effect')
    assert res.returncode == -9, res.stdout
    assert 'removed what an earlier, killed run left: %s' % first[0] in res.stdout
    second = leftovers(emu)
    assert [n.rsplit('-', 1)[1] for n in second] == ['neighbour', 'probe'], second
    no_helpers_left()
    emu.set_faults()
    res = selftest(emu, cache)
    assert res.returncode == 0, res.stdout + res.stderr
    assert 'removed what an earlier, killed run left: %s' % ', '.join(second) \
        in res.stdout
    assert leftovers(emu) == []
    no_helpers_left()


@pytest.fixture
def sleepers() -> Iterator[Callable[[], int]]:
    procs: list[subprocess.Popen] = []

    def spawn() -> int:
        procs.append(subprocess.Popen(['sleep', '300']))
        return procs[-1].pid

    yield spawn
    for proc in procs:
        proc.kill()
        proc.wait()


def test_libvirt_and_pqos_groups_untouched(emulated_resctrl: EmulatorFixture, cache: str,
                                           sleepers: Callable[[], int],
                                           tmp_path: Any) -> None:
    emu = emulated_resctrl
    pqos = Pqos(emu.root, emu.sysfs, str(tmp_path))
    res = pqos('-e', 'llc:1=0x003;llc:2=0x00c')      # makes COS1..COS15
    assert res.returncode == 0, res.stdout + res.stderr
    assert pqos('-a', 'llc:1=2').returncode == 0
    res = pqos('-a', 'pid:2=%d' % sleepers())
    assert res.returncode == 0, res.stdout + res.stderr
    for name in pqos.groups()[2:]:                    # the operator keeps two
        os.rmdir(os.path.join(emu.root, name))
    vm = os.path.join(emu.root, 'qemu-1-vm1-vcpus_0')  # as libvirt's <cachetune>
    os.mkdir(vm)
    with open(os.path.join(vm, 'schemata'), 'w') as fh:
        fh.write('L3:0=30;1=30\n')
    with open(os.path.join(vm, 'tasks'), 'w') as fh:
        fh.write('%d\n' % sleepers())

    def state() -> dict[str, tuple[str, ...]]:
        out = {}
        for name in [''] + sorted(os.listdir(emu.root)):
            path = os.path.join(emu.root, name)
            if name in ('info', 'mon_data', 'mon_groups') or not os.path.isdir(path):
                continue
            files = ('schemata', 'mode', 'cpus_list') + (('tasks',) if name else ())
            out[name] = tuple(open(os.path.join(path, f)).read() for f in files)
        return out

    before = state()
    assert sorted(before) == ['', 'COS1', 'COS2', 'qemu-1-vm1-vcpus_0']
    assert before['COS1'][2] == '2\n' and before['COS2'][3].strip().isdigit()
    res = selftest(emu, cache, '--json')
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert {b['result'] for b in doc['behaviours']} == {'pass', 'skip'}
    assert doc['effect']['verdict'] == 'emulated'
    # the probe and its neighbour kept off the others' ways (before: the
    # probe took COS1's, the neighbour everyone's)
    setup = doc['effect']['setup']
    assert (setup['probe_mask'], setup['neighbour_mask']) == ('c0', '700')
    closids = [b for b in doc['behaviours'] if b['name'] == 'closids'][0]
    assert closids['detail'].startswith('12 groups made with 12 of 16 CLOSIDs free')
    assert state() == before
    assert leftovers(emu) == []


def behaviour(name: str) -> Behaviour:
    return [b for b in BEHAVIOURS if b.name == name][0]


def write(emu: EmulatorFixture, rel: str, text: str) -> None:
    with open(emu.path(rel), 'w') as fh:
        fh.write(text)


def test_no_room_for_a_group_is_a_skip(emulator_factory: Factory) -> None:
    # Before: only 'Out of CLOSIDs' was a skip; 'Out of RMIDs' and 'No
    # space on L3:0' (ENOSPC both, a healthy kernel) were a FAIL.
    emu = emulator_factory('xeon-gold-6230', ['--set', 'num_rmids=2'])
    res = run_one(Node(emu.root, emu.sysfs), behaviour('tree'))
    assert (res.result, res.detail) == (SKIP, "no room for a group of its own: mkdir %s"
                                        "tree/mon_groups/m said 'Out of RMIDs'"
                                        % Node(emu.root).prefix)
    emu = emulator_factory('xeon-gold-6230')
    os.mkdir(emu.path('pqos-like'))
    write(emu, 'pqos-like/schemata', 'L3:0=1;1=1\n')
    write(emu, 'schemata', 'L3:0=7fe;1=7fe\n')
    write(emu, 'pqos-like/mode', 'exclusive\n')
    write(emu, 'mode', 'exclusive\n')
    res = run_one(Node(emu.root, emu.sysfs), behaviour('tree'))
    assert res.result == SKIP and res.detail.endswith("said 'No space on L3:0'"), res.detail


def test_newer_kernels_and_operators(emulator_factory: Factory) -> None:
    """A sparse-mask platform whose kernel keeps a new group's mask whole
    (tip's cbm_ensure_valid()), and an AMD node whose default group's MB
    an operator capped: both pass (before: FAIL, a new group's mask "not
    as ovs-rdt predicts"; MB's maximum taken from the capped value).
    """
    emu = emulator_factory('epyc-9654', ['--set', 'sparse_new_group=1'])
    doms = range(24)
    os.mkdir(emu.path('x'))
    write(emu, 'schemata', 'L3:%s\n' % ';'.join('%d=ff0f' % d for d in doms))
    write(emu, 'x/schemata', 'L3:%s\n' % ';'.join('%d=f0' % d for d in doms))
    write(emu, 'x/mode', 'exclusive\n')
    write(emu, 'schemata', 'MB:%s\n' % ';'.join('%d=1000' % d for d in doms))
    node = Node(emu.root, emu.sysfs)
    res = run_one(node, behaviour('new-group'))
    assert res.result == PASS and res.detail.endswith('=ff0f as ovs-rdt predicts (the '
                                                      'whole sparse set)'), res.detail
    res = run_one(node, behaviour('mb'))
    assert res.result == PASS and res.detail.startswith('MB in [0,2048] by 1'), res.detail


def test_the_effect_part_holds_the_lock_while_its_groups_exist(
        emulated_resctrl: EmulatorFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the lock was let go between the steps, so the agent or the
    # libvirt hook saw a foreign group holding ways and turned requests away.
    emu = emulated_resctrl
    node = Node(emu.root, emu.sysfs)
    free: list[str] = []
    measure = probe.Probe.measure

    def check_lock(self: probe.Probe, seconds: float) -> float:
        fd = os.open(emu.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            free.append(self.mode)
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
        return measure(self, seconds)

    monkeypatch.setattr(probe.Probe, 'measure', check_lock)
    out = effect.run(node, 2, 0.1, cpus(emu))
    assert out['verdict'] == 'emulated' and free == []
    # a Skip while measuring (a group refused: no room) is a skipped
    # effect, not a crash
    monkeypatch.setattr(Node, 'mkmon', lambda *a: (_ for _ in ()).throw(Skip('no room')))
    out = effect.run(node, 2, 0.1, cpus(emu))
    assert (out['verdict'], out['explanation']) == ('skipped', 'could not measure: no room')
    assert leftovers(emu) == []


# -- stopped by a signal, then a VM start (issue 47) -----------------------------
#: Where each phase is stopped: a behaviour's group holding a memory load
#: in a monitor group; the effect part's neighbour, both groups holding
#: the spare ways of a domain.
PHASES = {'behaviour': 'write /ovsrdt-selftest-*-mon/mon_groups/m/tasks',
          'effect': 'write /ovsrdt-selftest-*-neighbour/tasks'}
ONE_WAY = ('<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1"><rdt:l3 ways="%d"/>'
           '</rdt:rdt>')


@pytest.fixture(scope='module')
def beside_libvirt(libvirt_testbed: Any) -> Iterator[tuple[Any, EmulatorFixture]]:
    """The libvirt testbed's hook on an emulator of its own."""
    emu = EmulatorFixture('xeon-gold-6230', rootdir=libvirt_testbed.mount_base)
    emu.setUp()
    try:
        libvirt_testbed.configure_raw(
            '[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n[allocation]\n'
            'system_min_ways = 2\n' % (emu.root, emu.sysfs))
        yield libvirt_testbed, emu
    finally:
        libvirt_testbed.remove_guests()
        emu.cleanUp()


@pytest.mark.parametrize('phase', sorted(PHASES))
@pytest.mark.parametrize('sig', ['TERM', 'HUP', 'INT', 'KILL'])
def test_a_stopped_selftest_blocks_no_vm(beside_libvirt: Any, cache: str,
                                         phase: str, sig: str) -> None:
    """Stopped at each phase by each signal (an SSH session dropped, a
    systemd timeout, Ctrl-C, ``kill -9``): it removes its groups, or, killed,
    the hook removes them (its process is gone); the next VM that needs
    their ways starts.
    """
    testbed, emu = beside_libvirt
    emu.set_faults('%s %s 1' % (PHASES[phase], sig))
    res = selftest(emu, cache, '--only', phase)
    emu.set_faults()
    signum = getattr(signal, 'SIG' + sig)
    left = leftovers(emu)
    if sig == 'KILL':
        assert res.returncode == -signum, res.stdout + res.stderr
        assert left, 'a kill -9 leaves its groups'
    else:
        assert res.returncode == 128 + signum, res.stdout + res.stderr
        assert res.stderr == ('ovs-rdt selftest: error: stopped by SIG%s; its '
                              'groups are removed\n' % sig), res.stderr
        assert left == []
    no_helpers_left()
    # 9 of the 11 ways (the default group keeps 2): only if none is the
    # selftest's.
    guest = testbed.define(ONE_WAY % 9, vcpus=1, memory_mib=32)
    try:
        res = testbed.start(guest, check=False)
        assert res.returncode == 0, res.stderr
        assert leftovers(emu) == []
        if left:
            assert 'removing what a selftest that is gone left: %s' % ', '.join(
                left) in testbed.hook_log()
    finally:
        testbed.undefine(guest)
