"""Scheduling time per boot with RDTCacheFilter, inside Nova's own framework.

    python bench/bench_nova_scheduler.py [--hosts N] [--boots N] [--per-host N]
    (with nova and root: tox -e bench-nova -- ..., or the nova env's python)

Nova 34's functional framework (real nova-api, conductor and scheduler,
Placement in-process, fake-driver computes) with ``--hosts`` two-socket
Xeon Gold 6230 computes with the shared pool ``hp`` (``nodes.GOLD_POOL``:
each started with the provider config the real ``ovs-rdt provider-config``
wrote for it, its capacity as aggregate metadata: 7 ways per socket and 14
CLOSIDs for VMs), run twice at the same time in two processes (so that
whatever else loads the machine loads both): with RDTCacheFilter and
flavors asking ``rdt:``, and without the filter, with the same flavors
minus their ``rdt:`` specs.

Before the measured boots, each host gets ``--per-host`` instances (20) in
this mix: a tenth (rounded up) ask ``rdt:l3_ways=1``, two fifths
``rdt:pool=hp`` (no way, the pool's CLOSID), the rest no cache at all;
so 5 ways per socket stay free and every measured boot fits, while the
filter counts every instance of every host on each request.  They are
made through nova-api like any boot: per host, one multi-create request
per flavor (``min_count = max_count``) for that host (microversion 2.74
``host``: the scheduler still runs every filter on it and claims in
Placement), RPC casts as calls and the computes' builds synchronous, so
each request returns with its instances ACTIVE, built by their compute
and reported to the scheduler as after any boot.  One shortcut, only
while they are made: the compute's re-read of its provider's allocations
on every claim (one Placement GET per instance already on the host; Nova
hands them to the driver for a reshape, which the fake driver never
needs) is skipped; nothing it would write is skipped.  (And throughout,
the computes' heartbeats, all in the scheduler's process here, come every
10 minutes, not every 10 s; and what is alive after each host is filled
is moved out of the garbage collector's reach, ``gc.freeze()``: the
whole cloud lives in each process here, and a full collection over it,
every 15 requests or so, took 1.3 s of a request at 200 hosts.)
Afterwards the bench checks that the scheduler's HostManager has every
host's instances and that nova-api lists them on their hosts.  Making
them is most of a run: about 0.2 s of a core per instance (Nova's API,
conductor and compute paths), so 50 hosts take 6 minutes on two cores,
200 hosts 21.

Then ``--boots`` boots of ``rdt:l3_ways=1``, one at a time; before every
``--churn-every``-th one a seeded random alive instance (the same one,
by creation order, on both sides) is deleted and another is moved to
another host, in turn cold-migrated and resized (vCPUs 1 <-> 2, the same
``rdt:`` specs), each confirmed: the ledger has instances and migrations
to read.  The time per boot is what the scheduler spends in
``select_destinations`` (Placement's candidates, every filter, the
weighers, the claim); target: with / without <= 1.1x.  With the filter,
its ``filter_all`` and its ledger's database and Placement reads (every
method of ``RDTCacheFilter.ledger`` taking a ``context``) are timed per
request, against the instances in the cloud and the instance and
migration rows changed since the previous request.  At the end each
host's free ways, counted from what nova-api lists on it, are exactly
what the filter finds (one more way is refused there), and a boot asking
one way more than the freest host has is refused (No valid host).
"""
from __future__ import annotations

import argparse
import functools
import gc
import inspect
import json
import math
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

TARGET = 1.1
#: Ways per socket for VMs on a GOLD_POOL host.
VM_WAYS = 7


def mix(per_host: int) -> list[tuple[str, int]]:
    """(kind, count) of the instances made on each host before."""
    ways = (per_host + 9) // 10
    pool = 2 * per_host // 5
    return [('w1', ways), ('pool', pool), ('none', per_host - ways - pool)]


