"""RDTCacheFilter inside Nova: loaded by class path, Nova's own objects."""
from __future__ import annotations

import itertools
import logging
from typing import Any
from unittest import mock

import pytest

from nova import context as nova_context
from nova import objects
from nova.scheduler import filters
from nova.tests.unit.scheduler import fakes

HANDLER = filters.HostFilterHandler()
PATH = 'nova_plugin.filters.RDTCacheFilter'
NUMA_FILTER = 'nova.scheduler.filters.numa_topology_filter.NUMATopologyFilter'
CAP = {'rdt_l3_ways': '11', 'rdt_system_ways': '2', 'rdt_closids': '16',
       'rdt_reserved_closids': '1'}
_ids = itertools.count(1)

#: How a refused aggregate value is logged (nova_plugin.aggregates).
PREFIX = ('Bad aggregate metadata, the host fails RDT requests until it '
          'is fixed: ')


def uuid() -> str:
    return '00000000-0000-4000-8000-%012d' % next(_ids)


def load(*paths: str) -> list:
    return [cls() for cls in HANDLER.get_matching_classes(list(paths))]


def flavor(**extra: str) -> objects.Flavor:
    name = ','.join('%s=%s' % kv for kv in sorted(extra.items())) or 'plain'
    return objects.Flavor(name=name, flavorid=name, memory_mb=64, vcpus=1,
                          root_gb=0, ephemeral_gb=0, swap=0,
                          extra_specs=dict(extra))


def numa(*cells: int) -> objects.InstanceNUMATopology:
    return objects.InstanceNUMATopology(cells=[
        objects.InstanceNUMACell(id=c, cpuset={i}, pcpuset=set(), memory=64)
        for i, c in enumerate(cells)])


def instance(cells: tuple[int, ...] = (), **extra: str) -> objects.Instance:
    return objects.Instance(uuid=uuid(), flavor=flavor(**extra),
                            numa_topology=numa(*cells) if cells else None)


def request(cells: int = 0, num: int = 1, **extra: str) -> objects.RequestSpec:
    return objects.RequestSpec(
        flavor=flavor(**extra), num_instances=num, instance_uuid=uuid(),
        numa_topology=numa(*range(cells)) if cells else None,
        pci_requests=None, requested_resources=[], scheduler_hints={},
        image=objects.ImageMeta(properties=objects.ImageMetaProps()))


def host(name: str = 'h1', instances: tuple = (), meta: dict | None = CAP,
         with_numa: bool = True) -> fakes.FakeHostState:
    aggs = [objects.Aggregate(id=1, name='rdt', metadata=dict(meta))] \
        if meta else []
    attrs = {'aggregates': aggs, 'free_ram_mb': 8192, 'free_disk_mb': 10 ** 6,
             'limits': {}, 'allocation_candidates': [{'mappings': {}}],
             'cpu_allocation_ratio': 16.0, 'ram_allocation_ratio': 1.0,
             'numa_topology': fakes.NUMA_TOPOLOGY.obj_clone()
             if with_numa else None}
    return fakes.FakeHostState(name, 'node-' + name, attrs,
                               instances=list(instances))


def passes(hosts: Any, spec: objects.RequestSpec, index: int = 0) -> list:
    """Host names that pass, the way Nova's scheduler runs the filter."""
    hosts = hosts if isinstance(hosts, list) else [hosts]
    return [h.host for h in HANDLER.get_filtered_objects(
        load(PATH), hosts, spec, index)]


def schedule(flt: list, hosts: list, spec: objects.RequestSpec,
             server_group: bool = False) -> list[str]:
    """SchedulerManager._schedule's loop: filter, pick the first, consume."""
    placed = []
    for index in range(spec.num_instances):
        spec.instance_uuid = uuid()
        hosts = HANDLER.get_filtered_objects(flt, hosts, spec, index)
        if not hosts:
            break
        chosen = hosts[0]
        chosen.consume_from_request(spec)
        if server_group:  # _consume_selected_host adds a bare stub
            chosen.instances[spec.instance_uuid] = objects.Instance(
                uuid=spec.instance_uuid)
        placed.append(chosen.host)
    return placed


