"""ovs_rdt.agent.pmd (fake /proc) and ovs_rdt.agent.watch (real inotify)."""
from __future__ import annotations

import os

from ovs_rdt.agent import pmd
from ovs_rdt.agent.watch import PidfileWatch


def fake_proc(root: str, pid: int, threads: dict[int, str],
              comm: str = 'ovs-vswitchd', state: str = 'S') -> None:
    base = os.path.join(root, str(pid))
    os.makedirs(base, exist_ok=True)
    with open(os.path.join(base, 'comm'), 'w') as fh:
        fh.write(comm + '\n')
    with open(os.path.join(base, 'stat'), 'w') as fh:
        fh.write('%d (%s) %s 1 2 3\n' % (pid, comm, state))
    for tid, name in threads.items():
        os.makedirs(os.path.join(base, 'task', str(tid)), exist_ok=True)
        with open(os.path.join(base, 'task', str(tid), 'comm'), 'w') as fh:
            fh.write(name + '\n')


def pidfile(tmp: str, pid: int) -> str:
    path = os.path.join(tmp, 'vswitchd.pid')
    with open(path, 'w') as fh:
        fh.write('%d\n' % pid)
    return path


def test_scan_sorts_pmds_and_others(tmp_path) -> None:
    proc = str(tmp_path / 'proc')
    fake_proc(proc, 100, {100: 'ovs-vswitchd', 101: 'urcu2',
                          105: 'pmd-c03/id:7', 106: 'pmd-c01/id:8',
                          107: 'handler5'})
    pins = {105: frozenset({3}), 106: frozenset({0, 1, 2, 3})}
    scan = pmd.scan(pidfile(str(tmp_path), 100), proc,
                    affinity=lambda t: pins.get(t, frozenset()))
    assert scan.pid == 100
    assert scan.pmd_tids == [105, 106]
    assert scan.others == [100, 101, 107]
    # Core from the name; a thread not yet pinned adds nothing else.
    assert scan.pmds[0].cores == {3} and scan.pmds[1].cores == {1}
    assert scan.cores == {1, 3}


def test_scan_affinity_adds_pinned_core(tmp_path) -> None:
    proc = str(tmp_path / 'proc')
    fake_proc(proc, 100, {100: 'ovs-vswitchd', 105: 'pmd-c03/id:7'})
    scan = pmd.scan(pidfile(str(tmp_path), 100), proc,
                    affinity=lambda t: frozenset({5}))
    assert scan.cores == {3, 5}


def test_key_changes_with_new_tids(tmp_path) -> None:
    proc = str(tmp_path / 'proc')
    fake_proc(proc, 100, {100: 'ovs-vswitchd', 105: 'pmd-c00/id:7'})
    path = pidfile(str(tmp_path), 100)
    first = pmd.scan(path, proc, affinity=lambda t: frozenset())
    assert first.key == pmd.scan(path, proc, lambda t: frozenset()).key
    fake_proc(proc, 100, {106: 'pmd-c01/id:8'})
    assert pmd.scan(path, proc, lambda t: frozenset()).key != first.key


def test_not_running(tmp_path) -> None:
    proc = str(tmp_path / 'proc')
    os.makedirs(proc)
    missing = pmd.scan(str(tmp_path / 'nope.pid'), proc)
    assert missing.pid is None and 'not running' in missing.why
    fake_proc(proc, 200, {200: 'bash'}, comm='bash')
    other = pmd.scan(pidfile(str(tmp_path), 200), proc)
    assert other.pid is None and "'bash'" in other.why
    fake_proc(proc, 300, {300: 'ovs-vswitchd'}, state='Z')
    assert pmd.scan(pidfile(str(tmp_path), 300), proc).pid is None


def test_pidfile_watch_sees_rename_and_delete(tmp_path) -> None:
    path = str(tmp_path / 'ovs-vswitchd.pid')
    watch = PidfileWatch(path)
    try:
        assert watch.fileno() is not None
        assert not watch.drain()
        with open(str(tmp_path / 'unrelated'), 'w') as fh:
            fh.write('x')
        assert not watch.drain()
        with open(path + '.tmp', 'w') as fh:
            fh.write('1\n')
        os.rename(path + '.tmp', path)
        assert watch.drain()
        os.unlink(path)
        assert watch.drain()
    finally:
        watch.close()


def test_pidfile_watch_missing_directory(tmp_path) -> None:
    watch = PidfileWatch(str(tmp_path / 'later' / 'x.pid'))
    try:
        assert not watch.rearm()
        os.mkdir(str(tmp_path / 'later'))
        assert watch.rearm()
        with open(str(tmp_path / 'later' / 'x.pid'), 'w') as fh:
            fh.write('1\n')
        assert watch.drain()
    finally:
        watch.close()
