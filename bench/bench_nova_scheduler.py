"""Scheduling time per boot with ovs-rdt's requests, against Nova alone.

    python bench/bench_nova_scheduler.py [--hosts N] [--boots N] [--per-host N]
    (with nova and root: tox -e bench-nova -- ..., or the nova env's python)

Nova 34's functional framework (real nova-api, conductor and scheduler,
Placement in-process, fake-driver computes; eventlet, see below), run twice at
the same time in two processes (so that whatever else loads the machine
loads both):

* with ovs-rdt: ``--hosts`` two-socket Xeon Gold 6230 computes with the
  shared pool ``hp`` (``nodes.GOLD_POOL``), each started with the provider
  config the real ``ovs-rdt provider-config`` wrote for it (14 ways in all
  and 14 CLOSIDs for VMs, the pool's trait), RDTCacheFilter enabled, and
  flavors asking Placement for cache: ``resources:CUSTOM_RDT_L3_WAY=2`` and
  ``resources:CUSTOM_RDT_CLOSID=1``, or ``rdt:pool=hp`` with
  ``trait:CUSTOM_RDT_POOL_HP=required``;
* Nova alone: the same computes without a provider config, Nova's filters
  only, the same flavors without those specs.

Before the measured boots each host gets ``--per-host`` instances (20) in
this mix: a tenth (rounded up) ask 2 ways, two fifths the pool, the rest no
cache; they are made through nova-api like any boot (per host, one
multi-create request per flavor for that host, microversion 2.74 ``host``:
the scheduler still runs every filter and claims in Placement), RPC casts
as calls and the computes' builds synchronous.  (One shortcut, only while
they are made: the compute's re-read of its provider's allocations on every
claim, one Placement GET per instance already on the host, which the fake
driver never needs, is skipped.  Throughout, the computes' heartbeats come
every 10 minutes, not 10 s, and what is alive after each host is filled is
moved out of the garbage collector's reach, ``gc.freeze()``: the whole
cloud lives in each process here.)

Then ``--boots`` boots of the 2-way flavor, one at a time; before every
``--churn-every``-th one a seeded random alive instance (the same one, by
creation order, on both sides) is deleted and another is moved to another
host, in turn cold-migrated and resized (vCPUs 1 <-> 2, the same cache),
each confirmed.  The time per boot is what the scheduler spends in
``select_destinations`` (Placement's candidates, every filter, the
weighers, the claim); target: with / without <= 1.05x.  With ovs-rdt,
RDTCacheFilter's ``filter_all`` is timed per request too.  At the end each
host's free ways in Placement are exactly its 14 less what nova-api lists
on it, and a boot asking two more than the freest host has is refused (No
valid host).
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable
import unittest
import warnings

warnings.simplefilter('ignore')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
# Nova's functional framework in native threads spends about 5 times as
# long per request here as under eventlet (a file-backed SQLite behind a
# write lock, the fake RPC's polling), the same on both sides: eventlet
# unless told otherwise, so that 200 hosts take minutes, not hours.
os.environ.setdefault('OS_NOVA_DISABLE_EVENTLET_PATCHING', '0')

TARGET = 1.05
#: Ways in all for VMs on a GOLD_POOL host; what the measured boots ask.
VM_WAYS = 14
WAYS = 2


def mix(per_host: int) -> list[tuple[str, int]]:
    """(kind, count) of the instances made on each host before."""
    ways = (per_host + 9) // 10
    pool = 2 * per_host // 5
    return [('ways', ways), ('pool', pool), ('none', per_host - ways - pool)]


def run(rdt: bool, hosts: int, boots: int, per_host: int,
        every: int, seed: int) -> dict[str, Any]:
    """One deployment; its records (times in seconds)."""
    import nova.tests.functional  # noqa: F401 (eventlet or not: first)
    import fixtures  # noqa: H306
    from nova.scheduler import manager as scheduler_manager
    from nova.tests import fixtures as nova_fixtures

    from tests.nova_functional import base, nodes

    records: list[dict[str, Any]] = []
    out: dict[str, Any] = {'records': records, 'walls': []}
    state: dict[str, Any] = {'phase': 'setup', 'acc': None}
    local = threading.local()
    real = scheduler_manager.SchedulerManager.select_destinations

    def timed(self: Any, ctxt: Any, *args: Any, **kwargs: Any) -> Any:
        acc = state['acc'] = {'filter': 0.0, 'gc': 0.0}
        started = time.perf_counter()
        try:
            return real(self, ctxt, *args, **kwargs)
        finally:
            records.append({'phase': state['phase'],
                            'sched': time.perf_counter() - started,
                            'filter': acc['filter'], 'gc': acc['gc']})
            state['acc'] = None

    def collecting(phase: str, info: dict) -> None:
        """Time the interpreter's collections during a request."""
        if phase == 'start':
            state['gc_started'] = time.perf_counter()
        elif state['acc'] is not None and state.get('gc_started'):
            state['acc']['gc'] += time.perf_counter() - state['gc_started']

    def timer(call: Callable) -> Callable:
        @functools.wraps(call)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            acc = state['acc']
            depth = getattr(local, 'depth', 0)
            local.depth = depth + 1
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                local.depth = depth
                if acc is not None and depth == 0:
                    acc['filter'] += time.perf_counter() - started
        return wrapper

    class Bench(base.RDTTestCase):
        RDT_FILTER = rdt

        def setUp(self) -> None:
            # every compute's heartbeat (a service record write every 10 s)
            # runs in this process: every 10 minutes instead (the services
            # stay up: ComputeFilter's service_down_time matches)
            self.flags(report_interval=600, service_down_time=3600)
            super().setUp()
            self.flags(allow_resize_to_same_host=False)   # moves move
            self.flags(max_limit=1000000, group='api')    # one listing

        def start_hosts(self, kind: Any, names: Any,
                        cell: Any = None) -> None:
            if rdt:
                super().start_hosts(kind, names, cell)
                return
            empty = self.useFixture(fixtures.TempDir()).path
            self.flags(provider_config_location=empty, group='compute')
            for name in names:     # no provider config: no cache inventory
                self._start_compute(name)

        def kind_flavor(self, kind: str, vcpus: int = 1) -> str:
            if not rdt:
                return self.flavor(vcpus=vcpus)
            ways, pool = {'ways': (WAYS, None), 'pool': (None, 'hp'),
                          'none': (None, None)}[kind]
            return self.flavor(ways, pool=pool, vcpus=vcpus)

        def servers(self) -> list[dict]:
            return self.admin_api.get_servers()

        def test_boots(self) -> None:
            self.stub_out('nova.scheduler.manager.SchedulerManager.'
                          'select_destinations', timed)
            gc.callbacks.append(collecting)
            self.addCleanup(gc.callbacks.remove, collecting)
            if rdt:
                manager = self.scheduler_service.manager.host_manager
                found = [f for f in manager.enabled_filters
                         if type(f).__name__ == 'RDTCacheFilter']
                self.assertEqual(1, len(found), manager.enabled_filters)
                found[0].filter_all = timer(found[0].filter_all)
            names = ['h%03d' % i for i in range(hosts)]
            started = time.perf_counter()
            self.start_hosts(nodes.GOLD_POOL, names)
            out['start'] = time.perf_counter() - started
            self.fill(names)
            self.measure()
            if rdt:
                state['phase'] = 'check'
                self.check(names)

        def fill(self, names: list[str]) -> None:
            state['phase'] = 'fill'
            started = time.perf_counter()
            with nova_fixtures.SpawnIsSynchronousFixture(), \
                    fixtures.MonkeyPatch(
                        'nova.scheduler.client.report.SchedulerReportClient.'
                        'get_allocations_for_provider_tree',
                        lambda *args, **kwargs: {}):
                for host in names:
                    for kind, count in mix(per_host):
                        if count:
                            self.post(self.kind_flavor(kind), host, count,
                                      'pre-%s-%s' % (host, kind))
                    gc.freeze()
            out['fill'] = time.perf_counter() - started
            servers = self.servers()
            statuses: dict[str, int] = {}
            for server in servers:
                statuses[server['status']] = \
                    statuses.get(server['status'], 0) + 1
            self.assertEqual({'ACTIVE': per_host * len(names)}, statuses,
                             [s.get('fault') for s in servers
                              if s['status'] != 'ACTIVE'][:3])
            # creation order, the same on both sides: host, kind, index
            # (a multi-create names its instances <name>-1, <name>-2...)
            kinds = [kind for kind, _ in mix(per_host)]

            def order(server: dict) -> tuple:
                parts = server['name'].split('-')
                return (parts[1], kinds.index(parts[2]),
                        int(parts[3]) if len(parts) > 3 else 1)
            self.alive = [(s, s['name'].split('-')[2])
                          for s in sorted(servers, key=order)]

        def measure(self) -> None:
            rng = random.Random(seed)
            vcpus: dict[str, int] = {}
            flavor = self.kind_flavor('ways')
            for i in range(boots):
                if every and i % every == every - 1 and len(self.alive) > 2:
                    state['phase'] = 'move'
                    victim, _ = self.alive.pop(rng.randrange(
                        len(self.alive)))
                    self.delete(victim)
                    server, kind = self.alive[rng.randrange(
                        len(self.alive))]
                    if (i // every) % 2:
                        body: Any = {'migrate': None}
                    else:
                        now = vcpus[server['id']] = \
                            3 - vcpus.get(server['id'], 1)
                        body = {'resize': {'flavorRef': self.kind_flavor(
                            kind, vcpus=now)}}
                    self.action(server, body, 'VERIFY_RESIZE')
                    self.confirm(server)
                state['phase'] = 'boot'
                started = time.perf_counter()
                server = self.wait(self.post(flavor, name='boot-%04d' % i),
                                   ('ACTIVE', 'ERROR'))
                out['walls'].append(time.perf_counter() - started)
                self.assertEqual('ACTIVE', server['status'],
                                 server.get('fault'))
                self.alive.append((server, 'ways'))
            state['phase'] = 'done'

        def check(self, names: list[str]) -> None:
            """Each host's free ways in Placement are its own less what
            nova-api lists on it, and a boot asking two more than the
            freest host has is refused.
            """
            used = {host: 0 for host in names}
            for server in self.servers():
                self.assertEqual('ACTIVE', server['status'])
                ways = server['flavor']['extra_specs'].get(
                    'resources:CUSTOM_RDT_L3_WAY')
                if ways:
                    used[server['OS-EXT-SRV-ATTR:host']] += int(ways)
            for host in names:
                self.assertEqual(VM_WAYS - used[host], self.free(host)[0],
                                 host)
            most = VM_WAYS - min(used.values())
            self.refused(self.flavor(most + 2))
            out['check'] = {'hosts': len(names), 'refused': most + 2,
                            'full': sum(1 for u in used.values()
                                        if u == VM_WAYS)}

    started = time.perf_counter()
    with open(os.devnull, 'w') as devnull:
        result = unittest.TextTestRunner(stream=devnull).run(
            unittest.TestSuite([Bench('test_boots')]))
    out['wall'] = time.perf_counter() - started
    out['rss'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    if not result.wasSuccessful():
        for _, trace in result.errors + result.failures:
            print(trace, file=sys.stderr)
        raise SystemExit('bench_nova_scheduler: the %s run failed'
                         % ('ovs-rdt' if rdt else 'baseline'))
    return out


# -- report --------------------------------------------------------------------
def p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * (len(values) - 1))]


