"""The extra-spec validators in the real nova-api: registered by installing
ovs-rdt (no nova.conf option), and run by Nova only for requests of compute
API microversion 2.86 and later (doc/nova.md, "Validation").
"""
from __future__ import annotations

from nova.tests.functional.api import client

from tests.nova_functional import base


class ValidatorsTest(base.RDTTestCase):

    def test_typos_are_refused_from_microversion_2_86_only(self) -> None:
        flavor = self._create_flavor(memory_mb=64, vcpu=1, disk=1)
        typo = {'extra_specs': {'rdt:l3_way': '3'}}
        # Before 2.86 Nova runs no validator: the typo is stored.
        self.admin_api.microversion = '2.85'
        self.admin_api.post_extra_spec(flavor, typo)
        self.assertEqual(
            '3', self.admin_api.get_flavor(flavor)['extra_specs']
            ['rdt:l3_way'])
        self.admin_api.microversion = '2.86'
        for specs, why in (
                (typo, 'rdt:l3_way: unknown ovs-rdt key'),
                ({'extra_specs': {'rdt:l3_ways': 'abc'}},
                 "rdt:l3_ways: 'abc' is not a whole number"),
                # ours, not Nova's int() for resources:CUSTOM_*
                ({'extra_specs': {'resources:CUSTOM_RDT_L3_WAY': '+6'}},
                 "resources:CUSTOM_RDT_L3_WAY: '+6' is not a whole number"),
                ({'extra_specs': {'resources:CUSTOM_RDT_CLOSID': '2'}},
                 "resources:CUSTOM_RDT_CLOSID: '2' must be from 0 to 1")):
            error = self.assertRaises(client.OpenStackApiException,
                                      self.admin_api.post_extra_spec, flavor,
                                      specs)
            self.assertEqual(400, error.response.status_code)
            self.assertIn(why, error.response.text)
        self.admin_api.post_extra_spec(flavor, {'extra_specs': {
            'resources:CUSTOM_RDT_L3_WAY': '6',
            'resources:CUSTOM_RDT_CLOSID': '1'}})
