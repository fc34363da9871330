"""Every move keeps the count exact, at every step, before any periodic task.

Each test boots an instance with ``rdt:l3_ways``, moves it the way an
operator does (nova-api), and after each step asks Nova's scheduler what
is free on each host (:meth:`RDTTestCase.assert_free`: exactly the free
ways fit, one more does not).  The compute's periodic tasks never run
(``[DEFAULT] periodic_enable = False`` in Nova's test configuration), so
the scheduler's view of the hosts is what the computes reported as they
went: what an operator gets within ``scheduler_instance_sync_interval``
(120 s) of each step.

Two-socket Xeon Gold 6230 hosts (``nodes.GOLD``): 9 ways per socket for
VMs.  Both accounting paths are configured (aggregate metadata and
RDTCacheFilter; the provider config), the moved instance's flavor has
``rdt:l3_ways`` and ``resources:CUSTOM_RDT_*``, and every step asks each
path on its own: the filter with an ``rdt:l3_ways`` flavor (Placement
does not restrict it), Placement with a ``resources:`` flavor (the filter
passes it).  During a resize not yet confirmed or reverted a host holds
both flavors' ways, as Nova's resource tracker and Placement count them:
a revert takes the old ones back.  ``FilterOnlyTest`` and
``PlacementOnlyTest`` hold what differs when only one path is configured.
"""
from __future__ import annotations

from nova.tests.functional.api import client

from tests.nova_functional import base
from tests.nova_functional import nodes

FREE = 9    # ways per socket for VMs on a GOLD host


class MovesTest(base.RDTTestCase):
    """Both paths configured; each step asks each path on its own."""

    ACCOUNTING = 'both'

    def hosts(self, *names: str) -> None:
        self.start_hosts(nodes.GOLD, names or ('h1', 'h2'))

    # -- resize --------------------------------------------------------------------
    def test_resize_in_place(self) -> None:
        """4 -> 5 ways on the same host: 4 + 5 held until the confirm, then
        5; 5 -> 2: 5 + 2 until the revert, then 5 again.  (Today's filter:
        the instance vanishes from the host's view at the confirm, so the
        host looks empty; from a resize on, the view has the new flavor
        only, so after the revert 7 ways look free where 4 are.)
        """
        self.hosts('h1')
        vm = self.boot(self.flavor(4), 'h1')
        self.counts('booted', h1=FREE - 4)
        vm = self.resize(vm, 5)
        self.assertEqual('h1', self.host_of(vm))
        self.counts('resized in place', h1=0)
        vm = self.confirm(vm)
        self.counts('confirmed', h1=FREE - 5)
        self.sync('h1')
        self.counts('periodic sync', h1=FREE - 5)
        vm = self.resize(vm, 2)
        self.counts('resized in place again', h1=FREE - 7)
        self.revert(vm)
        self.counts('reverted', h1=FREE - 5)

    def test_resize_across_hosts(self) -> None:
        """4 -> 6 ways, h1 -> h2: h1 keeps the 4 until the confirm (a
        revert takes them back).  (Today's filter: the source's ways are
        free as soon as the instance is on h2; after a revert the
        destination keeps it at its new flavor.)
        """
        self.hosts()
        self.flags(allow_resize_to_same_host=False)
        vm = self.boot(self.flavor(4), 'h1')
        vm = self.resize(vm, 6)
        self.assertEqual('h2', self.host_of(vm))
        self.counts('resized to h2', h1=FREE - 4, h2=FREE - 6)
        vm = self.revert(vm)
        self.assertEqual('h1', self.host_of(vm))
        self.counts('reverted', h1=FREE - 4, h2=FREE)
        vm = self.resize(vm, 6)
        self.confirm(vm)
        self.counts('resized to h2, confirmed', h1=FREE, h2=FREE - 6)

    # -- cold and live migration -----------------------------------------------------
    def test_cold_migrate(self) -> None:
        self.hosts()
        vm = self.boot(self.flavor(4), 'h1')
        vm = self.action(vm, {'migrate': {'host': 'h2'}}, 'VERIFY_RESIZE')
        self.counts('migrated to h2', h1=FREE - 4, h2=FREE - 4)
        self.revert(vm)
        self.counts('reverted', h1=FREE - 4, h2=FREE)
        vm = self.action(vm, {'migrate': {'host': 'h2'}}, 'VERIFY_RESIZE')
        self.confirm(vm)
        self.assertEqual('h2', self.host_of(vm))
        self.counts('confirmed', h1=FREE, h2=FREE - 4)

    def test_live_migrate(self) -> None:
        """(Today's filter: the source keeps the instance, the destination
        does not have it, until the periodic sync.)
        """
        self.hosts()
        vm = self.boot(self.flavor(4), 'h1')
        self.admin_api.post_server_action(
            vm['id'], {'os-migrateLive': {'host': 'h2',
                                          'block_migration': 'auto'}})
        self._wait_for_migration_status(vm, ['completed'])
        vm = self._wait_for_server_parameter(
            vm, {'OS-EXT-SRV-ATTR:host': 'h2', 'status': 'ACTIVE'})
        self.counts('live migrated to h2', h1=FREE, h2=FREE - 4)

    # -- evacuate, shelve, rebuild -----------------------------------------------------
    def test_evacuate(self) -> None:
        self.hosts()
        vm = self.boot(self.flavor(4), 'h1')
        service = self.admin_api.get_services(host='h1',
                                              binary='nova-compute')[0]
        self.computes['h1'].stop()
        self.admin_api.put_service_force_down(service['id'], True)
        self.admin_api.post_server_action(vm['id'],
                                          {'evacuate': {'host': 'h2'}})
        self._wait_for_migration_status(vm, ['done'])
        self._wait_for_server_parameter(vm, {'OS-EXT-SRV-ATTR:host': 'h2'})
        self.counts('evacuated to h2', h2=FREE - 4)
        self.restart('h1')
        self.admin_api.put_service_force_down(service['id'], False)
        self.counts('h1 back', h1=FREE, h2=FREE - 4)

    def test_shelve_unshelve(self) -> None:
        self.hosts()
        vm = self.boot(self.flavor(4), 'h1')
        vm = self.action(vm, {'shelve': {}}, 'SHELVED_OFFLOADED')
        self.counts('shelved offloaded', h1=FREE, h2=FREE)
        vm = self.action(vm, {'unshelve': {'host': 'h2'}}, 'ACTIVE')
        self.assertEqual('h2', self.host_of(vm))
        self.counts('unshelved on h2', h1=FREE, h2=FREE - 4)

    def test_rebuild(self) -> None:
        self.hosts('h1')
        vm = self.boot(self.flavor(4), 'h1')
        self.action(vm, {'rebuild': {'imageRef': self.glance.image2['id']}},
                    'ACTIVE')
        self.counts('rebuilt', h1=FREE - 4)

    # -- delete during a move ----------------------------------------------------------
    def test_delete_during_a_move(self) -> None:
        """Deleted while resized (not yet confirmed), across hosts and in
        place: every way it held is free again.
        """
        self.hosts()
        self.flags(allow_resize_to_same_host=False)
        across = self.resize(self.boot(self.flavor(4), 'h1'), 6)
        self.flags(allow_resize_to_same_host=True)
        self.disable('h2')
        in_place = self.resize(self.boot(self.flavor(3), 'h1'), 2)
        self.disable('h2', False)
        self.assertEqual('h1', self.host_of(in_place))
        self.counts('both resized', h1=FREE - 4 - 3 - 2, h2=FREE - 6)
        self.delete(across)
        self.counts('deleted while resized to h2', h1=FREE - 5, h2=FREE)
        self.delete(in_place)
        self.counts('deleted while resized in place', h1=FREE, h2=FREE)


