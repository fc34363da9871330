"""Each Nova internal nova_plugin.adapter relies on, checked inside Nova.

One test per adapter function, named after it (``test_<function>``): when
a Nova upgrade changes one of the behaviours the RDTCacheFilter depends
on, the test of the function that wraps it fails by name.  Real Nova
objects throughout (``HostState``, not the test suite's FakeHostState;
``HostManager`` and ``SchedulerManager`` code paths; an SQLite database
for the instance query).
"""
from __future__ import annotations

import contextlib
import gc
import inspect
import weakref
from typing import Any, Iterator
from unittest import mock

import pytest

from nova import context as nova_context
from nova import objects
from nova.objects import base as obj_base
from nova.scheduler import filters
from nova.scheduler import host_manager
from nova.scheduler import manager
from nova.tests.unit.scheduler import fakes
from nova.virt import hardware

from nova_plugin import adapter

UUIDS = ['00000000-0000-4000-9000-%012d' % i for i in range(1, 20)]
CELL = '00000000-0000-4000-a000-000000000001'


def flavor(id: int | None = None, **extra: str) -> objects.Flavor:
    made = objects.Flavor(name='f', flavorid='f', memory_mb=64, vcpus=1,
                          root_gb=0, ephemeral_gb=0, swap=0,
                          extra_specs=dict(extra))
    if id is not None:
        made.id = id
    return made


def cells(*ids: int, memory: int = 64) -> objects.InstanceNUMATopology:
    return objects.InstanceNUMATopology(cells=[
        objects.InstanceNUMACell(id=c, cpuset={i}, pcpuset=set(),
                                 memory=memory)
        for i, c in enumerate(ids)])


def spec(numa: objects.InstanceNUMATopology | None = None,
         **extra: str) -> objects.RequestSpec:
    return objects.RequestSpec(
        flavor=flavor(**extra), num_instances=1, instance_uuid=UUIDS[0],
        numa_topology=numa, pci_requests=None, requested_resources=[],
        scheduler_hints={}, instance_group=None,
        image=objects.ImageMeta(properties=objects.ImageMetaProps()))


def host_state(busy_node0: bool = False) -> host_manager.HostState:
    """A real HostState with fakes' two-node NUMA topology."""
    state = host_manager.HostState('h1', 'n1', CELL)
    state.numa_topology = fakes.NUMA_TOPOLOGY.obj_clone()
    if busy_node0:
        cell = state.numa_topology.cells[0]
        cell.memory_usage = cell.memory
    return state


@contextlib.contextmanager
def no_lazy_load(cls: type) -> Iterator[None]:
    with mock.patch.object(cls, 'obj_load_attr',
                           side_effect=AssertionError('lazy-loaded')):
        yield


# -- the filter interface ------------------------------------------------------
def test_indexed_host_filter() -> None:
    """get_filtered_objects calls run_filter_for_index(i), then filter_all."""
    seen = []

    class Probe(adapter.IndexedHostFilter):
        def filter_all(self, hosts: Any, spec_obj: Any) -> list:
            seen.append(self.take_index())
            seen.append(self.take_index())
            return list(hosts)

    assert issubclass(Probe, filters.BaseHostFilter)
    handler = filters.HostFilterHandler()
    probe = Probe()
    handler.get_filtered_objects([probe], [host_state()], spec(), 3)
    handler.get_filtered_objects([probe], [host_state()], spec(), 0)
    assert seen == [3, None, 0, None]
    # the scheduler's loop passes the index the same way
    src = inspect.getsource(manager.SchedulerManager._get_sorted_hosts)
    assert 'get_filtered_hosts(' in src and 'index' in src


def test_is_rebuild() -> None:
    rebuild = spec()
    rebuild.scheduler_hints = {'_nova_check_type': ['rebuild']}
    assert adapter.is_rebuild(rebuild) is True
    assert adapter.is_rebuild(spec()) is False
    # Nova skips RUN_ON_REBUILD = False filters in _filter_one only: an
    # overridden filter_all has to ask itself
    assert 'RUN_ON_REBUILD' in inspect.getsource(
        filters.BaseHostFilter._filter_one)


# -- RequestSpec -----------------------------------------------------------------
def test_request_flavor() -> None:
    request = spec(**{'rdt:l3_ways': '3'})
    assert isinstance(adapter.request_flavor(request), objects.Flavor)
    assert adapter.request_flavor(request).extra_specs == {
        'rdt:l3_ways': '3'}


