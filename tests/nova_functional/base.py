"""ovs-rdt inside Nova's own functional framework.

:class:`RDTTestCase` is Nova's ``ProviderUsageBaseTestCase`` (real nova-api,
conductor and scheduler, the real Placement service in-process from
``openstack-placement``, an SQLite cell database) with fake-driver computes
started with the provider config ``ovs-rdt provider-config`` wrote for their
emulated node (:mod:`tests.nova_functional.nodes`), their capacity as
aggregate metadata, and ``RDTCacheFilter`` in the scheduler's
``enabled_filters``.

``ACCOUNTING`` picks the path the flavors take:

* ``'filter'``: flavors carry ``rdt:l3_ways`` (and ``rdt:pool``); the
  filter counts.
* ``'placement'``: flavors also ask for ``resources:CUSTOM_RDT_L3_WAY``
  (ways x the domains they span) and ``resources:CUSTOM_RDT_CLOSID=1``;
  the filter is not enabled, Placement counts.
* ``'both'``: both.

Set-up facts worked around here: the nova wheel installs
``etc/nova/api-paste.ini`` under the environment's data directory, not where
Nova's test configuration looks for it; Nova's ``TestCase._clear_attrs``
deletes the test's attributes at cleanup, which pytest reads afterwards (it
only saves memory, so it is off).
"""
from __future__ import annotations

import os
import sysconfig
import time
from typing import Any, Iterable

import fixtures
from oslo_utils import uuidutils

from nova import context as nova_context
from nova import objects
from nova.tests import fixtures as nova_fixtures
from nova.tests.functional import integrated_helpers
from nova.virt import hardware

from tests.nova_functional import nodes

FILTER = 'nova_plugin.filters.RDTCacheFilter'
#: What Nova's scheduler runs (its defaults, then NUMA, then ours).
NOVA_FILTERS = ['ComputeFilter', 'ComputeCapabilitiesFilter',
                'ImagePropertiesFilter', 'ServerGroupAntiAffinityFilter',
                'ServerGroupAffinityFilter', 'NUMATopologyFilter']
RC_WAYS = 'CUSTOM_RDT_L3_WAY'
RC_CLOSID = 'CUSTOM_RDT_CLOSID'


def api_paste() -> str:
    """Where the nova wheel put api-paste.ini (``<data>/etc/nova``)."""
    path = os.path.join(sysconfig.get_path('data'), 'etc', 'nova',
                        'api-paste.ini')
    if not os.path.exists(path):
        raise RuntimeError('api-paste.ini is not at %s: is nova installed '
                           'from its wheel in this environment?' % path)
    return path