# -- loading ---------------------------------------------------------------
def test_loaded_by_class_path_as_a_host_filter() -> None:
    classes = HANDLER.get_matching_classes([PATH])
    assert [c.__name__ for c in classes] == ['RDTCacheFilter']
    assert issubclass(classes[0], filters.BaseHostFilter)
    assert classes[0].RUN_ON_REBUILD is False


def test_requests_without_rdt_specs_always_pass() -> None:
    bare = host(meta=None, with_numa=False)
    assert passes(bare, request()) == ['h1']
    assert passes(bare, request(**{'hw:cpu_policy': 'dedicated'})) == ['h1']


def test_rebuild_is_not_filtered() -> None:
    spec = request(**{'rdt:l3_ways': '3'})
    spec.scheduler_hints = {'_nova_check_type': ['rebuild']}
    assert passes(host(meta=None), spec) == ['h1']


# -- capacity ------------------------------------------------------------------
def test_exact_capacity(debug_log: pytest.LogCaptureFixture) -> None:
    full = host(instances=[instance(**{'rdt:l3_ways': '3'}),
                           instance(**{'rdt:l3_ways': '3'}),
                           instance(), instance(**{'rdt:pool': 'noisy'})])
    assert passes(full, request(**{'rdt:l3_ways': '3'})) == ['h1']
    assert passes(full, request(**{'rdt:l3_ways': '4'})) == []
    assert debug_log.messages == [
        '(h1, node-h1) ram: 8192MB disk: 1000000MB io_ops: 0 instances: 0, '
        'allocation_candidates: 1 fails RDT cache requirements: 4 L3 way(s) '
        'requested on cache domain 0, 3 free (11 ways, 2 system, 6 used by '
        'instances)']


def test_closids_exhausted(debug_log: pytest.LogCaptureFixture) -> None:
    meta = dict(CAP, rdt_closids='4')
    vms = [instance(**{'rdt:l3_ways': '1'}) for _ in range(3)]
    assert passes(host(instances=vms[:2], meta=meta),
                  request(**{'rdt:l3_ways': '1'})) == ['h1']
    assert passes(host(instances=vms, meta=meta),
                  request(**{'rdt:l3_ways': '1'})) == []
    assert any('no free CLOSID (4, 1 reserved, 3 dedicated' in m
               for m in debug_log.messages)


def test_pinned_instances_hold_ways_on_their_cells_only() -> None:
    # a pinned instance holds 9 ways on domain 0 (host NUMA node 0) only
    busy = host(instances=[instance(cells=(0,), **{'rdt:l3_ways': '9'})])
    busy.numa_topology.cells[0].memory_usage = 256  # as Nova reports it
    # unpinned: needs ways on every domain
    assert passes(busy, request(**{'rdt:l3_ways': '1'})) == []
    # pinned, one cell: the NUMA fit picks node 1, which has 9 free ways
    assert passes(busy, request(cells=1, **{'rdt:l3_ways': '9'})) == ['h1']
    assert passes(busy, request(cells=1, **{'rdt:l3_ways': '10'})) == []
    # two cells: one of them is node 0
    assert passes(busy, request(cells=2, **{'rdt:l3_ways': '1'})) == []
    # an instance spanning both nodes holds ways on both
    both = host(instances=[instance(cells=(0, 1), **{'rdt:l3_ways': '5'})])
    assert passes(both, request(**{'rdt:l3_ways': '4'})) == ['h1']
    assert passes(both, request(**{'rdt:l3_ways': '5'})) == []


def test_pinned_request_checked_on_the_cells_nova_will_pick() -> None:
    busy = host(instances=[instance(cells=(0,), **{'rdt:l3_ways': '9'})])
    # Nova's NUMA fit would pick node 0 (nothing tells it otherwise): the
    # ways there are taken, so the host fails although node 1 is free
    assert passes(busy, request(cells=1, **{'rdt:l3_ways': '1'})) == []


def test_more_cells_than_domains_fails() -> None:
    flat = host(with_numa=False)
    assert passes(flat, request(cells=2, **{'rdt:l3_ways': '1'})) == []
    assert passes(flat, request(**{'rdt:l3_ways': '9'})) == ['h1']


