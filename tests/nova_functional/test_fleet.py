"""A fleet of fake computes of three emulated kinds, both paths configured.

20 hosts: 12 two-socket Xeon Gold 6230 (9 ways per socket for VMs), 4 of
the same with a shared pool ``hp`` (7 per socket), 4 one-socket Xeon
D-1540 (9).  Each compute starts with the provider config the real
``ovs-rdt provider-config`` wrote for its kind's emulated node, and its
kind's aggregate carries the capacity read from the same node.  The
fleet fills to exactly its ways through real boots, on both paths, and
what does not ask for cache is untouched.
"""
from __future__ import annotations

from nova.tests.functional.api import client

from tests.nova_functional import base
from tests.nova_functional import nodes

FLEET = ((nodes.GOLD, 'gold', 12), (nodes.GOLD_POOL, 'pool', 4),
         (nodes.XEON_D, 'xd', 4))


class FleetTest(base.RDTTestCase):
    ACCOUNTING = 'both'

    def setUp(self) -> None:
        super().setUp()
        self.fleet: dict[str, list[str]] = {}
        for kind, prefix, count in FLEET:
            names = ['%s-%02d' % (prefix, i) for i in range(count)]
            self.start_hosts(kind, names)
            self.fleet[prefix] = names

    def servers(self) -> list[dict]:
        return [self.wait(s, ('ACTIVE', 'ERROR'))
                for s in self.admin_api.get_servers()]

    def test_fleet(self) -> None:
        self.placement_has_what_provider_config_wrote()
        self.fill_the_fleet()

    def placement_has_what_provider_config_wrote(self) -> None:
        for kind, prefix, _ in FLEET:
            node = nodes.node(kind)
            rp = self.rp_uuid(self.fleet[prefix][0])
            inventory = self._get_provider_inventory(rp)
            for rc in (base.RC_WAYS, base.RC_CLOSID):
                wrote = node.inventory(rc)
                self.assertEqual(
                    (wrote['total'], wrote['reserved'], wrote['max_unit']),
                    (inventory[rc]['total'], inventory[rc]['reserved'],
                     inventory[rc]['max_unit']), (kind.name, rc))
            self.assertIn('CUSTOM_RDT_L3_CAT', self._get_provider_traits(rp))

    def fill_the_fleet(self) -> None:
        # nova-api runs the rdt validators (entry point
        # nova.api.extra_spec_validators) on flavor extra specs
        flavor = self._create_flavor(memory_mb=64, vcpu=1, disk=1)
        error = self.assertRaises(
            client.OpenStackApiException, self.admin_api.post_extra_spec,
            flavor, {'extra_specs': {'rdt:l3_ways': '+3'}})
        self.assertEqual(400, error.response.status_code)
        self.assertIn("rdt:l3_ways: '+3' is not a whole number",
                      error.response.text)
        self.admin_api.post_extra_spec(
            flavor, {'extra_specs': {'rdt:l3_ways': '9',
                                     'resources:CUSTOM_RDT_L3_WAY': '18',
                                     'resources:CUSTOM_RDT_CLOSID': '1'}})
        gold = flavor
        # one more than there are hosts with 9 ways on both sockets: the
        # request fails as a whole
        self.post(gold, min_count=13)
        self.assertEqual(['ERROR'] * 13,
                         [s['status'] for s in self.servers()])
        for server in self.admin_api.get_servers():
            self.delete(server)
        self.post(gold, min_count=12)
        self.post(self.flavor(9, domains=1), min_count=4)
        self.post(self.flavor(7), min_count=4)
        servers = self.servers()
        self.assertEqual(['ACTIVE'] * 20, [s['status'] for s in servers])
        # one instance per host, of its kind's flavor
        hosts = sorted(s['OS-EXT-SRV-ATTR:host'] for s in servers)
        self.assertEqual(sorted(sum(self.fleet.values(), [])), hosts)
        for server in servers:
            ways = server['flavor']['extra_specs']['rdt:l3_ways']
            prefix = server['OS-EXT-SRV-ATTR:host'].split('-')[0]
            self.assertEqual({'gold': '9', 'pool': '7', 'xd': '9'}[prefix],
                             ways, server['OS-EXT-SRV-ATTR:host'])
        # full on both paths, every host
        for kind, prefix, _ in FLEET:
            for host in self.fleet[prefix]:
                self.assert_free(host, 0)
        self.refused(self.flavor(1))
        # what asks for no cache is untouched by both
        self.boot(self.flavor())
        # the shared pool: only where it is configured (and no way taken)
        pooled = self.boot(self.flavor(pool='hp'))
        self.assertIn(self.host_of(pooled), self.fleet['pool'])