def test_request_cells() -> None:
    assert adapter.request_cells(spec(cells(0, 1))) == 2
    assert adapter.request_cells(spec()) == 0
    unset = objects.RequestSpec(flavor=flavor())
    assert adapter.request_cells(unset) == 0


def test_request_instance_uuid() -> None:
    assert adapter.request_instance_uuid(spec()) == UUIDS[0]
    assert adapter.request_instance_uuid(
        objects.RequestSpec(flavor=flavor())) is None


def test_placed_cells() -> None:
    """consume_from_request leaves the fitted host cells in the spec."""
    state = host_state(busy_node0=True)
    request = spec(cells(0))            # asks for one cell, numbered 0
    state.consume_from_request(request)
    assert adapter.placed_cells(request) == frozenset({1})
    plain = spec()
    state.consume_from_request(plain)
    assert adapter.placed_cells(plain) is None


def test_numa_fit() -> None:
    params = inspect.signature(hardware.numa_fit_instance_to_host).parameters
    assert list(params) == ['host_topology', 'instance_topology',
                            'provider_mapping', 'limits', 'pci_requests',
                            'pci_stats']
    assert 'limits' in host_state().__dict__
    assert host_state().allocation_candidates == []
    # the cells consume_from_request will give, by the same call
    request = spec(cells(0))
    state = host_state(busy_node0=True)
    assert adapter.numa_fit(state, request) == frozenset({1})
    assert request.numa_topology.cells[0].id == 0     # fitted on a clone
    with mock.patch.object(hardware, 'numa_fit_instance_to_host',
                           wraps=hardware.numa_fit_instance_to_host) as fit:
        adapter.numa_fit(state, request)
        state.consume_from_request(request)
    ours, nova = fit.call_args_list
    assert ours.kwargs.keys() == nova.kwargs.keys()
    assert ours.kwargs['provider_mapping'] == nova.kwargs['provider_mapping']
    assert adapter.placed_cells(request) == frozenset({1})
    # with allocation candidates, their mappings (NUMATopologyFilter's)
    state = host_state(busy_node0=True)
    state.allocation_candidates = [{'mappings': {}}]
    assert adapter.numa_fit(state, spec(cells(0))) == frozenset({1})
    # does not fit: None; no host topology: None
    assert adapter.numa_fit(host_state(), spec(cells(0, memory=10 ** 7))) \
        is None
    flat = host_manager.HostState('h2', 'n2', CELL)
    assert adapter.numa_fit(flat, spec(cells(0))) is None


def test_request_key() -> None:
    """RequestSpec hashes by identity and can be weakly referenced."""
    assert objects.RequestSpec.__hash__ is object.__hash__
    assert objects.RequestSpec.__eq__ is object.__eq__
    a, b = spec(), spec()
    passes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    passes[adapter.request_key(a)] = 1
    passes[adapter.request_key(b)] = 2
    assert len(passes) == 2
    del a
    gc.collect()
    assert list(passes.values()) == [2]


# -- Flavor ----------------------------------------------------------------------
def test_flavor_extra_specs() -> None:
    full = flavor(**{'rdt:pool': 'hp'})
    assert obj_base.get_attrname('extra_specs') == '_obj_extra_specs'
    assert adapter.flavor_extra_specs(full) is full.extra_specs
    with no_lazy_load(objects.Flavor):
        assert adapter.flavor_extra_specs(objects.Flavor(name='x')) == {}


def test_flavor_name() -> None:
    assert adapter.flavor_name(flavor()) == 'f'
    with no_lazy_load(objects.Flavor):
        assert adapter.flavor_name(objects.Flavor()) == '?'


# -- Instance ----------------------------------------------------------------------
def test_instance_loaded() -> None:
    """get_attrname names where a loaded field's value is kept, as is."""
    inst = objects.Instance(uuid=UUIDS[1], flavor=flavor(),
                            numa_topology=cells(1))
    assert getattr(inst, obj_base.get_attrname('flavor')) is inst.flavor
    assert getattr(inst, obj_base.get_attrname('numa_topology')) is \
        inst.numa_topology
    assert inst.obj_attr_is_set('flavor')
    assert adapter.instance_loaded(inst) == (inst.flavor, frozenset({1}))
    inst.numa_topology = None
    assert adapter.instance_loaded(inst) == (inst.flavor, None)
    stub = objects.Instance(nova_context.get_admin_context(), uuid=UUIDS[2])
    with no_lazy_load(objects.Instance):
        assert adapter.instance_loaded(stub) is None
        assert adapter.instance_loaded(
            objects.Instance(uuid=UUIDS[2], flavor=flavor())) == (
                mock.ANY, None)
    assert not stub.obj_attr_is_set('flavor')