# -- multi-create ----------------------------------------------------------------
def test_multi_create_cannot_overcommit_a_host() -> None:
    spec = request(num=5, **{'rdt:l3_ways': '3'})
    hosts = [host('a'), host('b', [instance(**{'rdt:l3_ways': '6'})])]
    # a: 9 free ways -> 3 instances; b: 3 free ways -> 1 instance
    assert schedule(load(PATH), hosts, spec) == ['a', 'a', 'a', 'b']


def test_multi_create_with_server_group_stubs_counts_once() -> None:
    spec = request(num=4, **{'rdt:l3_ways': '3'})
    assert schedule(load(PATH), [host('a')], spec, server_group=True) == \
        ['a', 'a', 'a']


def test_multi_create_pinned_follows_the_numa_fit() -> None:
    # one-cell instances with 5 ways: Nova spreads them over the two nodes
    # (9 free ways each), the third one fits nowhere
    flt = load(NUMA_FILTER, PATH)
    spec = request(cells=1, num=3, **{'rdt:l3_ways': '5'})
    assert schedule(flt, [host('a')], spec) == ['a', 'a']


def test_multi_create_closids() -> None:
    meta = dict(CAP, rdt_closids='3')  # root + 2
    spec = request(num=3, **{'rdt:l3_ways': '1'})
    assert schedule(load(PATH), [host('a', meta=meta)], spec) == ['a', 'a']


def test_a_new_pass_starts_at_index_0() -> None:
    flt = load(PATH)
    spec = request(num=1, **{'rdt:l3_ways': '9'})
    target = host('a')
    assert schedule(flt, [target], spec) == ['a']
    # the same RequestSpec scheduled again (e.g. a retry) on a refreshed
    # host: nothing is left over from the previous pass
    target.num_instances = 0
    assert schedule(flt, [target], spec) == ['a']


def test_a_pass_ends_with_its_request_spec() -> None:
    import gc

    flt = load(PATH)
    spec = request(num=3, **{'rdt:l3_ways': '3'})
    assert schedule(flt, [host('a'), host('b')], spec) == ['a', 'a', 'a']
    assert len(flt[0]._passes) == 1
    del spec
    gc.collect()
    assert len(flt[0]._passes) == 0


def test_moved_instance_does_not_count_against_itself() -> None:
    mine = instance(**{'rdt:l3_ways': '9'})
    spec = request(**{'rdt:l3_ways': '9'})
    spec.instance_uuid = mine.uuid   # a resize on the same host
    assert passes(host(instances=[mine]), spec) == ['h1']


# -- pools ---------------------------------------------------------------------
def test_pool_request_needs_a_closid_only_when_the_pool_is_new() -> None:
    meta = dict(CAP, rdt_closids='3')
    members = [instance(**{'rdt:l3_ways': '1'}),
               instance(**{'rdt:pool': 'noisy'})]
    # root + VM + pool noisy: 3 of 3 CLOSIDs
    assert passes(host(instances=members, meta=meta),
                  request(**{'rdt:pool': 'noisy'})) == ['h1']
    assert passes(host(instances=members, meta=meta),
                  request(**{'rdt:pool': 'hp'})) == []
    # a pool the hosts create up front: its CLOSID is a reserved one
    meta_hp = dict(meta, rdt_pools='hp, other')
    assert passes(host(instances=members, meta=meta_hp),
                  request(**{'rdt:pool': 'hp'})) == ['h1']


def test_pool_not_configured_on_the_host_fails(
        debug_log: pytest.LogCaptureFixture) -> None:
    # the hook refuses a pool the node is not configured with
    meta = dict(CAP, rdt_pools='hp')
    assert passes(host(meta=meta), request(**{'rdt:pool': 'hp'})) == ['h1']
    assert passes(host(meta=meta), request(**{'rdt:pool': 'noisy'})) == []
    assert debug_log.messages[-1].endswith(
        'fails RDT cache requirements: pool noisy is not configured on this '
        'host (rdt_pools: hp)')
    # several aggregates: the pools all of them list
    target = host(meta=meta)
    target.aggregates.append(objects.Aggregate(
        id=2, name='other', metadata={'rdt_pools': 'noisy'}))
    assert passes(target, request(**{'rdt:pool': 'hp'})) == []


def test_pool_requests_hold_no_ways() -> None:
    full = host(instances=[instance(**{'rdt:l3_ways': '9'})])
    assert passes(full, request(**{'rdt:pool': 'noisy'})) == ['h1']


