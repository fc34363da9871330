"""Scheduling time per boot with RDTCacheFilter, inside Nova's own framework.

200 boots, one at a time, over 50 fake computes (two-socket Xeon Gold 6230
nodes, each started with the provider config the real ``ovs-rdt
provider-config`` wrote for it, its capacity as aggregate metadata), in
Nova 34's functional framework (real nova-api, conductor and scheduler,
Placement in-process): once with RDTCacheFilter enabled and flavors asking
``rdt:l3_ways=2`` (4 per host: the fleet ends full), once without the
filter and with the same flavors minus their ``rdt:`` spec.  The time is
what the scheduler spends per boot in ``select_destinations`` (Placement's
candidates, every filter, the weighers, the claim), and the ratio of the
two.  Target: <= 1.1x.  The two deployments run at the same time, in two
processes, so that they share whatever else loads the machine.  Needs
nova (``tox -e bench-nova``) and root (the emulator).

    python bench/bench_nova_scheduler.py [--hosts N] [--boots N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any
import unittest
import warnings

warnings.simplefilter('ignore')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

TARGET = 1.1


def run(filtered: bool, hosts: int, boots: int) -> dict[str, Any]:
    """One deployment; boots one at a time; scheduling times in seconds."""
    from nova.scheduler import manager as scheduler_manager
    from tests.nova_functional import base, nodes

    times: list[float] = []
    walls: list[float] = []
    real = scheduler_manager.SchedulerManager.select_destinations

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return real(self, *args, **kwargs)
        finally:
            times.append(time.perf_counter() - started)

    class Bench(base.RDTTestCase):
        ACCOUNTING = 'filter' if filtered else 'placement'

        def test_boots(self) -> None:
            self.stub_out('nova.scheduler.manager.SchedulerManager.'
                          'select_destinations', timed)
            self.start_hosts(nodes.GOLD, ['h%02d' % i for i in range(hosts)])
            flavor = self.flavor(2, path='filter') if filtered else \
                self.flavor()
            for _ in range(boots):
                started = time.perf_counter()
                self.boot(flavor)
                walls.append(time.perf_counter() - started)
            if filtered and boots == 4 * hosts:
                # the fleet is full: the filter refuses the next one
                times_before = len(times)
                self.refused(flavor)
                del times[times_before:]

    with open(os.devnull, 'w') as devnull:
        result = unittest.TextTestRunner(stream=devnull).run(
            unittest.TestSuite([Bench('test_boots')]))
    if not result.wasSuccessful():
        for _, trace in result.errors + result.failures:
            print(trace, file=sys.stderr)
        raise SystemExit('bench_nova_scheduler: the %s run failed'
                         % ('filtered' if filtered else 'baseline'))
    return {'sched': times, 'wall': walls}


def describe(label: str, figures: dict[str, Any]) -> str:
    sched = figures['sched']
    return ('%-28s scheduling per boot: mean %.1f ms, median %.1f ms, p95 '
            '%.1f ms (%d boots); API to ACTIVE per boot: mean %.0f ms'
            % (label, 1000 * statistics.mean(sched),
               1000 * statistics.median(sched),
               1000 * sorted(sched)[int(0.95 * (len(sched) - 1))],
               len(sched), 1000 * statistics.mean(figures['wall'])))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--hosts', type=int, default=50)
    parser.add_argument('--boots', type=int, default=200)
    parser.add_argument('--run', choices=('baseline', 'filtered'),
                        help=argparse.SUPPRESS)   # one side, as a child
    args = parser.parse_args()
    try:
        import nova  # noqa: F401
    except ImportError:
        print('bench_nova_scheduler: skipped, nova is not installed here '
              '(run it with tox -e bench-nova)')
        return 0
    if args.boots > 4 * args.hosts:
        parser.error('--boots: at most 4 per host (%d)' % (4 * args.hosts))
    if args.run:
        from tests.nova_functional import nodes
        with tempfile.TemporaryDirectory(prefix='bench-nova-') as tmp:
            nodes.prepare(tmp)
        figures = run(args.run == 'filtered', args.hosts, args.boots)
        sys.stdout.write(json.dumps(figures) + '\n')
        return 0
    logs = {side: tempfile.TemporaryFile('w+')
            for side in ('baseline', 'filtered')}
    children = {side: subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), '--run', side,
         '--hosts', str(args.hosts), '--boots', str(args.boots)],
        stdout=subprocess.PIPE, stderr=logs[side], text=True)
        for side in logs}
    results = {}
    for side, child in children.items():
        out, _ = child.communicate()
        if child.returncode != 0:
            logs[side].seek(0)
            sys.stderr.write(''.join(logs[side].readlines()[-30:]))
            raise SystemExit('bench_nova_scheduler: the %s run failed (%d)'
                             % (side, child.returncode))
        logs[side].close()
        results[side] = json.loads(out.strip().splitlines()[-1])
    baseline, filtered = results['baseline'], results['filtered']
    print('%d boots over %d hosts, both deployments at once:'
          % (args.boots, args.hosts))
    print(describe('without RDTCacheFilter:', baseline))
    print(describe('with RDTCacheFilter:', filtered))
    ratio = statistics.mean(filtered['sched']) / \
        statistics.mean(baseline['sched'])
    median = statistics.median(filtered['sched']) / \
        statistics.median(baseline['sched'])
    print('ratio (mean): %.3fx, (median): %.3fx; target <= %.1fx: %s'
          % (ratio, median, TARGET, 'met' if ratio <= TARGET else 'NOT met'))
    return 0


if __name__ == '__main__':
    sys.exit(main())
