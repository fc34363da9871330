"""Every Nova internal the RDTCacheFilter relies on, one function each.

Written against nova==34.0.0 (the ``tox -e nova`` env).  Nova documents
filters (``BaseHostFilter.host_passes``) but not the objects they get:
the attribute storage of its versioned objects, what ``HostState`` holds,
what ``consume_from_request()`` changes between the instances of one
request.  :mod:`nova_plugin.filters` reads none of that directly; it calls
the functions here, and ``tests/nova/test_adapter.py`` checks each of them
(one test per function, named after it) inside the real nova package, so
a Nova upgrade that changes one of them fails that test by name.

The functions are called per host on every request: they stay plain
attribute reads, no logging, no copies.
"""
from __future__ import annotations

import threading
from typing import Any, Iterable

from oslo_utils import timeutils

from nova.compute import vm_states
import nova.conf
from nova import context as nova_context
from nova.db.main import api as main_db
from nova.db.main import models as main_models
from nova import objects
from nova.objects import base as obj_base
from nova.scheduler.client import report
from nova.scheduler import filters
from nova.scheduler import utils as scheduler_utils
from nova.virt import hardware

from nova_plugin import ledger

#: The configuration nova-scheduler reads (``[ovs_rdt]`` is registered here).
CONF = nova.conf.CONF

# Where NovaObject keeps a loaded field (``get_attrname``).  hasattr() on it
# is obj_attr_is_set() without its cost, and never lazy-loads.
_FLAVOR = obj_base.get_attrname('flavor')
_NUMA = obj_base.get_attrname('numa_topology')
_EXTRA_SPECS = obj_base.get_attrname('extra_specs')
_NAME = obj_base.get_attrname('name')
_ID = obj_base.get_attrname('id')
_DOMAINS = '_ovs_rdt_domains'     # cached (numa_topology, ids) on a HostState


# -- the filter interface ------------------------------------------------------
class IndexedHostFilter(filters.BaseHostFilter):
    """A host filter that knows which instance of a request it filters for.

    Relies on ``BaseFilterHandler.get_filtered_objects(filters, objs,
    spec_obj, index)`` calling ``run_filter_for_index(index)`` and then,
    on the same thread and before any other call for that index,
    ``filter_all()``; and on ``SchedulerManager._schedule`` calling it
    with index 0, 1, ... for the instances of one multi-create request.
    """

    def __init__(self) -> None:
        super().__init__()
        self._index = threading.local()

    def run_filter_for_index(self, index: int) -> bool:
        self._index.value = index
        return True

    def take_index(self) -> int | None:
        """The index of the current ``filter_all()`` call, once (else None)."""
        index = getattr(self._index, 'value', None)
        self._index.value = None
        return index


def is_rebuild(spec_obj: Any) -> bool:
    """Whether the request is a rebuild (``_nova_check_type`` hint).

    ``nova.scheduler.utils.request_is_rebuild``: filters with
    ``RUN_ON_REBUILD = False`` are skipped by Nova's ``_filter_one`` only,
    not in an overridden ``filter_all``.
    """
    return scheduler_utils.request_is_rebuild(spec_obj)


# -- RequestSpec ---------------------------------------------------------------
def request_flavor(spec_obj: Any) -> Any:
    """The flavor asked for: ``RequestSpec.flavor`` (an ``objects.Flavor``)."""
    return spec_obj.flavor


def request_cells(spec_obj: Any) -> int:
    """NUMA cells the request asks for (``RequestSpec.numa_topology``).

    Unset or None: 0.
    """
    numa = spec_obj.numa_topology \
        if spec_obj.obj_attr_is_set('numa_topology') else None
    return len(numa.cells) if numa is not None else 0


def request_instance_uuid(spec_obj: Any) -> str | None:
    """``RequestSpec.instance_uuid``: the instance being scheduled now.

    Nova sets it before each ``run_filter_for_index(i)`` of a multi-create
    request, and to the moved instance for a resize or migration (which is
    then on its source host, in ``HostState.instances``).
    """
    if spec_obj.obj_attr_is_set('instance_uuid'):
        return spec_obj.instance_uuid or None
    return None