def ms(value: float) -> str:
    return '%.1f' % (1000 * value)


def describe(label: str, figures: dict[str, Any]) -> str:
    sched = [r['sched'] for r in figures['records'] if r['phase'] == 'boot']
    moves = [r['sched'] for r in figures['records'] if r['phase'] == 'move']
    line = ('%-22s per boot: mean %s ms, median %s, p95 %s (%d boots)'
            % (label, ms(statistics.mean(sched)), ms(statistics.median(sched)),
               ms(p95(sched)), len(sched)))
    if moves:
        line += '; per move: mean %s ms (%d)' % (
            ms(statistics.mean(moves)), len(moves))
    return line


def report(args: argparse.Namespace, baseline: dict, rdt: dict) -> None:
    kinds = ', '.join('%d %s' % (n, {'ways': '%d ways' % WAYS,
                                     'pool': 'pool hp',
                                     'none': 'no cache'}[k])
                      for k, n in mix(args.per_host) if n)
    churn = ('a delete and a move (+confirm) before every %s'
             % ('boot' if args.churn_every == 1 else
                '%dth' % args.churn_every)) if args.churn_every else \
        'no churn'
    print('%d hosts x %d instances (%s; made in %.0f s / %.0f s), then %d '
          'boots of %d ways, %s; both deployments at once:'
          % (args.hosts, args.per_host, kinds, baseline['fill'],
             rdt['fill'], args.boots, WAYS, churn))
    print(describe('Nova alone:', baseline))
    print(describe('with ovs-rdt:', rdt))
    sched = {side: [r['sched'] for r in figures['records']
                    if r['phase'] == 'boot']
             for side, figures in (('b', baseline), ('r', rdt))}
    ratio = statistics.mean(sched['r']) / statistics.mean(sched['b'])
    median = statistics.median(sched['r']) / statistics.median(sched['b'])
    print('ratio (mean): %.3fx, (median): %.3fx; target <= %.2fx: %s'
          % (ratio, median, TARGET, 'met' if ratio <= TARGET else 'NOT met'))
    filt = [r['filter'] for r in rdt['records'] if r['phase'] == 'boot']
    print('RDTCacheFilter.filter_all per boot: mean %s ms, p95 %s (%.1f%% of '
          'scheduling)' % (ms(statistics.mean(filt)), ms(p95(filt)),
                           100 * sum(filt) / sum(sched['r'])))
    check = rdt.get('check')
    if check:
        print('checked: at the end Placement has each host\'s free ways '
              'exactly (%d hosts, %d full), a boot asking %d ways is refused '
              '(No valid host)' % (check['hosts'], check['full'],
                                   check['refused']))
    gcs = ['%s' % ms(statistics.mean(r.get('gc', 0.0)
                                     for r in figures['records']
                                     if r['phase'] == 'boot'))
           for figures in (baseline, rdt)]
    print('each deployment (alone / with ovs-rdt): %d computes started in '
          '%.0f / %.0f s, whole run %.0f / %.0f s, peak RSS %d / %d MB; '
          'garbage collection per boot %s / %s ms'
          % (args.hosts, baseline['start'], rdt['start'], baseline['wall'],
             rdt['wall'], baseline['rss'], rdt['rss'], gcs[0], gcs[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--hosts', type=int, default=50)
    parser.add_argument('--boots', type=int, default=200)
    parser.add_argument('--per-host', type=int, default=20,
                        help='instances made on each host before')
    parser.add_argument('--churn-every', type=int, default=5,
                        help='a delete and a move before every Nth boot '
                        '(0: none)')
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--run', choices=('baseline', 'rdt'),
                        help=argparse.SUPPRESS)   # one side, as a child
    parser.add_argument('--json', help=argparse.SUPPRESS)  # raw figures
    args = parser.parse_args()
    try:
        import nova  # noqa: F401
    except ImportError:
        print('bench_nova_scheduler: skipped, nova is not installed here '
              '(run it with tox -e bench-nova)')
        return 0
    free = (VM_WAYS - WAYS * mix(args.per_host)[0][1]) // WAYS
    if args.per_host > 25 or free < 1:
        parser.error('--per-host: at most 25 (the computes\' vCPUs)')
    if args.boots > free * args.hosts * 4 // 5:
        parser.error('--boots: at most %d (4/5 of the %d boots each host '
                     'has room for)' % (free * args.hosts * 4 // 5, free))
    if args.run:
        from tests.nova_functional import nodes
        with tempfile.TemporaryDirectory(prefix='bench-nova-') as tmp:
            nodes.prepare(tmp)
        figures = run(args.run == 'rdt', args.hosts, args.boots,
                      args.per_host, args.churn_every, args.seed)
        sys.stdout.write(json.dumps(figures) + '\n')
        return 0
    logs = {side: tempfile.TemporaryFile('w+') for side in ('baseline', 'rdt')}
    children = {side: subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), '--run', side,
         '--hosts', str(args.hosts), '--boots', str(args.boots),
         '--per-host', str(args.per_host),
         '--churn-every', str(args.churn_every), '--seed', str(args.seed)],
        stdout=subprocess.PIPE, stderr=logs[side], text=True)
        for side in logs}
    results = {}
    for side, child in children.items():
        out, _ = child.communicate()
        if child.returncode != 0:
            logs[side].seek(0)
            lines = logs[side].readlines()
            path = os.path.join(tempfile.gettempdir(),
                                'bench_nova_scheduler.%s.log' % side)
            with open(path, 'w', encoding='utf-8') as fh:
                fh.writelines(lines)
            sys.stderr.write(''.join(lines[-30:]))
            sys.stderr.write('(its whole log: %s)\n' % path)
            for other in children.values():
                if other.poll() is None:
                    other.kill()
            raise SystemExit('bench_nova_scheduler: the %s run failed (%d)'
                             % (side, child.returncode))
        logs[side].close()
        results[side] = json.loads(out.strip().splitlines()[-1])
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as fh:
            json.dump(results, fh)
    report(args, results['baseline'], results['rdt'])
    return 0


if __name__ == '__main__':
    sys.exit(main())
