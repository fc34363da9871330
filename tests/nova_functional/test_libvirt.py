"""NUMA hosts on fakelibvirt: Nova's libvirt driver writes the domain, the
real hook plans the instance's group on the emulated node, and the plan
is what the filter let through: the ways the flavor asks, on the L3 domain
of the NUMA node Nova's fit gave the instance (``libvirt_base``).
"""
from __future__ import annotations

from tests.nova_functional import libvirt_base
from tests.nova_functional import nodes


class PinnedTest(libvirt_base.LibvirtRDTTestCase):
    ACCOUNTING = 'both'

    def test_pinned_instances_fill_each_node(self) -> None:
        self.start_hosts(nodes.GOLD, ['numa1'])
        a = self.boot(self.pinned(5), 'numa1')
        b = self.boot(self.pinned(5), 'numa1')
        node_a, node_b = self.cells(a), self.cells(b)
        # a 5-way instance does not fit the 4 left on node a: Nova's fit
        # gave the second one the other node, where the hook took its ways
        self.assertEqual(1, len(node_a | node_b) - 1, (node_a, node_b))
        for server, (node,) in ((a, node_a), (b, node_b)):
            self.assertEqual({node: 5, 1 - node: 0},
                             self.planned('numa1', server))
        # 4 left on each node: the filter refuses 5 (Placement alone, with
        # 8 of its 18 ways free, would not: PlacementPinnedTest)
        self.refused(self.pinned(5), 'numa1')
        c = self.boot(self.pinned(4), 'numa1')
        (node_c,) = self.cells(c)
        self.assertEqual({node_c: 4, 1 - node_c: 0},
                         self.planned('numa1', c))
        # node_c is full: an unpinned instance (ways on both) does not fit
        self.refused(self.flavor(1), 'numa1')
        self.assertEqual(sorted('ovsrdt-vm-' + s['id'] for s in (a, b, c)),
                         self.groups('numa1'))
        self.delete(a)
        # the hook gave a's ways back when its domain was destroyed, and
        # the filter counts them free: a 5-way instance fits again
        self.assertNotIn('ovsrdt-vm-' + a['id'], self.groups('numa1'))
        d = self.boot(self.pinned(5), 'numa1')
        self.assertEqual(node_a, self.cells(d))
        self.assertEqual([], self.hooked.refusals)


class PlacementPinnedTest(libvirt_base.LibvirtRDTTestCase):
    ACCOUNTING = 'placement'

    def test_placement_cannot_tell_the_nodes_apart(self) -> None:
        """Placement sums the ways of both sockets: a third 5-way pinned
        instance gets an allocation, Nova's fit puts it on a node with 4
        left, the node's hook refuses it, and Nova reschedules it (no other
        host: it fails).
        """
        self.start_hosts(nodes.GOLD, ['numa1'])
        self.boot(self.pinned(5), 'numa1')
        self.boot(self.pinned(5), 'numa1')
        server = self.wait(self.post(self.pinned(5), 'numa1'), 'ERROR')
        self.assertEqual(1, len(self.hooked.refusals), self.hooked.refusals)
        host, _, why = self.hooked.refusals[0]
        self.assertEqual('numa1', host)
        self.assertIn('way', why)
        self.assertIn('fault', server)
