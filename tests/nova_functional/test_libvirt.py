"""Instances pinned to one NUMA node (the NFV norm) on fakelibvirt NUMA
hosts: Nova's libvirt driver writes the domain, the real hook plans the
instance's group on the socket of the NUMA node Nova's fit gave it, and
pinned instances use all of each socket's ways (``libvirt_base``).
"""
from __future__ import annotations

from tests.nova_functional import libvirt_base
from tests.nova_functional import nodes


class PinnedTest(libvirt_base.LibvirtRDTTestCase):

    def test_pinned_instances_fill_both_sockets(self) -> None:
        """Two 9-way instances, one per socket, hold the host's 18 ways;
        a third does not get a claim; deleting one frees its socket.
        """
        self.start_hosts(nodes.GOLD, ['numa1'])
        a = self.boot(self.pinned(9), 'numa1')
        b = self.boot(self.pinned(9), 'numa1')
        (node_a,), (node_b,) = self.cells(a), self.cells(b)
        self.assertEqual({0, 1}, {node_a, node_b})
        for server, node in ((a, node_a), (b, node_b)):
            self.assertEqual({node: 9, 1 - node: 0},
                             self.planned('numa1', server))
        self.assertEqual((0, 13), self.free('numa1'))
        self.refused(self.pinned(1), 'numa1')
        self.assert_counted('full')
        self.delete(a)
        c = self.boot(self.pinned(9), 'numa1')
        self.assertEqual({node_a}, self.cells(c))
        self.assert_counted('a socket freed and taken again')
        self.assertEqual([], self.hooked.refusals)
