"""``bench/soak.py --quick`` in the stress lane: 500 lifecycle events and a
fault every 50 on two nodes (real libvirtds with KVM guests and the hook,
private OvS, the agent with the policy and metrics), every invariant after
every event, nothing left after the last stop.  The full run (10,000
events) is ``python3 bench/soak.py``.
"""
from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys

from tests.stress import bed, figures


def free_port_pair() -> int:
    """A port whose next one is free too (node a's metrics, node b's)."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(('127.0.0.1', 0))
            port = first.getsockname()[1]
            with socket.socket() as second:
                try:
                    second.bind(('127.0.0.1', port + 1))
                except OSError:
                    continue
                return port
    raise AssertionError('no two free ports side by side')


def test_soak_quick(tmp_path) -> None:
    env = dict(os.environ, PYTHONPATH=bed.REPO)
    proc = subprocess.Popen(
        [sys.executable, os.path.join(bed.REPO, 'bench', 'soak.py'),
         '--quick', '--out', str(tmp_path), '--port',
         str(free_port_pair())], cwd=bed.REPO, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        # SIGTERM: the soak stops its workers and tears its nodes down.
        proc.terminate()
        stdout, stderr = proc.communicate(timeout=600)
        raise AssertionError('the quick soak took over 15 minutes: %s'
                             % stdout[-3000:]) from None
    res = subprocess.CompletedProcess(proc.args, proc.returncode, stdout,
                                      stderr)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    with open(tmp_path / 'soak.csv', encoding='utf-8') as fh:
        rows = list(csv.DictReader(fh))
    assert {r['node'] for r in rows} == {'a', 'b'}
    assert int(rows[-1]['events']) >= 500, rows[-1]
    assert all(r['violations'] == '0' for r in rows), out[-4000:]
    assert int(rows[-1]['faults']) >= 7, rows[-1]
    for kind in ('agent-kill', 'libvirtd-restart', 'qemu-kill', 'eio',
                 'enospc', 'foreign-group', 'pqos'):     # every kind, real
        assert 'fault %s ' % kind in res.stdout, (kind, res.stdout[-3000:])
    assert 'not installed' not in res.stdout
    for row in rows[-2:]:           # after the last stop
        assert row['guests_running'] == '0', row
        # the default group and the two pools: no CLOSID leaked
        assert row['closids_used'] == '3', row
    assert (tmp_path / 'soak.png').stat().st_size > 0
    assert 'invariant violations: 0' in res.stdout
    assert 'leaked (groups, CLOSIDs, QEMUs) after the last stop: none' in \
        res.stdout
    figures.add('soak events (quick)', int(rows[-1]['events']))
    figures.add('soak faults (quick)', int(rows[-1]['faults']))