def test_stub_context() -> None:
    """HostManager's stubs carry their cell's context; the scheduler's own
    do not, nor do loaded instances.
    """
    cctxt = nova_context.get_admin_context()
    hm = host_manager.HostManager.__new__(host_manager.HostManager)

    @contextlib.contextmanager
    def target_cell(ctx: Any, cell: Any) -> Iterator[Any]:
        yield cctxt

    with mock.patch.object(hm, '_get_cell_mapping_for_host'), \
            mock.patch.object(host_manager.context_module, 'target_cell',
                              target_cell), \
            mock.patch.object(objects.InstanceList, 'get_uuids_by_host',
                              return_value=UUIDS[3:5]):
        stubs = hm._get_instances_by_host(cctxt, 'h1')
    assert list(stubs) == UUIDS[3:5]
    for stub in stubs.values():
        assert stub._context is cctxt
        assert adapter.stub_context(stub) is cctxt
    # a multi-create with a server group: a stub without context
    state = host_state()
    request = spec()
    request.instance_group = objects.InstanceGroup(hosts=[])
    manager.SchedulerManager._consume_selected_host(state, request,
                                                    UUIDS[5])
    assert adapter.stub_context(state.instances[UUIDS[5]]) is None
    full = objects.Instance(cctxt, uuid=UUIDS[6], flavor=flavor())
    assert adapter.stub_context(full) is None


@pytest.fixture(scope='module')
def database() -> Iterator[nova_context.RequestContext]:
    """Nova's main database schema in SQLite (in memory)."""
    from nova.db import migration

    adapter.CONF.set_override('connection', 'sqlite://', group='database')
    try:
        migration.db_sync(database='main')
        yield nova_context.get_admin_context()
    finally:
        adapter.CONF.clear_override('connection', group='database')


def test_same_instances() -> None:
    """Instances compare by identity; Nova replaces them, not modifies."""
    assert objects.Instance.__eq__ is object.__eq__
    old = objects.Instance(uuid=UUIDS[9], flavor=flavor())
    twin = objects.Instance(uuid=UUIDS[9], flavor=flavor())
    assert adapter.same_instances((old,), (old,))
    assert not adapter.same_instances((old,), (twin,))
    hm = host_manager.HostManager.__new__(host_manager.HostManager)
    hm._instance_info = {'h1': {'instances': {old.uuid: old},
                                'updated': True}}
    hm.update_instance_info(nova_context.get_admin_context(), 'h1',
                            objects.InstanceList(objects=[twin]))
    assert hm._instance_info['h1']['instances'][old.uuid] is twin
    state = host_state()
    replaced = {twin.uuid: twin}
    state.update(inst_dict=replaced)
    assert state.instances is replaced


# -- HostState ---------------------------------------------------------------------
def test_host_key() -> None:
    assert adapter.host_key(host_state()) == ('h1', 'n1')


def test_host_instances() -> None:
    state = host_state()
    assert adapter.host_instances(state) == {}
    inst = objects.Instance(uuid=UUIDS[10])
    state.update(inst_dict={inst.uuid: inst})
    assert adapter.host_instances(state) == {inst.uuid: inst}


def test_aggregate_metadata() -> None:
    state = host_state()
    state.update(aggregates=[
        objects.Aggregate(id=1, name='a', metadata={'rdt_l3_ways': '11'}),
        objects.Aggregate(id=2, name='b', metadata={})])
    assert adapter.aggregate_metadata(state, ('rdt_l3_ways', 'x')) == (
        ('11', None), (None, None))


def test_num_consumed() -> None:
    """consume_from_request bumps num_instances, not HostState.instances."""
    state = host_state()
    assert adapter.num_consumed(state) == 0
    state.consume_from_request(spec())
    state.consume_from_request(spec(cells(0)))
    assert adapter.num_consumed(state) == 2
    assert state.instances == {}


def test_host_domains() -> None:
    state = host_state()
    before = state.numa_topology
    assert adapter.host_domains(state) == frozenset({0, 1})
    # consuming replaces the topology object (the cache follows it)
    state.consume_from_request(spec(cells(0)))
    assert state.numa_topology is not before
    assert adapter.host_domains(state) == frozenset({0, 1})
    assert adapter.host_domains(
        host_manager.HostState('h2', 'n2', CELL)) is None