def run(filtered: bool, hosts: int, boots: int, per_host: int,
        every: int, seed: int) -> dict[str, Any]:
    """One deployment; its records (times in seconds)."""
    import fixtures
    from nova import context as nova_context
    from nova.db.main import api as main_db
    from nova.db.main import models
    from nova import objects
    from nova.scheduler import manager as scheduler_manager
    from nova.tests import fixtures as nova_fixtures
    from oslo_utils import timeutils
    import sqlalchemy as sa

    from tests.nova_functional import base, nodes

    records: list[dict[str, Any]] = []
    out: dict[str, Any] = {'records': records, 'walls': []}
    state: dict[str, Any] = {'phase': 'setup', 'since': None, 'acc': None,
                             'ledger': None, 'filter': None}
    local = threading.local()
    real = scheduler_manager.SchedulerManager.select_destinations

    def census(ctxt: Any) -> tuple[int, int]:
        """(instances alive, instance and migration rows changed since the
        previous request) in the cell database.
        """
        since = state['since']
        inst, mig = models.Instance, models.Migration
        with main_db.get_context_manager(ctxt).reader.using(ctxt) as db:
            alive = db.execute(sa.select(sa.func.count()).select_from(
                inst).where(inst.deleted == 0)).scalar()
            if since is None:
                return alive, 0
            changed = sum(
                db.execute(sa.select(sa.func.count()).select_from(
                    model).where(sa.or_(model.created_at >= since,
                                        model.updated_at >= since,
                                        model.deleted_at >= since))).scalar()
                for model in (inst, mig))
        return alive, changed

    def timed(self: Any, ctxt: Any, *args: Any, **kwargs: Any) -> Any:
        cell = state.get('cell')
        if cell is not None:
            with nova_context.target_cell(ctxt, cell) as cctxt:
                alive, changes = census(cctxt)
        else:
            alive, changes = 0, 0
        state['since'] = timeutils.utcnow()
        if state['filter'] is not None:
            wrap_ledger()
        acc = state['acc'] = {'ledger': 0.0, 'filter': 0.0, 'reads': 0,
                              'gc': 0.0}
        started = time.perf_counter()
        try:
            return real(self, ctxt, *args, **kwargs)
        finally:
            records.append({'phase': state['phase'],
                            'sched': time.perf_counter() - started,
                            'ledger': acc['ledger'], 'filter': acc['filter'],
                            'reads': acc['reads'], 'gc': acc['gc'],
                            'alive': alive,
                            'changes': changes})
            state['acc'] = None

    def collecting(phase: str, info: dict) -> None:
        """Time the interpreter's collections during a request."""
        if phase == 'start':
            state['gc_started'] = time.perf_counter()
        elif state['acc'] is not None and state.get('gc_started'):
            state['acc']['gc'] += time.perf_counter() - state['gc_started']

    def timer(key: str, call: Callable) -> Callable:
        @functools.wraps(call)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            acc = state['acc']
            depth = getattr(local, key, 0)
            setattr(local, key, depth + 1)
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                setattr(local, key, depth)
                if acc is not None and depth == 0:
                    acc[key] += time.perf_counter() - started
                    if key == 'ledger':
                        acc['reads'] += 1
        wrapper.bench_wrapped = True  # type: ignore[attr-defined]
        return wrapper

    def wrap_ledger() -> None:
        """Time every method of the filter's ledger whose first parameter
        is ``context`` (again if the filter made a new ledger).
        """
        ledger = state['filter'].ledger
        if ledger is state['ledger']:
            return
        names = []
        for name in dir(ledger):
            method = getattr(ledger, name, None)
            if not inspect.ismethod(method) or \
                    getattr(method, 'bench_wrapped', False):
                continue
            try:
                params = list(inspect.signature(method).parameters)
            except (TypeError, ValueError):
                continue
            if params and params[0] == 'context':
                setattr(ledger, name, timer('ledger', method))
                names.append(name)
        if not names:
            raise RuntimeError('RDTCacheFilter.ledger (%r) has no method '
                               'taking a context' % ledger)
        state['ledger'] = ledger
        out['ledger_methods'] = sorted(names)

    class Bench(base.RDTTestCase):
        ACCOUNTING = 'filter' if filtered else 'placement'

        def setUp(self) -> None:
            # every compute's heartbeat (a service record write every 10 s)
            # runs in this process: every 10 minutes instead (the services
            # stay up: ComputeFilter's service_down_time, read when the
            # scheduler starts, matches)
            self.flags(report_interval=600, service_down_time=3600)
            super().setUp()
            self.flags(allow_resize_to_same_host=False)   # moves move
            self.flags(max_limit=1000000, group='api')    # one listing

        def kind_flavor(self, kind: str, vcpus: int = 1) -> str:
            if not filtered:
                return self.flavor(vcpus=vcpus)
            ways, pool = {'w1': (1, None), 'pool': (None, 'hp'),
                          'none': (None, None)}[kind]
            return self.flavor(ways, pool=pool, path='filter', vcpus=vcpus)

        def servers(self) -> list[dict]:
            return self.admin_api.get_servers()

        def test_boots(self) -> None:
            self.stub_out('nova.scheduler.manager.SchedulerManager.'
                          'select_destinations', timed)
            gc.callbacks.append(collecting)
            self.addCleanup(gc.callbacks.remove, collecting)
            state['cell'] = [c for c in objects.CellMappingList.get_all(
                self.ctxt) if not c.is_cell0()][0]
            manager = self.scheduler_manager.host_manager
            if filtered:
                found = [f for f in manager.enabled_filters
                         if type(f).__name__ == 'RDTCacheFilter']
                self.assertEqual(1, len(found), manager.enabled_filters)
                flt = state['filter'] = found[0]
                flt.filter_all = timer('filter', flt.filter_all)
                wrap_ledger()
            names = ['h%03d' % i for i in range(hosts)]
            started = time.perf_counter()
            self.start_hosts(nodes.GOLD_POOL, names)
            out['start'] = time.perf_counter() - started
            self.fill(names, manager)
            self.measure()
            if filtered:
                state['phase'] = 'check'
                self.check(names)

        def fill(self, names: list[str], manager: Any) -> None:
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
            on: dict[str, int] = {}
            for server in servers:
                host = server['OS-EXT-SRV-ATTR:host']
                on[host] = on.get(host, 0) + 1
            view = {host: len(manager._instance_info.get(host, {}).get(
                'instances', ())) for host in names}
            want = {host: per_host for host in names}
            self.assertEqual(want, {h: on.get(h, 0) for h in names})
            self.assertEqual(want, view, 'the HostManager view')
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
            flavor = self.kind_flavor('w1')
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
                self.alive.append((server, 'w1'))
            state['phase'] = 'done'

        def check(self, names: list[str]) -> None:
            """Each host's free ways are what the filter finds, and a boot
            asking one more than the freest host has is refused.
            """
            used = {host: 0 for host in names}
            for server in self.servers():
                self.assertEqual('ACTIVE', server['status'])
                ways = server['flavor']['extra_specs'].get('rdt:l3_ways')
                if ways:
                    used[server['OS-EXT-SRV-ATTR:host']] += int(ways)
            for host in names:
                self.assert_free(host, VM_WAYS - used[host], 'end')
            most = VM_WAYS - min(used.values())
            if most < VM_WAYS:
                self.refused(self.flavor(most + 1, path='filter'))
            out['check'] = {'hosts': len(names), 'refused': most + 1,
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
                         % ('filtered' if filtered else 'baseline'))
    return out


