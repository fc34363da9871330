"""RDTCacheFilter on hosts whose NUMA nodes are not their L3 cache domains.

Sub-NUMA Clustering (SNC3: three nodes share one L3 per socket) and AMD EPYC
(NPS1: one node spans 12 L3 domains, one per CCD), described to the filter
by ``rdt_numa_l3`` (aggregate metadata, or ``[ovs_rdt] rdt_numa_l3``), the
line ``ovs-rdt provider-config`` prints.  Real Nova objects and NUMA fit.
"""
from __future__ import annotations

from typing import Any

import pytest

from nova import objects
from nova.tests.unit.scheduler import fakes

from tests.nova.test_filter import (HANDLER, NUMA_FILTER, PATH, instance,
                                    load, passes, request, schedule)

SNC3 = '0:0;1:0;2:0;3:1;4:1;5:1'
EPYC = '0:0-11;1:12-23'
#: 16-way L3 (cbm ffff), 2 ways for the system: 14 per L3 domain for VMs
CAP16 = {'rdt_l3_ways': '16', 'rdt_system_ways': '2', 'rdt_closids': '16',
         'rdt_reserved_closids': '1'}


def numa_host(nodes: int) -> objects.NUMATopology:
    """A host NUMA topology with ``nodes`` cells of 4 shared CPUs each."""
    return objects.NUMATopology(cells=[
        objects.NUMACell(
            id=n, cpuset=set(range(4 * n, 4 * n + 4)), pcpuset=set(),
            memory=4096, cpu_usage=0, memory_usage=0, socket=n * 2 // nodes,
            pinned_cpus=set(), siblings=[{c} for c in range(4 * n, 4 * n + 4)],
            mempages=[objects.NUMAPagesTopology(size_kb=4, total=1048576,
                                                used=0)])
        for n in range(nodes)])


def host(name: str = 'h1', instances: tuple = (), nodes: int = 6,
         numa_l3: str | None = SNC3, meta: dict | None = None,
         extra_aggregates: tuple = ()) -> fakes.FakeHostState:
    meta = dict(CAP16 if meta is None else meta)
    if numa_l3 is not None:
        meta['rdt_numa_l3'] = numa_l3
    aggs = [objects.Aggregate(id=1, name='rdt', metadata=meta)]
    aggs += [objects.Aggregate(id=2 + i, name='more%d' % i, metadata=m)
             for i, m in enumerate(extra_aggregates)]
    attrs = {'aggregates': aggs, 'free_ram_mb': 8192, 'free_disk_mb': 10 ** 6,
             'limits': {}, 'allocation_candidates': [{'mappings': {}}],
             'cpu_allocation_ratio': 16.0, 'ram_allocation_ratio': 1.0,
             'numa_topology': numa_host(nodes)}
    return fakes.FakeHostState(name, 'node-' + name, attrs,
                               instances=list(instances))


def ways(n: int) -> dict[str, str]:
    return {'rdt:l3_ways': str(n)}


# -- Sub-NUMA Clustering (xeon-6-granite-rapids-snc3) --------------------------
def test_snc3_nodes_of_a_socket_share_its_l3(
        debug_log: pytest.LogCaptureFixture) -> None:
    vms = [instance(cells=(0,), **ways(7)), instance(cells=(1,), **ways(7))]
    # node id == L3 id would see 7 used on "domains" 0 and 1, 7 free each
    assert passes(host(instances=vms, numa_l3=None), request(**ways(7))) \
        == ['h1']
    # with the map: both are on L3 0, which is full
    assert passes(host(instances=vms), request(**ways(1))) == []
    assert debug_log.messages[-1].endswith(
        'fails RDT cache requirements: 1 L3 way(s) requested on cache '
        'domain 0, 0 free (16 ways, 2 system, 14 used by instances)')


def test_snc3_two_cells_on_one_socket_hold_ways_once() -> None:
    both = host(instances=[instance(cells=(0, 1), **ways(7))])
    assert passes(both, request(**ways(7))) == ['h1']      # 14 - 7 on L3 0
    assert passes(both, request(**ways(8))) == []
    # cells on both sockets: ways on both L3s
    spread = host(instances=[instance(cells=(2, 3), **ways(10))])
    assert passes(spread, request(**ways(4))) == ['h1']
    assert passes(spread, request(**ways(5))) == []


def test_snc3_pinned_request_on_the_l3_of_its_fitted_node() -> None:
    # L3 0 (nodes 0-2) full; the NUMA fit spreads the request to the least
    # used node, one of 3-5 (memory usage as Nova reports it), on L3 1
    busy = host(instances=[instance(cells=(0, 1, 2), **ways(14))])
    for cell in busy.numa_topology.cells[:3]:
        cell.memory_usage = 2048
    assert passes(busy, request(cells=1, **ways(14))) == ['h1']
    # nothing tells Nova's fit that node 0's L3 is full: it picks node 0
    same = host(instances=[instance(cells=(1,), **ways(14))])
    assert passes(same, request(cells=1, **ways(1))) == []


def test_snc3_multi_create_counts_each_socket_once() -> None:
    # one-cell instances with 7 ways: Nova's fit spreads them over nodes
    # 0, 1, 2, ...; two fill L3 0 (nodes 0-2), so the third fails the host
    # (node id == L3 id would have let 6 x 2 in)
    flt = load(NUMA_FILTER, PATH)
    spec = request(cells=1, num=6, **ways(7))
    assert schedule(flt, [host('a')], spec) == ['a', 'a']
    spec = request(cells=1, num=12, **ways(7))
    assert len(schedule(flt, [host('a', numa_l3=None)], spec)) == 12