# -- private attributes ----------------------------------------------------------------
def test_cached_cache() -> None:
    slot = '_ovs_rdt_probe'
    inst = objects.Instance(uuid=UUIDS[11], flavor=flavor())
    state = host_state()
    for obj in (inst, state):
        assert adapter.cached(obj, slot, 'none') == 'none'
        adapter.cache(obj, slot, 42)
        assert adapter.cached(obj, slot) == 42
    # not a field: not a change, not serialized, not cloned
    assert inst.obj_what_changed() == {'uuid', 'flavor'}
    assert slot not in str(inst.obj_to_primitive())
    assert adapter.cached(inst.obj_clone(), slot) is None


def test_conf() -> None:
    import nova.conf

    assert adapter.CONF is nova.conf.CONF
    assert 'filter_scheduler' in adapter.CONF


# -- the cell databases and Placement (nova_plugin.ledger) ------------------------
def test_request_context() -> None:
    ctxt = nova_context.get_admin_context()
    assert adapter.request_context(objects.RequestSpec(ctxt)) is ctxt
    assert adapter.request_context(spec()) is None
    # what select_destinations is handed over RPC carries the context
    prims = spec().obj_to_primitive()
    assert adapter.request_context(
        objects.RequestSpec.obj_from_primitive(prims, ctxt)) is ctxt


def test_host_cell() -> None:
    assert adapter.host_cell(host_state()) == CELL


def test_host_provider() -> None:
    """HostState.uuid is the compute node's, which is its provider's."""
    state = host_state()
    node = objects.ComputeNode(uuid=UUIDS[11], updated_at=None)
    with mock.patch.object(state, '_update_from_compute_node') as update:
        state.update(compute=node)
    update.assert_called_once_with(node)
    state.uuid = node.uuid     # what _update_from_compute_node sets
    assert adapter.host_provider(state) == UUIDS[11]
    src = inspect.getsource(host_manager.HostState._update_from_compute_node)
    assert 'self.uuid = compute.uuid' in src


def test_utcnow() -> None:
    import datetime

    now = adapter.utcnow()
    assert now.tzinfo is None
    assert abs(now - datetime.datetime.utcnow()).total_seconds() < 5


def test_cell_context() -> None:
    ctxt = nova_context.get_admin_context()
    mapping = objects.CellMapping(uuid=UUIDS[12], name='cell1',
                                  database_connection='sqlite://',
                                  transport_url='fake://')
    with mock.patch.object(objects.CellMapping, 'get_by_uuid',
                           return_value=mapping) as get:
        cctxt = adapter.cell_context(ctxt, UUIDS[12])
        again = adapter.cell_context(ctxt, UUIDS[12])
    get.assert_called_once_with(mock.ANY, UUIDS[12])
    assert cctxt is not ctxt and again is not cctxt
    assert cctxt.cell_uuid == UUIDS[12] and cctxt.is_admin
    assert getattr(ctxt, 'cell_uuid', None) is None     # not changed


def _instance(database: Any, uuid: str, **kw: Any) -> objects.Instance:
    values = dict(host='h1', node='n1', compute_id=1, project_id='p',
                  user_id='u', flavor=flavor(id=1, **{'rdt:l3_ways': '3'}),
                  old_flavor=None, new_flavor=None, numa_topology=cells(1),
                  vm_state='active')
    values.update(kw)
    inst = objects.Instance(database, uuid=uuid, **values)
    inst.create()
    return inst


def test_changed_instances(database: nova_context.RequestContext) -> None:
    before = adapter.utcnow()
    old = _instance(database, UUIDS[13])
    new = _instance(database, UUIDS[14])
    new.task_state = 'resize_prep'
    new.save()                       # updated_at set
    gone = _instance(database, UUIDS[15])
    gone.vm_state = 'deleted'
    gone.save()
    gone.destroy()                   # soft delete: updated_at kept
    seen = dict(adapter.changed_instances(database, before))
    assert old.uuid not in seen      # never updated: updated_at is NULL
    changed, deleted = seen[new.uuid]
    assert changed.tzinfo is None and changed >= before.replace(
        microsecond=0) and deleted is False
    loaded = objects.Instance.get_by_uuid(database, new.uuid)
    assert seen[new.uuid] == (loaded.updated_at.replace(tzinfo=None), False)
    assert seen[gone.uuid][1] is True
    assert adapter.changed_instances(database, adapter.utcnow()
                                     .replace(year=2999)) == []


def test_instances_by_uuid(database: nova_context.RequestContext) -> None:
    kept = _instance(database, UUIDS[16])
    gone = _instance(database, UUIDS[17])
    gone.destroy()
    found = {i.uuid: i for i in adapter.instances_by_uuid(
        database, [kept.uuid, gone.uuid])}
    assert set(found) == {kept.uuid, gone.uuid}      # deleted too
    assert found[gone.uuid].deleted
    with no_lazy_load(objects.Instance):
        for inst in found.values():
            adapter.instance_state(inst)