def placed_cells(spec_obj: Any) -> frozenset[int] | None:
    """The host NUMA cells of the instance ``consume_from_request()`` placed.

    ``HostState._locked_consume_from_request`` stores the fitted
    ``InstanceNUMATopology`` (cell ids = host NUMA node ids) back into
    ``spec_obj.numa_topology``.  None: no NUMA topology.
    """
    numa = spec_obj.numa_topology
    if numa is None or not numa.cells:
        return None
    return frozenset(c.id for c in numa.cells)


def numa_fit(host_state: Any, spec_obj: Any) -> frozenset[int] | None:
    """The host NUMA cells Nova's NUMA fit gives the request on this host.

    The call ``HostState._locked_consume_from_request`` makes (so the cells
    the instance will get): ``hardware.numa_fit_instance_to_host(host
    topology, instance topology, provider_mapping, limits, pci_requests,
    pci_stats)`` with the ``NUMATopologyLimits`` NUMATopologyFilter left in
    ``host_state.limits['numa_topology']`` and the mappings of the host's
    first allocation candidate (``HostState.allocation_candidates``, dicts
    with ``'mappings'``), else ``RequestSpec.get_request_group_mapping()``.
    On a clone: the fit writes CPU pinning into the instance topology.
    None: the host has no NUMA topology, or the request does not fit.
    May raise whatever the fit raises.
    """
    if host_state.numa_topology is None:
        return None
    pci = spec_obj.pci_requests if 'pci_requests' in spec_obj else None
    pci = pci.requests if pci and host_state.pci_stats else None
    candidates = getattr(host_state, 'allocation_candidates', None)
    mapping = candidates[0]['mappings'] if candidates \
        else spec_obj.get_request_group_mapping()
    fitted = hardware.numa_fit_instance_to_host(
        host_state.numa_topology, spec_obj.numa_topology.obj_clone(),
        limits=host_state.limits.get('numa_topology'),
        pci_requests=pci, pci_stats=host_state.pci_stats,
        provider_mapping=mapping)
    return frozenset(c.id for c in fitted.cells) if fitted is not None \
        else None


def request_context(spec_obj: Any) -> Any | None:
    """The RequestContext a RequestSpec came with (``_context``).

    ``SchedulerManager.select_destinations`` gets the RequestSpec with the
    request's context; one made without (unit tests) has None.
    """
    return spec_obj._context


def request_key(spec_obj: Any) -> Any:
    """What identifies one request across the instances of a multi-create.

    ``SchedulerManager._schedule`` passes the same RequestSpec object for
    every instance of a request; RequestSpec hashes and compares by
    identity (no ``ComparableVersionedObject``) and can be weakly
    referenced, so a ``WeakKeyDictionary`` keyed by it forgets the request
    with it.
    """
    return spec_obj


# -- Flavor ----------------------------------------------------------------------
def flavor_extra_specs(flavor: Any) -> dict[str, str]:
    """``Flavor.extra_specs`` when loaded, else {}.

    Never lazy-loads: the stored value, as :func:`instance_loaded` reads it.
    """
    return getattr(flavor, _EXTRA_SPECS, None) or {}


def flavor_name(flavor: Any) -> str:
    """``Flavor.name`` when loaded, else ``'?'`` (never lazy-loads)."""
    return getattr(flavor, _NAME, None) or '?'


# -- Instance ----------------------------------------------------------------------
def instance_loaded(inst: Any) -> tuple[Any, frozenset[int] | None] | None:
    """``(Instance.flavor, host NUMA node ids of Instance.numa_topology)``,
    from what is loaded; None without a loaded flavor.  Never lazy-loads.

    ``nova.objects.base.get_attrname(field)`` names the attribute a loaded
    field's value is stored in (``_obj_<field>``), which the field's
    property returns as is; reading the property of a field that is not
    there would lazy-load it, one database query per instance.  Read
    directly: the property costs more than the rest of the accounting of
    an instance.  Cells: None when ``numa_topology`` is not loaded, None
    or has no cells.
    """
    flavor = getattr(inst, _FLAVOR, None)
    if flavor is None:
        return None
    numa = getattr(inst, _NUMA, None)
    if numa is None or not numa.cells:
        return flavor, None
    return flavor, frozenset(c.id for c in numa.cells)


