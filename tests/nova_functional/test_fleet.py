"""A fleet of fake computes of three emulated kinds: Placement has each
node's cache from ``ovs-rdt provider-config``, and holds the count.

20 hosts: 12 two-socket Xeon Gold 6230 (9 ways per socket for VMs, 18 in
all), 4 of the same with a shared pool ``hp`` (7 per socket, 14), 4
one-socket Xeon D-1540 (9).  Each compute starts with the provider config
the real ``ovs-rdt provider-config`` wrote for its kind's emulated node.
The fleet fills to exactly its ways through real boots made with flavors
set through nova-api (its validators running); what does not ask for
cache is untouched; a pool flavor goes where the pool is; a flavor asking
the 0.3 way, or without its CLOSID, fails every host with one line.
"""
from __future__ import annotations

from nova.tests.functional.api import client

from tests.nova_functional import base
from tests.nova_functional import nodes
from tests.nova_functional.nodes import RC_CLOSID, RC_WAYS

FLEET = ((nodes.GOLD, 'gold', 12), (nodes.GOLD_POOL, 'pool', 4),
         (nodes.XEON_D, 'xd', 4))


class FleetTest(base.RDTTestCase):

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

    def api_flavor(self, **specs: str) -> str:
        """A flavor made through nova-api (its validators run)."""
        flavor = self._create_flavor(memory_mb=64, vcpu=1, disk=1)
        self.admin_api.post_extra_spec(flavor, {'extra_specs': specs})
        return flavor

    def test_fleet(self) -> None:
        self.placement_has_what_provider_config_wrote()
        self.what_placement_cannot_count_goes_nowhere()
        self.fill_the_fleet()

    def placement_has_what_provider_config_wrote(self) -> None:
        for kind, prefix, _ in FLEET:
            node = nodes.node(kind)
            rp = self.rp_uuid(self.fleet[prefix][0])
            inventory = self._get_provider_inventory(rp)
            for rc in (RC_WAYS, RC_CLOSID):
                wrote = node.inventory(rc)
                self.assertEqual(
                    (wrote['total'], wrote['reserved'], wrote['max_unit']),
                    (inventory[rc]['total'], inventory[rc]['reserved'],
                     inventory[rc]['max_unit']), (kind.name, rc))
            traits = self._get_provider_traits(rp)
            self.assertIn('CUSTOM_RDT_L3_CAT', traits)
            self.assertEqual(prefix == 'pool',
                             'CUSTOM_RDT_POOL_HP' in traits, prefix)
        self.assertEqual([18, 14, 9], [nodes.node(k).vm_ways * nodes.node(
            k).groups for k, _, _ in FLEET])

    def fill_the_fleet(self) -> None:
        error = self.assertRaises(
            client.OpenStackApiException, self.api_flavor,
            **{'resources:' + RC_WAYS: '+18'})
        self.assertEqual(400, error.response.status_code)
        self.assertIn("resources:CUSTOM_RDT_L3_WAY: '+18' is not a whole "
                      "number", error.response.text)
        gold = self.api_flavor(**base.specs(18))
        # one more than there are hosts with 18 ways: fails as a whole
        self.post(gold, min_count=13)
        self.assertEqual(['ERROR'] * 13,
                         [s['status'] for s in self.servers()])
        self.delete_all()
        self.post(gold, min_count=12)
        self.post(self.api_flavor(**base.specs(14)), min_count=4)
        self.post(self.api_flavor(**base.specs(9)), min_count=4)
        servers = self.servers()
        self.assertEqual(['ACTIVE'] * 20, [s['status'] for s in servers])
        # one instance per host, of its kind's size
        hosts = sorted(s['OS-EXT-SRV-ATTR:host'] for s in servers)
        self.assertEqual(sorted(sum(self.fleet.values(), [])), hosts)
        for server in servers:
            ways = server['flavor']['extra_specs']['resources:' + RC_WAYS]
            prefix = server['OS-EXT-SRV-ATTR:host'].split('-')[0]
            self.assertEqual({'gold': '18', 'pool': '14', 'xd': '9'}[prefix],
                             ways, server['OS-EXT-SRV-ATTR:host'])
        for host in sum(self.fleet.values(), []):
            self.assertEqual(0, self.free(host)[0], host)
        self.refused(self.flavor(1))
        # what asks for no cache is untouched
        self.boot(self.flavor())
        # the shared pool: only where it is configured (and no way taken)
        pooled = self.boot(self.flavor(pool='hp'))
        self.assertIn(self.host_of(pooled), self.fleet['pool'])

    def what_placement_cannot_count_goes_nowhere(self) -> None:
        for extra, why in (
                ({'rdt:l3_ways': '1'}, 'rdt:l3_ways=1 is not counted by '
                 'Placement'),
                ({'resources:' + RC_WAYS: '1'}, 'needs '
                 'resources:CUSTOM_RDT_CLOSID=1 too'),
                ({'rdt:pool': 'hp'}, 'rdt:pool needs '
                 'trait:CUSTOM_RDT_POOL_HP=required')):
            server = self.refused(self.flavor(extra=extra))
            self.assertIn('RDTCacheFilter fails every host for instance %s: '
                          'flavor ' % server['id'], self.stdlog.logger.output)
            self.assertIn(why, self.stdlog.logger.output)
        self.delete_all()

    def delete_all(self) -> None:
        for server in self.admin_api.get_servers():
            self.delete(server)