def test_instance_state(database: nova_context.RequestContext) -> None:
    inst = _instance(database, UUIDS[18], old_flavor=flavor(),
                     new_flavor=flavor(**{'rdt:l3_ways': '5'}))
    inst.migration_context = objects.MigrationContext(
        instance_uuid=inst.uuid, migration_id=7,
        old_numa_topology=cells(0), new_numa_topology=cells(1))
    state = adapter.instance_state(inst)
    assert state.uuid == inst.uuid and state.host == ('h1', 'n1')
    assert state.changed == inst.created_at.replace(tzinfo=None)
    assert not state.gone and not state.deleted
    assert state.flavor.extra_specs == {'rdt:l3_ways': '3'}
    assert state.flavor_id == inst.flavor.id
    assert (state.cells, state.old_cells, state.new_cells) == (
        frozenset({1}), frozenset({0}), frozenset({1}))
    assert state.new_flavor.extra_specs == {'rdt:l3_ways': '5'}
    inst.vm_state = 'shelved_offloaded'
    assert adapter.instance_state(inst).gone
    inst.vm_state, inst.host = 'active', None
    assert adapter.instance_state(inst).host is None


def _migration(database: Any, status: str, **kw: Any) -> objects.Migration:
    values = dict(source_compute='h1', source_node='n1', dest_compute='h2',
                  dest_node='n2', dest_compute_id=2, instance_uuid=UUIDS[13],
                  migration_type='resize', old_instance_type_id=1,
                  new_instance_type_id=2)
    values.update(kw)
    mig = objects.Migration(database, status=status, **values)
    mig.create()
    return mig


STATUSES = ('accepted', 'pre-migrating', 'migrating', 'post-migrating',
            'finished', 'running', 'preparing', 'queued', 'confirming',
            'reverting', 'confirmed', 'reverted', 'error', 'failed',
            'completed', 'cancelled', 'done')


def test_migration_state(database: nova_context.RequestContext) -> None:
    """In progress exactly where the resource tracker's query says so."""
    made = {status: _migration(database, status, source_compute='ms',
                               source_node='ms')
            for status in STATUSES}
    tracked = {m.id for m in objects.MigrationList
               .get_in_progress_by_host_and_node(database, 'ms', 'ms')}
    for status, mig in made.items():
        state = adapter.migration_state(mig)
        assert state.in_progress == (mig.id in tracked), status
    state = adapter.migration_state(made['finished'])
    assert (state.id, state.instance_uuid) == (made['finished'].id,
                                               UUIDS[13])
    assert (state.source, state.dest) == (('ms', 'ms'), ('h2', 'n2'))
    assert (state.old_flavor_id, state.new_flavor_id) == (1, 2)
    unscheduled = _migration(database, 'pre-migrating', dest_compute=None,
                             dest_node=None, dest_compute_id=None)
    assert adapter.migration_state(unscheduled).dest is None


def test_changed_migrations(database: nova_context.RequestContext) -> None:
    before = adapter.utcnow()
    mig = _migration(database, 'pre-migrating', source_compute='cm')
    assert [m.id for m in adapter.changed_migrations(database, before)] == []
    mig.status = 'migrating'
    mig.save()
    assert mig.id in [m.id for m in adapter.changed_migrations(database,
                                                               before)]


def test_host_migrations(database: nova_context.RequestContext) -> None:
    old = _migration(database, 'finished', source_compute='hm',
                     source_node='hmn')
    _migration(database, 'confirmed', source_compute='hm',
               source_node='hmn')
    assert [m.id for m in adapter.host_migrations(
        database, ('hm', 'hmn'))] == [old.id]


def test_allocation_providers() -> None:
    from nova.scheduler.client import report

    params = inspect.signature(
        report.SchedulerReportClient.get_allocs_for_consumer).parameters
    assert list(params) == ['self', 'context', 'consumer']
    client = mock.Mock()
    client.get_allocs_for_consumer.return_value = {
        'allocations': {UUIDS[1]: {'resources': {'VCPU': 1}}},
        'consumer_generation': 1}
    with mock.patch.object(report, 'report_client_singleton',
                           return_value=client):
        assert adapter.allocation_providers('ctx', UUIDS[2]) == [UUIDS[1]]
        client.get_allocs_for_consumer.return_value = {}
        assert adapter.allocation_providers('ctx', UUIDS[2]) == []
    client.get_allocs_for_consumer.assert_called_with('ctx', UUIDS[2])