def stub_context(inst: Any) -> Any | None:
    """The cell context of a bare Instance stub (uuid only); None: not a
    stub, or one without a context.

    ``HostManager._get_instances_by_host`` (computes not reporting, see
    ``[filter_scheduler] track_instance_changes``) makes
    ``objects.Instance(cell_context, uuid=...)``: no flavor, the context in
    ``Instance._context``.  ``SchedulerManager._consume_selected_host``
    adds stubs without a context (``objects.Instance(uuid=...)``) for the
    instances of the request being scheduled: those cannot be loaded.
    """
    return None if hasattr(inst, _FLAVOR) else inst._context


def same_instances(old: tuple, new: tuple) -> bool:
    """Whether two snapshots of ``HostState.instances.values()`` hold the
    same objects.

    Instance defines no ``__eq__`` (no ``ComparableVersionedObject``):
    tuple ``==`` compares identities, in C.  Nova replaces the Instance
    objects of a host when they change (``HostManager.update_instance_info``
    overwrites the entries; ``HostState.update(inst_dict=...)`` replaces
    the dict), it does not modify them, so the same objects mean the same
    flavors and NUMA cells.
    """
    return old == new


# -- HostState ---------------------------------------------------------------------
def host_key(host_state: Any) -> tuple[str, str]:
    """``(HostState.host, HostState.nodename)``."""
    return host_state.host, host_state.nodename


def host_cell(host_state: Any) -> str | None:
    """``HostState.cell_uuid``: the uuid of the host's CellMapping."""
    return host_state.cell_uuid


def host_provider(host_state: Any) -> str:
    """``HostState.uuid``: the compute node's uuid, which is its resource
    provider's in Placement (``ResourceTracker._update_to_placement``).
    """
    return host_state.uuid


def host_instances(host_state: Any) -> dict[str, Any]:
    """``HostState.instances``: instance uuid -> Instance (or bare stub)."""
    return host_state.instances


def aggregate_metadata(host_state: Any, keys: Iterable[str]) -> tuple:
    """Per aggregate of the host, the values of ``keys`` (None: absent).

    ``HostState.aggregates``: ``objects.Aggregate`` with a ``metadata``
    dict of strings.
    """
    keys = tuple(keys)
    return tuple([tuple(map(agg.metadata.get, keys))
                  for agg in host_state.aggregates])


def num_consumed(host_state: Any) -> int:
    """``HostState.num_instances``: rises by one per ``consume_from_request``.

    Nova consumes the chosen host between the instances of a multi-create
    request; that bumps ``num_instances`` but does not add the instance to
    ``HostState.instances`` (only a bare stub, only with a server group).
    A compute report (``HostState.update``) resets it.
    """
    return host_state.num_instances


def host_domains(host_state: Any) -> frozenset[int] | None:
    """The host's NUMA node ids (``HostState.numa_topology.cells``).

    None without a NUMA topology.  Cached on the HostState while it keeps
    the same ``numa_topology`` object (``consume_from_request`` and compute
    reports replace it).
    """
    numa = host_state.numa_topology
    if numa is None or not numa.cells:
        return None
    cached = getattr(host_state, _DOMAINS, None)
    if cached is not None and cached[0] is numa:
        return cached[1]
    ids = frozenset(c.id for c in numa.cells)
    setattr(host_state, _DOMAINS, (numa, ids))
    return ids


# -- private attributes on Nova objects --------------------------------------------
def cached(obj: Any, slot: str, default: Any = None) -> Any:
    """What :func:`cache` stored on a Nova object, else ``default``."""
    return getattr(obj, slot, default)