# -- report --------------------------------------------------------------------
def p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * (len(values) - 1))]


def ms(value: float) -> str:
    return '%.1f' % (1000 * value)


def describe(label: str, figures: dict[str, Any]) -> str:
    sched = [r['sched'] for r in figures['records'] if r['phase'] == 'boot']
    moves = [r['sched'] for r in figures['records'] if r['phase'] == 'move']
    line = ('%-24s per boot: mean %s ms, median %s, p95 %s (%d boots)'
            % (label, ms(statistics.mean(sched)), ms(statistics.median(sched)),
               ms(p95(sched)), len(sched)))
    if moves:
        line += '; per move: mean %s ms (%d)' % (
            ms(statistics.mean(moves)), len(moves))
    return line


def buckets(records: list[dict], key: str, edges: list[int]) -> str:
    """Mean ledger time per request, by ``key`` ranges ([lo, hi))."""
    parts = []
    for lo, hi in zip(edges, edges[1:] + [math.inf]):
        got = [r['ledger'] for r in records if lo <= r[key] < hi]
        if got:
            label = '%d+' % lo if hi == math.inf else \
                '%d' % lo if hi == lo + 1 else '%d-%d' % (lo, hi - 1)
            parts.append('%s: %s ms (%d)' % (label, ms(statistics.mean(got)),
                                             len(got)))
    return ', '.join(parts)