def test_multi_create_pool_takes_one_closid() -> None:
    meta = dict(CAP, rdt_closids='2')  # root + 1
    spec = request(num=4, **{'rdt:pool': 'noisy'})
    assert schedule(load(PATH), [host('a', meta=meta)], spec) == ['a'] * 4
    other = request(num=1, **{'rdt:pool': 'other'})
    full = host('b', meta=meta, instances=[instance(**{'rdt:pool': 'noisy'})])
    assert schedule(load(PATH), [full], other) == []


# -- capacity information ----------------------------------------------------------
def test_missing_capacity_information(
        debug_log: pytest.LogCaptureFixture) -> None:
    bare = host(meta=None)
    assert passes(bare, request(**{'rdt:l3_ways': '1'})) == []
    assert passes(bare, request(**{'rdt:pool': 'noisy'})) == []
    assert any('fails RDT cache requirements: no cache capacity known' in m
               for m in debug_log.messages)
    # half of it is not enough
    assert passes(host(meta={'rdt_l3_ways': '11'}),
                  request(**{'rdt:l3_ways': '1'})) == []


def test_nova_conf_fallback_key_by_key(rdt_conf: Any) -> None:
    rdt_conf(rdt_l3_ways=11, rdt_closids=16, rdt_system_ways=2)
    assert passes(host(meta=None), request(**{'rdt:l3_ways': '9'})) == ['h1']
    assert passes(host(meta=None), request(**{'rdt:l3_ways': '10'})) == []
    # the aggregate wins where it says something
    assert passes(host(meta={'rdt_system_ways': '0'}),
                  request(**{'rdt:l3_ways': '11'})) == ['h1']
    rdt_conf(rdt_pools=['hp'], rdt_closids=1)
    assert passes(host(meta=None), request(**{'rdt:pool': 'hp'})) == ['h1']


def test_a_size_is_counted_in_the_clouds_smallest_ways(
        rdt_conf: Any, debug_log: pytest.LogCaptureFixture) -> None:
    """rdt:l3_kib, by [ovs_rdt] rdt_l3_way_kib (the smallest way, here a
    Xeon Gold 6230's 2560 KiB): 7680 KiB hold 3 ways, 7681 KiB 4.
    """
    sized = instance(**{'rdt:l3_kib': '7680'})         # 3 of the 9 free
    assert passes(host(instances=(sized,)),
                  request(**{'rdt:l3_kib': '15360'})) == []
    assert debug_log.messages[-1].endswith(
        'fails RDT cache requirements: flavor rdt:l3_kib=15360: rdt:l3_kib '
        'cannot be counted: [ovs_rdt] rdt_l3_way_kib (the KiB of the '
        'smallest L3 way of the cloud) is not set')
    rdt_conf(rdt_l3_way_kib=2560)
    sized = instance(**{'rdt:l3_kib': '7680'})
    assert passes(host(instances=(sized,)),
                  request(**{'rdt:l3_kib': '15360'})) == ['h1']     # 6
    assert passes(host(instances=(sized,)),
                  request(**{'rdt:l3_kib': '15361'})) == []         # 7
    assert passes(host(instances=(sized,)),
                  request(**{'rdt:l3_ways': '6'})) == ['h1']


def test_several_aggregates_take_the_tightest_values() -> None:
    target = host()
    target.aggregates.append(objects.Aggregate(
        id=2, name='small', metadata={'rdt_l3_ways': '8',
                                      'rdt_system_ways': '3'}))
    assert passes(target, request(**{'rdt:l3_ways': '5'})) == ['h1']
    assert passes(target, request(**{'rdt:l3_ways': '6'})) == []