def cache(obj: Any, slot: str, value: Any) -> None:
    """Keep ``value`` on a Nova object (Instance, HostState) in a private
    attribute (``slot``: ``_ovs_rdt_<name>``).

    Neither ``NovaObject`` nor ``HostState`` has ``__slots__`` or a
    ``__setattr__`` that refuses other names; a private attribute is not a
    field, so it is neither serialized nor copied by ``obj_clone()``, and
    lives as long as the object does.
    """
    setattr(obj, slot, value)


# -- the cell databases (nova_plugin.ledger reads them) ----------------------------
#: Instance fields the ledger reads: ``flavor`` loads ``old_flavor`` and
#: ``new_flavor`` too (``Instance._flavor_from_db``).
_LEDGER_ATTRS = ['flavor', 'numa_topology', 'migration_context']
#: ``migration_get_in_progress_by_host_and_node``'s statuses of a finished
#: move (nova/db/main/api.py): any other is in progress for the resource
#: tracker.
_MIGRATION_DONE = frozenset(('confirmed', 'reverted', 'error', 'failed',
                             'completed', 'cancelled', 'done'))


def utcnow() -> Any:
    """Now, as a naive UTC datetime (``oslo_utils.timeutils.utcnow``)."""
    return timeutils.utcnow()


_CELL_MAPPINGS: dict[str, Any] = {}


def cell_context(context: Any, cell_uuid: str) -> Any:
    """An admin copy of ``context`` targeted at a cell's database.

    ``objects.CellMapping.get_by_uuid`` (cached per uuid) and
    ``nova.context.set_target_cell`` on ``context.elevated()`` (a copy).
    """
    cctxt = context.elevated()
    mapping = _CELL_MAPPINGS.get(cell_uuid)
    if mapping is None:
        mapping = objects.CellMapping.get_by_uuid(cctxt, cell_uuid)
        if len(_CELL_MAPPINGS) > 1000:
            _CELL_MAPPINGS.clear()
        _CELL_MAPPINGS[cell_uuid] = mapping
    nova_context.set_target_cell(cctxt, mapping)
    return cctxt


@main_db.pick_context_manager_reader
def _changed_rows(cctxt: Any, since: Any) -> list:
    model = main_models.Instance
    return cctxt.session.query(
        model.uuid, model.updated_at, model.created_at, model.deleted,
    ).filter(model.updated_at >= since).all()


def changed_instances(cctxt: Any, since: Any) -> list[tuple[str, Any]]:
    """``(uuid, (changed, deleted))`` of the instances updated since
    ``since``, deleted ones included: :func:`instance_state`'s ``changed``
    and ``deleted`` without loading the instances.

    The query ``InstanceList.get_by_filters(cctxt, {'changes-since':
    since})`` makes (``instances.updated_at >= since``, indexed; without a
    ``deleted`` filter, deleted rows too), of four columns, through
    ``nova.db.main.api.pick_context_manager_reader`` (the context's cell
    database).  Not through the objects, measurably too slow here: the
    scheduler runs this for every instance it filters, and each read
    reaches OVERLAP seconds back, so it returns every instance changed in
    the last 10 s or more (about 100 while a cloud boots 10 a second).
    Built as ``Instance`` objects (even with ``expected_attrs=[]``) those
    rows cost 0.13 ms each: 13 ms for 100 rows, 39 ms for 300, against
    0.7 and 1.0 ms for the four columns (SQLite, Nova 34).  Deleting an
    instance does not change ``updated_at`` (``soft_delete``), but the
    compute saves it as ``deleted`` just before
    (``ComputeManager._delete_instance``).
    """
    since = timeutils.normalize_time(since)
    return [(uuid, (_naive(updated or created), bool(deleted)))
            for uuid, updated, created, deleted in _changed_rows(cctxt, since)]


