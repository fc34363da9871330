"""Every move through Nova's API keeps Placement's count what the nodes hold.

Each test boots an instance asking Placement for cache ways and a CLOSID,
moves it the way an operator does (nova-api), and after each step checks
every host (:meth:`LibvirtRDTTestCase.assert_counted`): what Placement has
allocated to each instance is what the host's resctrl holds for it (the
real hook on the emulated node plans it when the domain starts, gives it
back when the domain is destroyed), and the only other allocation is a
move's, holding the old flavor for a revert (Nova's own design: the
source's ways come back on a revert, which the hook then plans again).

Two-socket Xeon Gold 6230 hosts (``nodes.GOLD``): 9 ways per socket for
VMs, 18 in all.  The instances are unpinned: their ways in all are spread
over both sockets (8 is 4 + 4).
"""
from __future__ import annotations

from xml.etree import ElementTree

from nova.tests.functional.api import client

from tests.nova_functional import libvirt_base
from tests.nova_functional import nodes


class MovesTest(libvirt_base.LibvirtRDTTestCase):

    def hosts(self, *names: str) -> None:
        self.start_hosts(nodes.GOLD, names or ('h1', 'h2'))

    def migration(self, server: dict) -> str:
        """The uuid of the server's move in progress."""
        migrations = self.admin_api.get_migrations(instance_uuid=server['id'])
        return max(migrations, key=lambda m: m['id'])['uuid']

    # -- resize --------------------------------------------------------------
    def test_resize_in_place_more_then_fewer(self) -> None:
        """8 -> 10 ways in place: the host holds both until the confirm (the
        migration holds 8 for a revert), 10 after; 10 -> 4: reverted, 10.
        """
        self.hosts('h1')
        vm = self.boot(self.flavor(8), 'h1')
        self.assertEqual({0: 4, 1: 4}, self.planned('h1', vm))
        self.assert_counted('booted')
        vm = self.resize(vm, 10)
        self.assertEqual('h1', self.host_of(vm))
        self.assertEqual({0: 5, 1: 5}, self.planned('h1', vm))
        self.assert_counted('resized in place', {'h1': (8, 1)})
        self.assertEqual((0, 13), self.free('h1'))   # 18 - 8 - 10, 15 - 2
        vm = self.confirm(vm)
        self.assert_counted('confirmed')
        vm = self.resize(vm, 4)
        self.assert_counted('resized in place again', {'h1': (10, 1)})
        self.revert(vm)
        self.assertEqual({0: 5, 1: 5}, self.planned('h1', vm))
        self.assert_counted('reverted')

    def test_resize_across_hosts(self) -> None:
        """8 -> 12 ways, h1 -> h2, reverted: h1 holds its 8 again; then
        8 -> 4 ways, confirmed: h1 empty.
        """
        self.hosts()
        self.flags(allow_resize_to_same_host=False)
        vm = self.boot(self.flavor(8), 'h1')
        vm = self.resize(vm, 12)
        self.assertEqual('h2', self.host_of(vm))
        self.assert_counted('resized to h2', {'h1': (8, 1)})
        vm = self.revert(vm)
        self.assertEqual('h1', self.host_of(vm))
        self.assert_counted('reverted')
        vm = self.resize(vm, 4)
        self.assert_counted('resized to h2 again', {'h1': (8, 1)})
        vm = self.confirm(vm)
        self.assertEqual({0: 2, 1: 2}, self.planned('h2', vm))
        self.assert_counted('confirmed')
        self.assertEqual(([], (18, 15)), (list(self.held('h1')),
                                          self.free('h1')))

    def test_resize_refused_by_placement_keeps_the_instance(self) -> None:
        """In place, Placement holds the old and the new flavor at once:
        8 -> 12 does not fit 18, and the instance keeps its 8.
        """
        self.hosts('h1')
        vm = self.boot(self.flavor(8), 'h1')
        # casts are calls here: the conductor's NoValidHost reaches the API
        with self.assertRaisesRegex(client.OpenStackApiException,
                                    'NoValidHost'):
            self.admin_api.post_server_action(
                vm['id'], {'resize': {'flavorRef': self.flavor(12)}})
        self.wait(vm, 'ACTIVE')
        self.assert_counted('resize refused')

    # -- cold and live migration -------------------------------------------
    def test_cold_migrate_revert_then_confirm(self) -> None:
        self.hosts()
        vm = self.boot(self.flavor(8), 'h1')
        vm = self.action(vm, {'migrate': {'host': 'h2'}}, 'VERIFY_RESIZE')
        self.assert_counted('migrated to h2', {'h1': (8, 1)})
        self.revert(vm)
        self.assert_counted('reverted')
        vm = self.action(vm, {'migrate': {'host': 'h2'}}, 'VERIFY_RESIZE')
        self.confirm(vm)
        self.assertEqual('h2', self.host_of(vm))
        self.assert_counted('confirmed')

    def test_live_migrate(self) -> None:
        self.hosts()
        vm = self.boot(self.flavor(8), 'h1')
        self.useFixture(libvirt_base.fixtures.MonkeyPatch(
            'nova.tests.fixtures.libvirt.Domain.migrateToURI3',
            self._migrate))
        self.admin_api.post_server_action(
            vm['id'], {'os-migrateLive': {'host': 'h2',
                                          'block_migration': 'auto'}})
        self._wait_for_migration_status(vm, ['completed'])
        vm = self._wait_for_server_parameter(
            vm, {'OS-EXT-SRV-ATTR:host': 'h2', 'status': 'ACTIVE'})
        self.assertEqual({0: 4, 1: 4}, self.planned('h2', vm))
        self.assert_counted('live migrated to h2')

    def _migrate(self, domain: object, destination: str, params: dict,
                 flags: int) -> None:
        """libvirt's live migration: the destination QEMU starts from the
        destination XML (the hook's ``migrate begin``, ``prepare begin``),
        then the source QEMU stops, and libvirt runs its ``release end``
        (fakelibvirt's source domain stays as Nova's tests keep it).

        Nova builds the destination XML from the source's ``XMLDesc()``,
        which has the domain's ``<metadata>`` in libvirt, not in
        fakelibvirt: it is put back from the source's definition.
        """
        source = domain._connection.hostname  # type: ignore[attr-defined]
        dest = 'h2' if source == 'h1' else 'h1'
        name = domain.name()                  # type: ignore[attr-defined]
        xml = ElementTree.fromstring(params['destination_xml'])
        if xml.find('metadata') is None:
            xml.append(ElementTree.fromstring(
                self.hooked.defined[(source, name)]).find('metadata'))
        self.computes[dest].driver._host.get_connection().createXML(
            ElementTree.tostring(xml, encoding='unicode'), 0)
        domain.complete_job()                 # type: ignore[attr-defined]
        self.hooked.hook(source, name, 'release', 'end')

    # -- evacuate, shelve -----------------------------------------------------
    def test_evacuate(self) -> None:
        """h1 fails: its node keeps the group (the host is down, not
        cleaned) and Placement the source allocation until h1's compute
        comes back and destroys the evacuated domain.
        """
        self.hosts()
        vm = self.boot(self.flavor(8), 'h1')
        service = self.admin_api.get_services(host='h1',
                                              binary='nova-compute')[0]
        self.computes['h1'].stop()
        self.admin_api.put_service_force_down(service['id'], True)
        # 2.95 and later leave an evacuated instance stopped: it started
        self.admin_api.microversion = '2.94'
        self.admin_api.post_server_action(vm['id'],
                                          {'evacuate': {'host': 'h2'}})
        self.admin_api.microversion = 'latest'
        self._wait_for_migration_status(vm, ['done'])
        self._wait_for_server_parameter(vm, {'OS-EXT-SRV-ATTR:host': 'h2',
                                             'status': 'ACTIVE'})
        self.assert_counted('evacuated to h2, h1 down')
        self.restart('h1')
        self.admin_api.put_service_force_down(service['id'], False)
        self.assert_counted('h1 back')
        self.assertEqual({}, self.held('h1'))

    def test_stop_start_shelve_unshelve(self) -> None:
        """A stopped instance's QEMU is gone, and its ways with it (the
        hook's ``release end``); Nova keeps its allocation, for the start.
        """
        self.hosts()
        vm = self.boot(self.flavor(8), 'h1')
        vm = self.action(vm, {'os-stop': None}, 'SHUTOFF')
        self.assertEqual({}, self.held('h1'))
        self.assert_counted('stopped', {'h1': (8, 1)})
        vm = self.action(vm, {'os-start': None}, 'ACTIVE')
        self.assert_counted('started')
        vm = self.action(vm, {'shelve': {}}, 'SHELVED_OFFLOADED')
        self.assert_counted('shelved offloaded')
        self.assertEqual(({}, {}), (self.held('h1'), self.held('h2')))
        vm = self.action(vm, {'unshelve': {'host': 'h2'}}, 'ACTIVE')
        self.assertEqual('h2', self.host_of(vm))
        self.assert_counted('unshelved on h2')