class RDTMixin:
    """ovs-rdt's filter, provider configs and helpers, on one of Nova's
    functional test bases (:class:`RDTTestCase`, and
    ``tests.nova_functional.libvirt_base``).
    """

    #: 'filter', 'placement' or 'both' (module docstring).
    ACCOUNTING = 'filter'
    #: RPC casts as calls: an API call returns when its work is done.
    CAST_AS_CALL = True
    #: ``[filter_scheduler] track_instance_changes``: computes report their
    #: instances to the scheduler (else it reads bare stubs per request).
    TRACK_INSTANCE_CHANGES = True

    def setUp(self) -> None:
        self.flags(api_paste_config=api_paste(), group='wsgi')
        enabled = list(NOVA_FILTERS)
        if self.ACCOUNTING in ('filter', 'both'):
            enabled.append('RDTCacheFilter')
        self.flags(available_filters=['nova.scheduler.filters.all_filters',
                                      FILTER],
                   enabled_filters=enabled, group='filter_scheduler')
        self.flags(allow_resize_to_same_host=True)
        self.flags(track_instance_changes=self.TRACK_INSTANCE_CHANGES,
                   group='filter_scheduler')
        self.flags(instances=-1, cores=-1, ram=-1, group='quota')
        super().setUp()  # type: ignore[misc]
        self.ctxt = nova_context.get_admin_context()
        self._provider_dirs = self.useFixture(fixtures.TempDir()).path
        self._aggregates: dict[str, int] = {}
        self._flavors: dict[tuple, str] = {}
        self.host_node: dict[str, nodes.Node] = {}
        self._rp_uuids: dict[str, str] = {}
        self.image = self.glance.image1['id']

    def _clear_attrs(self) -> None:
        """Keep the attributes (Nova's version deletes them; pytest reads
        them after cleanup).
        """

    # -- hosts -----------------------------------------------------------------
    def start_hosts(self, kind: nodes.Kind, names: Iterable[str]) -> None:
        """Fake computes of ``kind``, each with its provider config, in the
        aggregate of that kind (its capacity as metadata).
        """
        node = nodes.node(kind)
        names = list(names)
        for name in names:
            folder = os.path.join(self._provider_dirs, name)
            os.makedirs(folder)
            with open(os.path.join(folder, 'ovs-rdt.yaml'), 'w',
                      encoding='utf-8') as fh:
                fh.write(node.provider_yaml)
            self.flags(provider_config_location=folder, group='compute')
            self.start_one(name, node)
            self.host_node[name] = node
        agg = self._aggregates.get(kind.name)
        if agg is None:
            agg = self._aggregates[kind.name] = self.admin_api.post_aggregate(
                {'aggregate': {'name': 'rdt-' + kind.name}})['id']
            self.admin_api.post_aggregate_action(
                agg, {'set_metadata': {'metadata': dict(node.metadata)}})
        for name in names:
            self.admin_api.add_host_to_aggregate(agg, name)

    def start_one(self, name: str, node: nodes.Node) -> None:
        """Start compute ``name`` (of ``node``'s kind)."""
        self._start_compute(name)

    @property
    def scheduler_manager(self) -> Any:
        service = getattr(self, 'scheduler_service', None) or self.scheduler
        return service.manager

    def restart(self, host: str) -> None:
        """Restart a compute (a new manager, the same driver), with its
        provider config.
        """
        self.flags(provider_config_location=os.path.join(
            self._provider_dirs, host), group='compute')
        self.computes[host] = self.restart_compute_service(
            self.computes[host])

    def rp_uuid(self, host: str) -> str:
        if host not in self._rp_uuids:
            self._rp_uuids[host] = self._get_provider_uuid_by_host(host)
        return self._rp_uuids[host]

    # -- flavors ---------------------------------------------------------------
    def flavor(self, ways: int | None = None, *, pool: str | None = None,
               domains: int = 2, path: str | None = None,
               extra: dict[str, str] | None = None, vcpus: int = 1) -> str:
        """A flavor asking ``ways`` per domain (or joining ``pool``) on an
        accounting path (default: the test's): ``rdt:*`` for the filter,
        plus ``resources:CUSTOM_RDT_*`` for Placement (``domains``: what
        an unpinned instance spans; Placement asks ways x domains).  On
        the Placement path alone the flavor still carries ``rdt:l3_ways``:
        the node's hook reads it.
        """
        path = path or self.ACCOUNTING
        specs: dict[str, str] = dict(extra or {})
        if ways is not None:
            specs['rdt:l3_ways'] = str(ways)
            if path in ('placement', 'both'):
                specs['resources:' + RC_WAYS] = str(ways * domains)
                specs['resources:' + RC_CLOSID] = '1'
        if pool is not None:
            specs['rdt:pool'] = pool
        key = (tuple(sorted(specs.items())), vcpus)
        if key not in self._flavors:
            # straight into the API database: nova-api's flavor calls (and
            # the rdt validators) are tested once, in test_fleet
            flavorid = 'rdt-%d' % (len(self._flavors) + 1)
            objects.Flavor(self.ctxt, name=flavorid, flavorid=flavorid,
                           memory_mb=64, vcpus=vcpus, root_gb=1,
                           ephemeral_gb=0, swap=0, is_public=True,
                           extra_specs=specs).create()
            self._flavors[key] = flavorid
        return self._flavors[key]

    # -- servers ---------------------------------------------------------------
    def wait(self, server: dict, status: str | Iterable[str],
             timeout: float = 60.0) -> dict:
        """Poll the server until its status is ``status`` (short sleeps)."""
        wanted = {status} if isinstance(status, str) else set(status)
        deadline = time.monotonic() + timeout
        while True:
            server = self.admin_api.get_server(server['id'])
            if server['status'] in wanted and \
                    (server['status'] != 'ERROR' or 'fault' in server):
                return server
            if time.monotonic() > deadline:
                self.fail('server %s is %s, not %s after %.0f s'
                          % (server['id'], server['status'], sorted(wanted),
                             timeout))
            time.sleep(0.02 if self.CAST_AS_CALL else 0.1)

    def post(self, flavor: str, host: str | None = None,
             min_count: int | None = None, name: str = 'vm') -> dict:
        body: dict[str, Any] = {'name': name, 'imageRef': self.image,
                                'flavorRef': flavor, 'networks': 'none'}
        if host is not None:
            body['host'] = host
        if min_count is not None:
            body['min_count'] = body['max_count'] = min_count
        return self.admin_api.post_server({'server': body})

    def boot(self, flavor: str, host: str | None = None) -> dict:
        """A server that must become ACTIVE (on ``host`` when given)."""
        server = self.wait(self.post(flavor, host), ('ACTIVE', 'ERROR'))
        self.assertEqual('ACTIVE', server['status'], server.get('fault'))
        if host is not None:
            self.assertEqual(host, server['OS-EXT-SRV-ATTR:host'])
        return server

    def refused(self, flavor: str, host: str | None = None) -> dict:
        """A server that must fail scheduling (No valid host)."""
        server = self.wait(self.post(flavor, host), ('ACTIVE', 'ERROR'))
        self.assertEqual('ERROR', server['status'],
                         'landed on %s' % server['OS-EXT-SRV-ATTR:host'])
        self.assertIn('No valid host', server['fault']['message'])
        return server

    def delete(self, server: dict) -> None:
        self.admin_api.delete_server(server['id'])
        self._wait_until_deleted(server)

    def host_of(self, server: dict) -> str:
        return self.admin_api.get_server(server['id'])[
            'OS-EXT-SRV-ATTR:host']

    # -- helpers ---------------------------------------------------------------
    def action(self, server: dict, body: dict, status: str) -> dict:
        self.admin_api.post_server_action(server['id'], body)
        return self.wait(server, status)

    def resize(self, server: dict, ways: int) -> dict:
        return self.action(server, {'resize': {'flavorRef':
                                               self.flavor(ways)}},
                           'VERIFY_RESIZE')

    def confirm(self, server: dict) -> dict:
        server = self.action(server, {'confirmResize': None}, 'ACTIVE')
        self._wait_for_migration_status(server, ['confirmed'])
        return server

    def revert(self, server: dict) -> dict:
        server = self.action(server, {'revertResize': None}, 'ACTIVE')
        self._wait_for_migration_status(server, ['reverted'])
        return server

    def disable(self, host: str, disabled: bool = True) -> None:
        """Disable (or enable) ``host``'s compute service: the scheduler
        skips a disabled one.
        """
        service = self.admin_api.get_services(host=host,
                                              binary='nova-compute')[0]
        self.admin_api.put_service(service['id'], {
            'status': 'disabled' if disabled else 'enabled'})

    def filter_fits(self, flavor: str, host: str) -> bool:
        """Whether the scheduler's filters pass ``host`` for a new instance
        of ``flavor`` now: the RequestSpec the API builds for a boot on
        ``host`` (microversion 2.74), through the scheduler's own
        ``HostManager`` (its HostStates, its view of the hosts' instances)
        and every enabled filter, as ``select_destinations`` runs them
        (without Placement's candidates and claim: nothing is consumed,
        no instance is expected).
        """
        obj = objects.Flavor.get_by_flavor_id(self.ctxt, flavor)
        image = {'properties': {}}
        spec = objects.RequestSpec.from_components(
            self.ctxt, uuidutils.generate_uuid(), image, obj,
            hardware.numa_get_constraints(obj,
                                          objects.ImageMeta.from_dict(image)),
            objects.InstancePCIRequests(requests=[]), {}, None, None,
            project_id='fake', user_id='fake')
        spec.requested_destination = objects.Destination(host=host,
                                                         node=host)
        spec.is_bfv = False
        manager = self.scheduler_manager.host_manager
        states = list(manager.get_host_states_by_uuids(
            self.ctxt, [self.rp_uuid(host)], spec))
        passed = [h.host for h in manager.get_filtered_hosts(
            states, spec, index=0)]
        for flt in manager.enabled_filters:
            if hasattr(flt, 'ledger'):      # RDTCacheFilter: not a placement
                flt.ledger.drop(spec.instance_uuid)
        return passed == [host]

    def placement_free(self, host: str) -> int:
        """Ways per domain Placement has free on ``host`` (what it hands
        out: its inventory minus reserved minus its allocations, as
        ``GET /resource_providers/{uuid}/usages`` gives them).
        """
        rp = self.rp_uuid(host)
        inventory = self._get_provider_inventory(rp)[RC_WAYS]
        used = self._get_provider_usages(rp).get(RC_WAYS, 0)
        return (inventory['total'] - inventory['reserved'] - used) // \
            self.host_node[host].domains

    def assert_free(self, host: str, free: int, step: str = '') -> None:
        """``host`` has exactly ``free`` ways per domain left, on each
        accounting path of the test: the scheduler's filters pass a new
        ``rdt:l3_ways`` instance asking ``free`` ways there (when > 0) and
        refuse one asking ``free + 1`` (:meth:`filter_fits`); Placement
        has ``free`` per domain unallocated (:meth:`placement_free`).
        """
        where = '%s (%s)' % (host, step) if step else host
        if self.ACCOUNTING in ('filter', 'both'):
            if free > 0:
                self.assertTrue(
                    self.filter_fits(self.flavor(free, path='filter'), host),
                    '%s, filter: %d ways should be free, %d do not fit'
                    % (where, free, free))
            self.assertFalse(
                self.filter_fits(self.flavor(free + 1, path='filter'), host),
                '%s, filter: %d ways should be free, %d fit'
                % (where, free, free + 1))
        if self.ACCOUNTING in ('placement', 'both'):
            self.assertEqual(free, self.placement_free(host),
                             '%s, Placement: ways free per domain' % where)

    def sync(self, host: str) -> None:
        """The compute's periodic ``_sync_scheduler_instance_info``."""
        self.computes[host].manager._sync_scheduler_instance_info(self.ctxt)

    def counts(self, step: str, **free: int) -> None:
        """:meth:`assert_free` for each ``host=ways``."""
        for host, ways in sorted(free.items()):
            self.assert_free(host, ways, step=step)


class RDTTestCase(RDTMixin, integrated_helpers.ProviderUsageBaseTestCase):
    """Nova's functional framework with fake-driver computes."""

    compute_driver = 'fake.MediumFakeDriver'

    def setUp(self) -> None:
        super().setUp()
        if self.CAST_AS_CALL:
            self.useFixture(nova_fixtures.CastAsCallFixture(self))