def test_more_cells_than_nodes() -> None:
    # 6 SNC nodes, 2 L3 domains: a 3-cell request fits (node count counts)
    assert passes(host(), request(cells=3, **ways(1))) == ['h1']
    assert passes(host(nodes=2, numa_l3=EPYC), request(cells=3, **ways(1))) \
        == []


# -- AMD EPYC 9654 (NPS1: 12 CCDs per node) -----------------------------------
def test_epyc_cell_holds_ways_on_each_ccd_of_its_node(
        debug_log: pytest.LogCaptureFixture) -> None:
    busy = host(instances=[instance(cells=(0,), **ways(9))], nodes=2,
                numa_l3=EPYC)
    # an unpinned request needs ways on all 24 L3s: 5 free on 0-11
    assert passes(busy, request(**ways(5))) == ['h1']
    assert passes(busy, request(**ways(6))) == []
    assert 'cache domain 0, 5 free' in debug_log.messages[-1]
    # a one-cell request fitted to node 1 (less memory used): CCDs 12-23
    busy.numa_topology.cells[0].memory_usage = 2048
    assert passes(busy, request(cells=1, **ways(14))) == ['h1']


def test_epyc_unpinned_instances_hold_every_ccd() -> None:
    busy = host(instances=[instance(**ways(10))], nodes=2, numa_l3=EPYC)
    busy.numa_topology.cells[0].memory_usage = 2048
    assert passes(busy, request(cells=1, **ways(4))) == ['h1']
    assert passes(busy, request(cells=1, **ways(5))) == []


def test_epyc_multi_create() -> None:
    flt = load(NUMA_FILTER, PATH)
    spec = request(cells=1, num=6, **ways(7))
    # 14 ways per CCD: two per node, spread over the two nodes
    assert schedule(flt, [host('a', nodes=2, numa_l3=EPYC)], spec) == \
        ['a'] * 4


# -- where the map comes from --------------------------------------------------
def test_nova_conf_fallback(rdt_conf: Any) -> None:
    vms = [instance(cells=(0,), **ways(7)), instance(cells=(1,), **ways(7))]
    rdt_conf(rdt_numa_l3=SNC3)
    assert passes(host(instances=vms, numa_l3=None), request(**ways(1))) == []
    # aggregate metadata wins over nova.conf
    assert passes(host(instances=vms, numa_l3='0:0;1:1;2:2;3:3;4:4;5:5'),
                  request(**ways(7))) == ['h1']


def test_bad_map_in_an_aggregate_is_ignored_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    vms = [instance(cells=(0,), **ways(7)), instance(cells=(1,), **ways(7))]
    bad = host(instances=vms, numa_l3='0:0,1:0')
    assert passes(bad, request(**ways(7))) == ['h1']     # as without a map
    assert [r.getMessage() for r in caplog.records
            if r.levelname == 'WARNING'] == [
        "Ignoring aggregate metadata: rdt_numa_l3: '0:0,1:0' is not a NUMA "
        "node to L3 map (NODE:L3S;...): '0,1:0' is not a list of L3 ids"]


def test_several_aggregates_take_every_l3_any_of_them_lists() -> None:
    # one aggregate says node 1 is on L3 1, the other on L3 0: both count
    vm = instance(cells=(1,), **ways(7))
    two = host(instances=[vm], nodes=2, numa_l3='0:0;1:1',
               extra_aggregates=({'rdt_numa_l3': '0:0;1:0'},))
    assert passes(two, request(**ways(7))) == ['h1']
    assert passes(two, request(**ways(8))) == []
    one = host(instances=[vm], nodes=2, numa_l3='0:0;1:1')
    assert passes(one, request(cells=2, **ways(7))) == ['h1']
    assert passes(two, request(cells=2, **ways(8))) == []


def test_usage_cache_follows_a_changed_map() -> None:
    vms = [instance(cells=(0,), **ways(7)), instance(cells=(1,), **ways(7))]
    h = host(instances=vms, numa_l3=None)
    flt = load(PATH)
    spec = request(**ways(7))
    assert _names(flt, h, spec) == ['h1']
    h.aggregates[0].metadata['rdt_numa_l3'] = SNC3
    assert _names(flt, h, request(**ways(7))) == []


def _names(flt: list, h: Any, spec: Any) -> list:
    return [x.host for x in HANDLER.get_filtered_objects(flt, [h], spec, 0)]


def test_nova_conf_option_follows_the_one_rule(tmp_path: Any) -> None:
    import os

    from oslo_config import cfg

    from nova_plugin import opts

    for raw, ok in ((EPYC, True), ('0:0-11,1:12-23', False), ('x', False)):
        path = os.path.join(str(tmp_path), 'nova.conf')
        with open(path, 'w') as fh:
            fh.write('[ovs_rdt]\nrdt_numa_l3 = %s\n' % raw)
        conf = cfg.ConfigOpts()
        opts.register_opts(conf)
        conf(['--config-file', path])
        if ok:
            assert conf.ovs_rdt.rdt_numa_l3 == raw
            continue
        with pytest.raises(cfg.ConfigFileValueError) as err:
            conf.ovs_rdt.rdt_numa_l3
        assert "[ovs_rdt] rdt_numa_l3: '%s' is not a NUMA node to L3 map" \
            % raw in str(err.value)
