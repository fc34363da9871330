"""``python3 -m nova_plugin.upgrade`` against the real nova-api.

A 0.3 cloud: a flavor asking ``rdt:l3_ways`` alone (the filter counted it),
one pinned, a 0.3 Placement-path flavor (``rdt:l3_ways`` beside
``resources:``), a pool flavor without its trait, and a server running
with the first one's specs (scheduled before the upgrade).  The command
lists what to set, talking to nova-api over HTTP through keystoneauth1 (as
with an operator's credentials); once the operator did it and resized the
server to a flavor with the new specs, it finds nothing left to change.
"""
from __future__ import annotations

import io
import re
import shlex

import fixtures
from keystoneauth1 import adapter
from keystoneauth1 import noauth
from keystoneauth1 import session

from nova_plugin import upgrade
from tests.nova_functional import base
from tests.nova_functional import nodes


class UpgradeTest(base.RDTTestCase):

    def compute_api(self) -> adapter.Adapter:
        """An admin's keystoneauth1 Adapter for the compute API (the test
        API's stand-in for keystone: its user and roles headers).
        """
        sess = session.Session(
            auth=noauth.NoAuth(endpoint=self.api_fixture.base_url),
            additional_headers={
                'X-Auth-User': 'admin', 'X-User-Id': 'admin',
                'X-Auth-Project-Id': self.admin_api.project_id,
                'X-Roles': 'reader,member,admin'})
        return adapter.Adapter(sess, service_type='compute')

    def run_upgrade(self) -> tuple[int, str]:
        out = io.StringIO()
        return upgrade.report(self.compute_api(), 2, out), out.getvalue()

    def test_lists_then_nothing_left(self) -> None:
        self.start_hosts(nodes.GOLD_POOL, ['h1'])
        # 0.3's filter let it through: this server predates 0.4
        old = self.flavor(extra={'rdt:l3_ways': '3'})
        with fixtures.MockPatch('nova_plugin.filters.why_not',
                                return_value=None):
            server = self.boot(old, 'h1')
        self.flavor(extra={'rdt:l3_ways': '2', 'hw:cpu_policy': 'dedicated'})
        self.flavor(extra={'rdt:l3_ways': '3',
                           'resources:CUSTOM_RDT_L3_WAY': '6',
                           'resources:CUSTOM_RDT_CLOSID': '1'})
        self.flavor(extra={'rdt:pool': 'hp'})
        self.flavor(4)                  # as 0.4 wants it: not listed
        self.refused(old)               # RDTCacheFilter: not counted
        rc, text = self.run_upgrade()
        self.assertEqual(3, rc, text)
        flavors = re.findall(r'^flavor (\S+) ', text, re.M)
        self.assertEqual(['rdt-1', 'rdt-2', 'rdt-3', 'rdt-4'], flavors, text)
        self.assertIn(
            'flavor rdt-1 (id rdt-1): 3 way(s) x 2 cache groups (no NUMA '
            'topology: it spans every socket of its host; --cache-groups '
            'for other hosts)\n'
            '  openstack flavor set --property resources:CUSTOM_RDT_CLOSID=1 '
            '--property resources:CUSTOM_RDT_L3_WAY=6 rdt-1\n'
            '  openstack flavor unset --property rdt:l3_ways rdt-1\n', text)
        self.assertIn('resources:CUSTOM_RDT_L3_WAY=2 ', text)   # pinned
        self.assertIn('--property trait:CUSTOM_RDT_POOL_HP=required rdt-4',
                      text)
        self.assertIn('  server %s (vm) on h1: flavor rdt-1\n'
                      % server['id'], text)
        # the operator runs what it printed, through nova-api
        for line in text.splitlines():
            words = shlex.split(line)
            if words[:2] != ['openstack', 'flavor']:
                continue
            flavor = words[-1]
            pairs = words[3:-1:2] and [w for w in words[3:-1]
                                       if w != '--property']
            if words[2] == 'set':
                self.admin_api.post_extra_spec(flavor, {'extra_specs': dict(
                    pair.split('=', 1) for pair in pairs)})
            else:
                for key in pairs:
                    self.admin_api.api_delete(
                        '/flavors/%s/os-extra_specs/%s' % (flavor, key))
        # the server keeps its copy of rdt-1's old specs until resized
        rc, text = self.run_upgrade()
        self.assertEqual(3, rc, text)
        self.assertEqual([], re.findall(r'^flavor ', text, re.M), text)
        self.assertIn('server %s' % server['id'], text)
        self.confirm(self.resize(server, 6))
        self.assertEqual((14 - 6, 14 - 1), self.free('h1'))
        self.assertEqual((0, 'nothing to change: every flavor and server '
                          'asks Placement for its cache\n'),
                         self.run_upgrade())
