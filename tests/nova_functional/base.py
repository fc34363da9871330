"""ovs-rdt inside Nova's own functional framework.

:class:`RDTTestCase` is Nova's ``ProviderUsageBaseTestCase`` (real nova-api,
conductor and scheduler, the real Placement service in-process from
``openstack-placement``, SQLite cell databases) with fake-driver computes
started with the provider config ``ovs-rdt provider-config`` wrote for their
emulated node (:mod:`tests.nova_functional.nodes`) and ``RDTCacheFilter`` in
the scheduler's ``enabled_filters``.  Flavors ask Placement for the cache
(``resources:CUSTOM_RDT_L3_WAY``, ``resources:CUSTOM_RDT_CLOSID``, a pool's
trait): Nova claims it.  :mod:`tests.nova_functional.libvirt_base` puts the
same on libvirt-driver computes whose domains start through the real hook.

The tox env runs Nova in native threads (``OS_NOVA_DISABLE_EVENTLET_PATCHING``,
as Nova 34's services run by default: ``nova/monkey_patch.py``).

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

from nova import context as nova_context
from nova import objects
from nova.tests import fixtures as nova_fixtures
from nova.tests.functional import integrated_helpers

from tests.nova_functional import nodes
from tests.nova_functional.nodes import RC_CLOSID, RC_WAYS

FILTER = 'nova_plugin.filters.RDTCacheFilter'
#: What Nova's scheduler runs (its defaults, then NUMA, then ours).
NOVA_FILTERS = ['ComputeFilter', 'ComputeCapabilitiesFilter',
                'ImagePropertiesFilter', 'ServerGroupAntiAffinityFilter',
                'ServerGroupAffinityFilter', 'NUMATopologyFilter']


def api_paste() -> str:
    """Where the nova wheel put api-paste.ini (``<data>/etc/nova``)."""
    path = os.path.join(sysconfig.get_path('data'), 'etc', 'nova',
                        'api-paste.ini')
    if not os.path.exists(path):
        raise RuntimeError('api-paste.ini is not at %s: is nova installed '
                           'from its wheel in this environment?' % path)
    return path


def specs(ways: int | None = None, pool: str | None = None
          ) -> dict[str, str]:
    """The extra specs of a flavor asking ``ways`` in all (Placement counts
    them), or joining ``pool`` (with the pool's trait).
    """
    out = {}
    if ways is not None:
        out = {'resources:' + RC_WAYS: str(ways),
               'resources:' + RC_CLOSID: '1'}
    if pool is not None:
        out.update({'rdt:pool': pool,
                    'trait:CUSTOM_RDT_POOL_%s' % pool.upper(): 'required'})
    return out


class RDTMixin:
    """ovs-rdt's filter, provider configs and helpers, on one of Nova's
    functional test bases (:class:`RDTTestCase`, and
    ``tests.nova_functional.libvirt_base``).
    """

    #: RPC casts as calls: an API call returns when its work is done.
    CAST_AS_CALL = True
    #: RDTCacheFilter among the scheduler's filters (the benchmark's Nova
    #: alone runs without).
    RDT_FILTER = True

    def setUp(self) -> None:
        self.flags(api_paste_config=api_paste(), group='wsgi')
        self.flags(available_filters=['nova.scheduler.filters.all_filters',
                                      FILTER],
                   enabled_filters=NOVA_FILTERS + (
                       ['RDTCacheFilter'] if self.RDT_FILTER else []),
                   group='filter_scheduler')
        self.flags(allow_resize_to_same_host=True)
        self.flags(instances=-1, cores=-1, ram=-1, group='quota')
        super().setUp()  # type: ignore[misc]
        self.ctxt = nova_context.get_admin_context()
        self._provider_dirs = self.useFixture(fixtures.TempDir()).path
        self._flavors: dict[tuple, str] = {}
        self.host_node: dict[str, nodes.Node] = {}
        self._rp_uuids: dict[str, str] = {}
        self.image = self.glance.image1['id']

    def _clear_attrs(self) -> None:
        """Keep the attributes (Nova's version deletes them; pytest reads
        them after cleanup).
        """

    # -- hosts -----------------------------------------------------------------
    def start_hosts(self, kind: nodes.Kind, names: Iterable[str],
                    cell: str | None = None) -> None:
        """Computes of ``kind``, each with its provider config (in ``cell``
        when given).
        """
        node = nodes.node(kind)
        for name in names:
            folder = os.path.join(self._provider_dirs, name)
            os.makedirs(folder)
            with open(os.path.join(folder, 'ovs-rdt.yaml'), 'w',
                      encoding='utf-8') as fh:
                fh.write(node.provider_yaml)
            self.flags(provider_config_location=folder, group='compute')
            self.start_one(name, node, cell)
            self.host_node[name] = node

    def start_one(self, name: str, node: nodes.Node,
                  cell: str | None) -> None:
        """Start compute ``name`` (of ``node``'s kind)."""
        self._start_compute(name, cell_name=cell)

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
               extra: dict[str, str] | None = None, vcpus: int = 1) -> str:
        """A flavor asking ``ways`` in all (or joining ``pool``), made
        once, straight in the API database (nova-api's flavor calls and
        the validators: test_fleet).
        """
        extra_specs = dict(extra or {})
        extra_specs.update(specs(ways, pool))
        key = (tuple(sorted(extra_specs.items())), vcpus)
        if key not in self._flavors:
            flavorid = 'rdt-%d' % (len(self._flavors) + 1)
            objects.Flavor(self.ctxt, name=flavorid, flavorid=flavorid,
                           memory_mb=64, vcpus=vcpus, root_gb=1,
                           ephemeral_gb=0, swap=0, is_public=True,
                           extra_specs=extra_specs).create()
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

    def action(self, server: dict, body: dict, status: str) -> dict:
        self.admin_api.post_server_action(server['id'], body)
        return self.wait(server, status)

    def resize(self, server: dict, ways: int, **kwargs: Any) -> dict:
        return self.action(server, {'resize': {'flavorRef': self.flavor(
            ways, **kwargs)}}, 'VERIFY_RESIZE')

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

    # -- Placement -------------------------------------------------------------
    def usage(self, host: str) -> tuple[int, int]:
        """(ways, CLOSIDs) Placement has allocated on ``host``."""
        used = self._get_provider_usages(self.rp_uuid(host))
        return used.get(RC_WAYS, 0), used.get(RC_CLOSID, 0)

    def free(self, host: str) -> tuple[int, int]:
        """(ways, CLOSIDs) Placement still hands out on ``host``."""
        inventory = self._get_provider_inventory(self.rp_uuid(host))
        ways, closids = self.usage(host)
        return tuple(inventory[rc]['total'] - inventory[rc]['reserved'] - used
                     for rc, used in ((RC_WAYS, ways), (RC_CLOSID, closids)))


class RDTTestCase(RDTMixin, integrated_helpers.ProviderUsageBaseTestCase):
    """Nova's functional framework with fake-driver computes."""

    compute_driver = 'fake.MediumFakeDriver'

    def setUp(self) -> None:
        super().setUp()
        if self.CAST_AS_CALL:
            self.useFixture(nova_fixtures.CastAsCallFixture(self))