def test_bad_aggregate_value_fails_the_host_with_a_warning(
        caplog: pytest.LogCaptureFixture, rdt_conf: Any) -> None:
    """A refused value leaves the host's capacity unknown: taking another
    aggregate's value or nova.conf's instead could promise ways the
    operator meant to keep (a reservation of 8 written as '-5' fell back
    to the other aggregate's or the option's).
    """
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    rdt_conf(rdt_l3_ways=11)
    meta = dict(CAP, rdt_l3_ways='eleven')
    assert passes(host(meta=meta), request(**{'rdt:l3_ways': '1'})) == []
    assert "%srdt_l3_ways: 'eleven' is not a whole number" % PREFIX \
        in caplog.messages
    target = host(meta=dict(CAP, rdt_system_ways='-5'))
    target.aggregates.append(objects.Aggregate(
        id=2, name='b', metadata={'rdt_system_ways': '2'}))
    assert passes(target, request(**{'rdt:l3_ways': '1'})) == []
    assert "%srdt_system_ways: '-5' is not a whole number" % PREFIX \
        in caplog.messages
    # requests without rdt: specs still pass
    assert passes(target, request()) == ['h1']


def test_zero_ways_in_an_aggregate_is_refused_as_in_nova_conf(
        caplog: pytest.LogCaptureFixture, rdt_conf: Any) -> None:
    """``rdt_l3_ways=0`` metadata is refused as the option refuses it (a
    cache domain has at least one way), with the option's message, and
    the host fails RDT requests, nova.conf's value notwithstanding.  It
    was taken as a host of 0 ways, which still passed pool requests it
    has no CAT for.
    """
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    meta = dict(CAP, rdt_l3_ways='0')
    assert passes(host(meta=meta), request(**{'rdt:pool': 'hp'})) == []
    assert "%srdt_l3_ways: '0' must be from 1 to 64" % PREFIX \
        in caplog.messages
    rdt_conf(rdt_l3_ways=11)
    assert passes(host(meta=meta), request(**{'rdt:l3_ways': '1'})) == []