class FilterOnlyTest(base.RDTTestCase):
    ACCOUNTING = 'filter'

    def test_resize_in_place_to_the_whole_host(self) -> None:
        """The issue's report: 4 ways resized in place to 9 (the host's
        whole capacity) and confirmed; a 5-way boot must not land.
        """
        self.start_hosts(nodes.GOLD, ['h1'])
        vm = self.boot(self.flavor(4), 'h1')
        vm = self.resize(vm, 9)
        self.confirm(vm)
        self.refused(self.flavor(5), 'h1')
        self.assert_free('h1', 0, step='confirmed')


class StubsTest(base.RDTTestCase):
    """``track_instance_changes = False``: the scheduler hands the filter
    bare instance stubs it reads per request; the filter loads their
    flavors (and reuses what it loaded for a minute, only for instances
    that did not change since).
    """

    ACCOUNTING = 'filter'
    TRACK_INSTANCE_CHANGES = False

    def test_resize_in_place_confirm(self) -> None:
        """(today's filter: the 4 ways it loaded before the resize, for a
        minute.)
        """
        self.start_hosts(nodes.GOLD, ['h1'])
        vm = self.boot(self.flavor(4), 'h1')
        self.counts('booted', h1=FREE - 4)
        self.confirm(self.resize(vm, 5))
        self.counts('resized in place, confirmed', h1=FREE - 5)


class PlacementOnlyTest(base.RDTTestCase):
    ACCOUNTING = 'placement'

    def test_resize_in_place_needs_both_flavors(self) -> None:
        """Placement holds the old flavor (the migration's allocation) and
        the new one on a host resized in place: 4 -> 9 ways does not fit
        on a host with 9, and the instance keeps its 4.
        """
        self.start_hosts(nodes.GOLD, ['h1'])
        vm = self.boot(self.flavor(4), 'h1')
        # The conductor's NoValidHost reaches the API as an error here
        # (casts are calls in this test class); a real API answers 202
        # and the instance stays as it was, as it does here.
        with self.assertRaisesRegex(client.OpenStackApiException,
                                    'NoValidHost'):
            self.admin_api.post_server_action(
                vm['id'], {'resize': {'flavorRef': self.flavor(9)}})
        vm = self.wait(vm, 'ACTIVE')
        self.assertEqual('h1', self.host_of(vm))
        self.assert_free('h1', 5, step='resize refused')
