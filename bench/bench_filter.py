"""Time RDTCacheFilter next to Nova's AggregateInstanceExtraSpecsFilter.

Both filter the same 10,000 hosts (40 instances each, in two aggregates)
for the same request, in the same run, the way Nova's filter handler calls
them (``list(filter_all(hosts, spec))``).  Needs nova installed::

    /tmp/nova-venv/bin/python bench/bench_filter.py [--hosts N] [--repeat N]

"Steady" is what a running scheduler pays: Nova keeps the Instance objects
of a host until they change, and RDTCacheFilter keeps what it parsed from
them.  "First pass" parses every instance's flavor.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import warnings
from typing import Any, Callable

warnings.simplefilter('ignore')


def build(n_hosts: int, n_instances: int) -> tuple[list, Any]:
    from nova import objects
    from nova.tests.unit.scheduler import fakes
    from oslo_utils import uuidutils

    objects.register_all()

    def flavor(name: str, **extra: str) -> Any:
        return objects.Flavor(name=name, flavorid=name, memory_mb=2048,
                              vcpus=2, root_gb=20, ephemeral_gb=0, swap=0,
                              extra_specs=dict(extra))

    plain = flavor('m1.medium', **{'hw:mem_page_size': 'large'})
    dedicated = flavor('rdt.1', **{'rdt:l3_ways': '1'})
    pool = flavor('rdt.pool', **{'rdt:pool': 'noisy'})
    cells = [objects.InstanceNUMATopology(cells=[objects.InstanceNUMACell(
        id=c, cpuset={0, 1}, pcpuset=set(), memory=2048)]) for c in (0, 1)]
    zone = objects.Aggregate(id=1, name='az1',
                             metadata={'availability_zone': 'az1'})
    rdt = objects.Aggregate(id=2, name='rdt', metadata={
        'rdt': 'true', 'rdt_l3_ways': '11', 'rdt_system_ways': '2',
        'rdt_closids': '16', 'rdt_reserved_closids': '1'})
    hosts = []
    for i in range(n_hosts):
        k = i % 8   # unpinned instances with one way: 8 - k ways stay free
        insts = []
        for j in range(n_instances):
            if j < k:
                fl, numa = dedicated, None
            elif j < k + 2:
                fl, numa = dedicated, cells[j - k]
            elif j < k + 4:
                fl, numa = pool, None
            else:
                fl, numa = plain, None
            insts.append(objects.Instance(uuid=uuidutils.generate_uuid(),
                                          flavor=fl, numa_topology=numa))
        hosts.append(fakes.FakeHostState(
            'host%05d' % i, 'node%05d' % i,
            {'aggregates': [zone, rdt], 'numa_topology': fakes.NUMA_TOPOLOGY},
            instances=insts))
    spec = objects.RequestSpec(
        flavor=flavor('rdt.2', **{'rdt:l3_ways': '2',
                                  'aggregate_instance_extra_specs:rdt': 'true'}),
        num_instances=1, numa_topology=None, scheduler_hints={},
        instance_uuid=uuidutils.generate_uuid())
    return hosts, spec


def timed(run: Callable[[], list]) -> tuple[float, int]:
    """Seconds ``run`` takes and what it returns, garbage collector off.

    As timeit does: with 400,000 live objects a full collection, triggered
    by whichever filter allocates past the threshold, would dwarf either.
    """
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        passed = len(run())
        return time.perf_counter() - start, passed
    finally:
        gc.enable()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--hosts', type=int, default=10000)
    parser.add_argument('--instances', type=int, default=40)
    parser.add_argument('--repeat', type=int, default=11)
    args = parser.parse_args()
    try:
        from nova.scheduler import filters
    except ImportError:
        print('bench_filter: skipped, nova is not installed here (run it '
              'with the python of the tox "nova" env)')
        return 0

    start = time.perf_counter()
    hosts, spec = build(args.hosts, args.instances)
    built = time.perf_counter() - start
    handler = filters.HostFilterHandler()
    ours, nova = [cls() for cls in handler.get_matching_classes([
        'nova_plugin.filters.RDTCacheFilter',
        'nova.scheduler.filters.aggregate_instance_extra_specs.'
        'AggregateInstanceExtraSpecsFilter'])]

    def run(flt: Any) -> list:
        flt.run_filter_for_index(0)
        return list(flt.filter_all(hosts, spec))

    print('%d hosts x %d instances (built in %.1f s), one request: '
          'rdt:l3_ways=2, aggregate_instance_extra_specs:rdt=true'
          % (args.hosts, args.instances, built))
    first, _ = timed(lambda: run(ours))
    times: dict[str, list[float]] = {'nova': [], 'ours': []}
    passed = {}
    for _ in range(args.repeat):   # interleaved, same hosts, same run
        for key, flt in (('nova', nova), ('ours', ours)):
            took, passed[key] = timed(lambda: run(flt))
            times[key].append(took)
    rows = [('AggregateInstanceExtraSpecsFilter', 'nova'),
            ('RDTCacheFilter', 'ours')]
    for label, key in rows:
        print('%-34s steady: best %7.1f ms, median %7.1f ms  (%d hosts pass)'
              % (label, min(times[key]) * 1e3,
                 statistics.median(times[key]) * 1e3, passed[key]))
    print('%-34s first pass: %7.1f ms (parses %d instances\' flavors)'
          % ('RDTCacheFilter', first * 1e3, args.hosts * args.instances))
    best = min(times['ours']) / min(times['nova'])
    median = statistics.median(times['ours']) / statistics.median(times['nova'])
    print('ratio RDTCacheFilter / AggregateInstanceExtraSpecsFilter, steady: '
          'best %.2f, median %.2f (%s)'
          % (best, median, 'no slower' if max(best, median) <= 1.0
             else 'SLOWER'))
    return 0


if __name__ == '__main__':
    sys.exit(main())