def report(args: argparse.Namespace, baseline: dict, filtered: dict) -> None:
    kinds = ', '.join('%d %s' % (n, {'w1': 'rdt:l3_ways=1',
                                     'pool': 'rdt:pool=hp',
                                     'none': 'no rdt:'}[k])
                      for k, n in mix(args.per_host) if n)
    churn = ('a delete and a move (+confirm) before every %s'
             % ('boot' if args.churn_every == 1 else
                '%dth' % args.churn_every)) if args.churn_every else \
        'no churn'
    print('%d hosts x %d instances (%s; made in %.0f s / %.0f s), then %d '
          'boots of rdt:l3_ways=1, %s; both deployments at once:'
          % (args.hosts, args.per_host, kinds, baseline['fill'],
             filtered['fill'], args.boots, churn))
    print(describe('without RDTCacheFilter:', baseline))
    print(describe('with RDTCacheFilter:', filtered))
    sched = {side: [r['sched'] for r in figures['records']
                    if r['phase'] == 'boot']
             for side, figures in (('b', baseline), ('f', filtered))}
    ratio = statistics.mean(sched['f']) / statistics.mean(sched['b'])
    median = statistics.median(sched['f']) / statistics.median(sched['b'])
    print('ratio (mean): %.3fx, (median): %.3fx; target <= %.1fx: %s'
          % (ratio, median, TARGET, 'met' if ratio <= TARGET else 'NOT met'))
    boot = [r for r in filtered['records'] if r['phase'] == 'boot']
    ledger = [r['ledger'] for r in boot]
    filt = [r['filter'] for r in boot]
    alive = [r['alive'] for r in boot]
    print('per boot with the filter: filter_all mean %s ms, p95 %s (%.0f%% '
          'of scheduling); ledger reads (%s) mean %s ms, p95 %s, at %d-%d '
          'instances in the cloud'
          % (ms(statistics.mean(filt)), ms(p95(filt)),
             100 * sum(filt) / sum(sched['f']),
             ', '.join(filtered['ledger_methods']),
             ms(statistics.mean(ledger)), ms(p95(ledger)), min(alive),
             max(alive)))
    print('  ledger reads per request by rows changed since the previous: '
          + buckets([r for r in filtered['records']
                     if r['phase'] in ('boot', 'move')],
                    'changes', [0, 1, 2, 4, 8, 16]))
    fill = [r for r in filtered['records'] if r['phase'] == 'fill']
    if fill:
        top = args.hosts * args.per_host
        step = max(1, -(-top // 4))
        print('  ledger reads per request while filling (requests for one '
              'host, of %s instances), by instances in the cloud: %s'
              % ('/'.join(str(n) for _, n in mix(args.per_host) if n),
                 buckets(fill, 'alive', list(range(0, top, step)))))
    check = filtered.get('check')
    if check:
        print('checked: after the fill the HostManager and nova-api had %d '
              'on each host; at the end the filter finds each host\'s free '
              'ways exactly (%d hosts, %d full), a boot asking %d ways is '
              'refused (No valid host)'
              % (args.per_host, check['hosts'], check['full'],
                 check['refused']))
    gcs = ['%s' % ms(statistics.mean(r.get('gc', 0.0)
                                     for r in figures['records']
                                     if r['phase'] == 'boot'))
           for figures in (baseline, filtered)]
    print('each deployment (without / with): %d computes started in %.0f / '
          '%.0f s, whole run %.0f / %.0f s, peak RSS %d / %d MB; garbage '
          'collection per boot %s / %s ms'
          % (args.hosts, baseline['start'], filtered['start'],
             baseline['wall'], filtered['wall'], baseline['rss'],
             filtered['rss'], gcs[0], gcs[1]))


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
    parser.add_argument('--run', choices=('baseline', 'filtered'),
                        help=argparse.SUPPRESS)   # one side, as a child
    parser.add_argument('--json', help=argparse.SUPPRESS)  # raw figures
    args = parser.parse_args()
    try:
        import nova  # noqa: F401
    except ImportError:
        print('bench_nova_scheduler: skipped, nova is not installed here '
              '(run it with tox -e bench-nova)')
        return 0
    free = VM_WAYS - mix(args.per_host)[0][1]
    if args.per_host > 25 or free < 1:
        parser.error('--per-host: at most 25 (the computes\' vCPUs)')
    if args.boots > free * args.hosts * 4 // 5:
        parser.error('--boots: at most %d (4/5 of the %d free ways per host)'
                     % (free * args.hosts * 4 // 5, free))
    if args.run:
        from tests.nova_functional import nodes
        with tempfile.TemporaryDirectory(prefix='bench-nova-') as tmp:
            nodes.prepare(tmp)
        figures = run(args.run == 'filtered', args.hosts, args.boots,
                      args.per_host, args.churn_every, args.seed)
        sys.stdout.write(json.dumps(figures) + '\n')
        return 0
    logs = {side: tempfile.TemporaryFile('w+')
            for side in ('baseline', 'filtered')}
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
    report(args, results['baseline'], results['filtered'])
    return 0


if __name__ == '__main__':
    sys.exit(main())