# -- malformed specs ----------------------------------------------------------------
def test_malformed_specs_on_existing_instances_are_ignored(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    bad = [instance(**{'rdt:l3_ways': 'many'}),
           instance(**{'rdt:l3_ways': '3', 'rdt:pool': 'p'}),
           instance(**{'rdt:l3_way': '3'}),          # a typo: ignored
           objects.Instance(uuid=uuid())]           # a bare stub
    target = host(instances=bad)
    assert passes(target, request(**{'rdt:l3_ways': '9'})) == ['h1']
    warnings = [m for m in caplog.messages if 'counted as holding no' in m]
    assert len(warnings) == 2
    assert "'rdt:l3_ways='many'" not in warnings[0]
    assert 'not a whole number' in warnings[0]
    assert 'exclude each other' in warnings[1]
    # parsed once: no new warnings on the next request
    assert passes(target, request(**{'rdt:l3_ways': '9'})) == ['h1']
    assert len([m for m in caplog.messages if 'counted as' in m]) == 2


def test_malformed_request_fails_every_host(
        debug_log: pytest.LogCaptureFixture) -> None:
    assert passes(host(), request(**{'rdt:l3_ways': 'x'})) == []
    assert passes(host(), request(**{'rdt:l3_way': '1'})) == []
    assert any('fails RDT cache requirements: flavor rdt:l3_ways=x: '
               "rdt:l3_ways: 'x' is not a whole number" in m
               for m in debug_log.messages)


def test_host_passes_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    flt = load(PATH)[0]
    broken = host()
    broken.instances = None  # not a dict
    assert flt.host_passes(broken, request(**{'rdt:l3_ways': '1'})) is False
    assert any('unexpected error' in m for m in caplog.messages)
    assert flt.host_passes(broken, request()) is True
    assert flt.host_passes(host(), object()) is False


def test_a_failed_placement_look_up_fails_hosts_asked_one_at_a_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """host_passes() host by host, hosts in two cells: a failed look-up of
    the instances other requests are scheduling fails every host asked.
    """
    from nova_plugin import adapter
    flt = load(PATH)[0]
    cells = {'h1': 'cell1', 'h2': 'cell2'}
    monkeypatch.setattr(adapter, 'request_context', lambda spec: object())
    monkeypatch.setattr(adapter, 'host_cell', lambda hs: cells[hs.host])
    monkeypatch.setattr(adapter, 'host_provider', lambda hs: hs.host)
    monkeypatch.setattr(flt.ledger, 'refresh', lambda *args: None)

    def unreachable(*args: Any) -> None:
        raise RuntimeError('placement unreachable')
    monkeypatch.setattr(flt.ledger, 'look_up', unreachable)
    spec = request(**{'rdt:l3_ways': '1'})
    assert flt.host_passes(host('h1'), spec) is False
    assert flt.host_passes(host('h2'), spec) is False


# -- instances Nova gives as bare stubs ---------------------------------------------
def test_bare_stubs_are_loaded_in_one_query_once() -> None:
    ctx = nova_context.get_admin_context()
    # domain 0: 4 ways used, domain 1: 4 + 1
    full = [instance(**{'rdt:l3_ways': '4'}), instance(cells=(1,),
                                                       **{'rdt:l3_ways': '1'})]
    for inst in full:
        inst.update({'host': 'h1', 'node': 'node-h1', 'deleted': False,
                     'vm_state': 'active', 'task_state': None,
                     'old_flavor': None, 'new_flavor': None,
                     'migration_context': None, 'created_at': None,
                     'updated_at': None})

    def stubs() -> list:
        return [objects.Instance(ctx, uuid=i.uuid) for i in full]

    found = objects.InstanceList(objects=full)
    with mock.patch.object(objects.InstanceList, 'get_by_filters',
                           return_value=found) as get:
        flt = load(PATH)
        spec = request(**{'rdt:l3_ways': '5'})
        assert [h.host for h in HANDLER.get_filtered_objects(
            flt, [host(instances=stubs())], spec)] == []
        get.assert_called_once_with(
            ctx, {'uuid': mock.ANY},
            expected_attrs=['flavor', 'numa_topology', 'migration_context'])
        assert sorted(get.call_args[0][1]['uuid']) == \
            sorted(i.uuid for i in full)
        # new stubs (the host was refreshed): the ledger has them
        spec = request(**{'rdt:l3_ways': '4'})
        assert [h.host for h in HANDLER.get_filtered_objects(
            flt, [host(instances=stubs())], spec)] == ['h1']
        assert get.call_count == 1


def test_instances_that_cannot_be_loaded_fail_the_host(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger='nova_plugin')
    ctx = nova_context.get_admin_context()
    stubs = [objects.Instance(ctx, uuid=uuid())]
    with mock.patch.object(objects.InstanceList, 'get_by_filters',
                           side_effect=RuntimeError('db gone')):
        flt = load(PATH)
        hosts = [host('a', instances=stubs), host('b', instances=stubs)]
        assert [h.host for h in HANDLER.get_filtered_objects(
            flt, hosts, request(**{'rdt:l3_ways': '1'}))] == []
    # not counted as holding nothing; one warning, not one per host
    assert len([r for r in caplog.records
                if r.levelno == logging.WARNING]) == 1
    assert sum('the flavors of its instances could not be loaded' in m
               for m in caplog.messages) == 2


def test_unexpected_errors_warn_once_per_request(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger='nova_plugin')
    broken = [host('a'), host('b'), host('c')]
    for target in broken:
        target.instances = None  # not a dict
    assert passes(broken, request(**{'rdt:l3_ways': '1'})) == []
    levels = [r.levelno for r in caplog.records
              if 'unexpected error' in r.getMessage()]
    assert levels == [logging.WARNING, logging.DEBUG, logging.DEBUG]


# -- doc/nova.md's worked example -----------------------------------------------------
DOC_META = {'rdt_l3_ways': '11', 'rdt_system_ways': '6', 'rdt_closids': '16',
            'rdt_reserved_closids': '3', 'rdt_pools': 'hp'}


def test_doc_example() -> None:
    flt = load(NUMA_FILTER, PATH)
    computes = [host('compute-1', meta=DOC_META),
                host('compute-2', meta=DOC_META)]
    cache3 = request(num=3, **{'rdt:l3_ways': '3', 'rdt:mb_percent': '60'})
    assert schedule(flt, computes, cache3) == ['compute-1', 'compute-2']

    empty = [host('compute-1', meta=DOC_META)]
    pinned3 = request(cells=1, num=3, **{'rdt:l3_ways': '3'})
    assert schedule(flt, empty, pinned3) == ['compute-1', 'compute-1']
    assert schedule(flt, empty, request(cells=1, **{'rdt:l3_ways': '2'})) \
        == ['compute-1']

    web = request(num=20, **{'rdt:pool': 'hp'})
    assert len(schedule(flt, [host('compute-2', meta=DOC_META)], web)) == 20
