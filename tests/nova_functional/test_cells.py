"""Two cells: Placement counts across them, and a cross-cell resize is
counted by the move's own allocation, as every other move.

A Gold 6230 (18 ways in all for VMs, 15 CLOSIDs) in each cell, fake-driver
computes; the filter reads no cell database (it reads none at all), so the
cells change nothing for it; a cross-cell resize clones the instance (the
same uuid) into the target cell, and Placement holds the source's old
flavor until the confirm, gives it back at a revert.
"""
from __future__ import annotations

from nova.policies import base as base_policies
from nova.policies import servers as servers_policies

from tests.nova_functional import base
from tests.nova_functional import nodes


class CellsTest(base.RDTTestCase):
    NUMBER_OF_CELLS = 2

    def setUp(self) -> None:
        self.flags(weight_classes=[
            'nova.scheduler.weights.cross_cell.CrossCellWeigher'],
            group='filter_scheduler')
        super().setUp()
        self.policy.set_rules({servers_policies.CROSS_CELL_RESIZE:
                               base_policies.RULE_ADMIN_API},
                              overwrite=False)
        self.flags(allow_resize_to_same_host=False)
        self.start_hosts(nodes.GOLD, ['host1'], cell='cell1')
        self.start_hosts(nodes.GOLD, ['host2'], cell='cell2')

    def test_both_cells_fill_exactly(self) -> None:
        self.post(self.flavor(6), min_count=6)
        servers = [self.wait(s, ('ACTIVE', 'ERROR'))
                   for s in self.admin_api.get_servers()]
        self.assertEqual(['ACTIVE'] * 6, [s['status'] for s in servers])
        self.assertEqual([(0, 12), (0, 12)],
                         [self.free(h) for h in ('host1', 'host2')])
        self.refused(self.flavor(1))

    def test_cross_cell_resize(self) -> None:
        vm = self.boot(self.flavor(8), 'host1')
        vm = self.resize(vm, 12)
        self.assertEqual('host2', self.host_of(vm))
        # the source holds the old flavor for a revert (the migration's
        # allocation), the target the new one (the instance's)
        self.assertEqual([(8, 1), (12, 1)],
                         [self.usage(h) for h in ('host1', 'host2')])
        migration = self.get_migration_uuid_for_instance(vm['id'])
        self.assertEqual(
            {self.rp_uuid('host1')},
            set(self._get_allocations_by_server_uuid(migration)))
        vm = self.revert(vm)
        self.assertEqual('host1', self.host_of(vm))
        self.assertEqual([(8, 1), (0, 0)],
                         [self.usage(h) for h in ('host1', 'host2')])
        self.confirm(self.resize(vm, 4))
        self.assertEqual([(0, 0), (4, 1)],
                         [self.usage(h) for h in ('host1', 'host2')])