def instances_by_uuid(cctxt: Any, uuids: Iterable[str]) -> list:
    """These instances (deleted ones included), as :func:`changed_instances`."""
    return objects.InstanceList.get_by_filters(
        cctxt, {'uuid': list(uuids)}, expected_attrs=_LEDGER_ATTRS).objects


def changed_migrations(cctxt: Any, since: Any) -> list:
    """Migrations updated since ``since``
    (``objects.MigrationList.get_by_filters`` with ``changes-since``).
    """
    return objects.MigrationList.get_by_filters(
        cctxt, {'changes-since': since}).objects


def host_migrations(cctxt: Any, host: tuple[str, str]) -> list:
    """The moves in progress to or from a host's node, whatever their age:
    ``objects.MigrationList.get_in_progress_by_host_and_node``, what the
    compute's resource tracker counts.
    """
    return objects.MigrationList.get_in_progress_by_host_and_node(
        cctxt, host[0], host[1]).objects


def _naive(when: Any) -> Any:
    """A database timestamp as a naive UTC datetime, as :func:`utcnow`."""
    return None if when is None else timeutils.normalize_time(when)


def _cells_of(numa: Any) -> frozenset[int] | None:
    return None if numa is None or not numa.cells else \
        frozenset(c.id for c in numa.cells)


def instance_state(inst: Any) -> ledger.InstanceState:
    """What the ledger needs of an Instance loaded with its flavors, NUMA
    topology and migration context.

    Gone: ``deleted``, or ``vm_states.allow_resource_removal(vm_state,
    task_state)`` (deleted, shelved offloaded: what the resource tracker
    stops counting).  Host: ``(host, node)``.  The old and new NUMA cells
    of a move are the ``MigrationContext``'s ``old_numa_topology`` and
    ``new_numa_topology`` (the destination's claim writes them); without
    a migration context, the instance's own cells.
    """
    cells = _cells_of(inst.numa_topology)
    mctx = inst.migration_context
    old_cells = cells if mctx is None else _cells_of(mctx.old_numa_topology)
    new_cells = cells if mctx is None else _cells_of(mctx.new_numa_topology)
    flavor = inst.flavor
    return ledger.InstanceState(
        uuid=inst.uuid, changed=_naive(inst.updated_at or inst.created_at),
        gone=bool(inst.deleted) or vm_states.allow_resource_removal(
            vm_state=inst.vm_state, task_state=inst.task_state),
        deleted=bool(inst.deleted),
        host=(inst.host, inst.node) if inst.host else None,
        flavor=flavor, flavor_id=getattr(flavor, _ID, None),
        cells=cells, old_flavor=inst.old_flavor, old_cells=old_cells,
        new_flavor=inst.new_flavor, new_cells=new_cells)


def migration_state(mig: Any) -> ledger.MigrationState:
    """What the ledger needs of a Migration: in progress unless its status
    is one :data:`_MIGRATION_DONE` lists (or it is deleted).
    """
    return ledger.MigrationState(
        id=mig.id, instance_uuid=mig.instance_uuid,
        changed=_naive(mig.updated_at or mig.created_at),
        in_progress=not mig.deleted and mig.status not in _MIGRATION_DONE,
        source=(mig.source_compute, mig.source_node)
        if mig.source_compute else None,
        dest=(mig.dest_compute, mig.dest_node) if mig.dest_compute else None,
        old_flavor_id=mig.old_instance_type_id,
        new_flavor_id=mig.new_instance_type_id)


def allocation_providers(context: Any, uuid: str) -> list[str]:
    """The resource providers Placement has allocations of consumer
    ``uuid`` on (``GET /allocations/{uuid}``), through the scheduler's
    Placement client (``report.report_client_singleton()``,
    ``get_allocs_for_consumer``; raises what it raises).  The scheduler
    claims an instance's resources on its chosen host before
    ``select_destinations`` answers (``SchedulerManager._schedule``,
    ``utils.claim_resources``).
    """
    client = report.report_client_singleton()
    return list(client.get_allocs_for_consumer(context, uuid)
                .get('allocations', {}))
