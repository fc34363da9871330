#!/usr/bin/env python3
"""Reaction time of ovs-rdt-agent, on a real ovs-vswitchd and the emulator.

Starts its own ovsdb-server + ovs-vswitchd (dummy-pmd port, TESTBED.md),
the resctrl emulator and the agent, then times, over N changes each:

* ``pmd-cpu-mask`` 0x1 <-> 0x2 (every change re-creates the PMD thread with
  a new TID): from ``ovs-vsctl set`` to the new TID existing (ovs-vswitchd's
  own time) and to it being in the right group (the agent's), with
  ``rdt-vswitchd=pmd`` (new threads are born in the group: the kernel's
  inheritance) and ``rdt-vswitchd=default`` (born in the default group:
  the agent has to move them);
* ``rdt-pmd-l3-ways`` set/removed: from ``ovs-vsctl set`` to the PMD TIDs
  being in ``ovsrdt-ovs-pmd`` (set) or back in the default group (removed).

Target: p95 under 100 ms after the threads exist.
Usage: python3 bench/bench_agent.py [-n 20] [--profile xeon-gold-6230]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from ovs_rdt.core.model import PMD_GROUP  # noqa: E402
from ovs_rdt.sandbox.emulator import MountedEmulator  # noqa: E402
from tests.functional.fixtures.ovs import AgentProcess  # noqa: E402
from tests.functional.fixtures.ovs import OvsTestbed  # noqa: E402
from tests.functional.fixtures.ovs import wait_for  # noqa: E402
from tests.functional.fixtures.ovs import write_agent_config  # noqa: E402

#: /proc is cheap to poll; the emulator's tasks files are not (a read costs
#: it some ms of Python): polling them hard would slow down the agent.
POLL_PROC = 0.001
POLL_TASKS = 0.005


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    index = int(round(p / 100 * (len(ordered) - 1)))
    return ordered[min(len(ordered) - 1, index)]


def tasks(root: str, group: str) -> set[int]:
    try:
        with open(os.path.join(root, group, 'tasks')) as fh:
            return {int(t) for t in fh.read().split()}
    except FileNotFoundError:
        return set()


def until(check: Callable[[], bool], poll: float = POLL_TASKS,
          timeout: float = 10.0) -> float:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError('timed out')
        time.sleep(poll)
    return time.monotonic()


def mask_changes(ovs: OvsTestbed, root: str, n: int) -> tuple[list[float],
                                                              list[float]]:
    """(ovs-vswitchd's time to the new TID, agent's time to it placed)."""
    created, placed = [], []
    mask = '0x1'
    ovs.other_config(pmd_cpu_mask=mask)
    ovs.wait_pmds({0})
    for _ in range(n):
        mask = '0x2' if mask == '0x1' else '0x1'
        before = set(ovs.pmd_threads())
        t0 = time.monotonic()
        ovs.other_config(pmd_cpu_mask=mask)
        t_new = until(lambda: bool(set(ovs.pmd_threads()) - before),
                      POLL_PROC)
        new = set(ovs.pmd_threads()) - before
        t_in = until(lambda: new <= tasks(root, PMD_GROUP))
        created.append(t_new - t0)
        placed.append(t_in - t0)
    return created, placed


def knob_changes(ovs: OvsTestbed, root: str, n: int) -> list[float]:
    out = []
    for i in range(n):
        pmds = set(ovs.pmd_threads())
        t0 = time.monotonic()
        if i % 2 == 0:
            ovs.other_config(rdt_pmd_l3_ways='4')
            t1 = until(lambda: pmds <= tasks(root, PMD_GROUP))
        else:
            ovs.other_config(rdt_pmd_l3_ways=None)
            t1 = until(lambda: not os.path.isdir(os.path.join(root,
                                                              PMD_GROUP)))
        out.append(t1 - t0)
    return out


def row(name: str, values: list[float]) -> str:
    return '%-52s p50 %7.1f ms   p95 %7.1f ms   max %7.1f ms' % (
        name, pct(values, 50) * 1e3, pct(values, 95) * 1e3, max(values) * 1e3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('-n', type=int, default=20)
    parser.add_argument('--profile', default='xeon-gold-6230')
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix='ovsrdt-bench-')
    emu = MountedEmulator(os.path.join(tmp, 'emu'), args.profile)
    root, sysfs = emu.root, emu.sysfs
    ovs = OvsTestbed(os.path.join(tmp, 'ovs'))
    agent = None
    try:
        emu.start()
        ovs.start()
        conf = os.path.join(tmp, 'agent.conf')
        write_agent_config(conf, ovs, root, sysfs, None)
        agent = AgentProcess(conf, os.path.join(tmp, 'agent.log')).start()
        wait_for(lambda: (ovs.external_id('rdt-status') or '').startswith(
            'ok:'), what='agent status', timeout=20)
        ovs.other_config(rdt_pmd_l3_ways='4')
        wait_for(lambda: set(ovs.pmd_threads()) <= tasks(root, PMD_GROUP),
                 what='first placement')
        print('ovs-rdt-agent reaction times, %d changes each (%s emulated, '
              '%d host CPUs)' % (args.n, args.profile, os.cpu_count() or 0))
        results = {}
        for mode in ('pmd', 'default'):
            ovs.other_config(rdt_vswitchd=mode)
            created, placed = mask_changes(ovs, root, args.n)
            after = [p - c for c, p in zip(created, placed)]
            results[mode] = after
            print('\npmd-cpu-mask 0x1 <-> 0x2, rdt-vswitchd=%s' % mode)
            print(row('  ovs-vswitchd: set -> new PMD TID exists', created))
            print(row('  agent: set -> new TID in %s' % PMD_GROUP, placed))
            print(row('  agent: TID exists -> TID in its group', after))
            print('  ratio agent/ovs-vswitchd (p50): %.2f' % (
                pct(placed, 50) / max(pct(created, 50), 1e-6)))
        ovs.other_config(rdt_vswitchd='default')
        knobs = knob_changes(ovs, root, args.n)
        print('\nrdt-pmd-l3-ways=4 set / removed')
        print(row('  agent: set -> PMD TIDs in (or out of) the group', knobs))
        worst = max(pct(v, 95) for v in results.values())
        print('\ntarget p95 < 100 ms after the threads exist: %s (%.1f ms)'
              % ('met' if worst < 0.1 else 'MISSED', worst * 1e3))
        return 0 if worst < 0.1 else 1
    finally:
        if agent is not None:
            agent.stop()
        ovs.stop()
        emu.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
