"""Requests in flight for the last ways of a host: exactly one lands.

RPC casts stay casts here: the API answers each boot at once and the
conductor, scheduler and compute handle both requests concurrently, so
the second is scheduled while the first is still being built (before the
compute reported it, or even claimed it).  On the filter path the
scheduler's view of the host does not hold the first instance yet; the
filter finds it in Placement, where the scheduler claimed it
(``nova_plugin.ledger``).  On the Placement path the second claim fails.
"""
from __future__ import annotations

from tests.nova_functional import base
from tests.nova_functional import nodes


class _Race:
    CAST_AS_CALL = False

    def test_two_boots_race_for_the_last_ways(self) -> None:
        self.start_hosts(nodes.GOLD, ['h1', 'h2'])
        self.boot(self.flavor(9), 'h2')        # h2 full
        self.boot(self.flavor(4), 'h1')        # 5 left on h1
        racing = [self.post(self.flavor(5)) for _ in range(2)]
        done = [self.wait(s, ('ACTIVE', 'ERROR')) for s in racing]
        self.assertEqual(['ACTIVE', 'ERROR'],
                         sorted(s['status'] for s in done),
                         [(s['status'], s['OS-EXT-SRV-ATTR:host'])
                          for s in done])
        landed = [s for s in done if s['status'] == 'ACTIVE'][0]
        self.assertEqual('h1', landed['OS-EXT-SRV-ATTR:host'])
        failed = [s for s in done if s['status'] == 'ERROR'][0]
        self.assertIn('No valid host', failed['fault']['message'])
        self.counts('after the race', h1=0, h2=0)

    def multi_create_and_a_boot_race(self) -> None:
        """A 3-instance request and a single boot for 2 hosts' 9 ways (the
        filter path: Placement's claims are atomic, whatever the request).
        """
        self.start_hosts(nodes.GOLD, ['h1', 'h2'])
        self.post(self.flavor(4), min_count=3)
        self.post(self.flavor(6))
        servers = [self.wait(s, ('ACTIVE', 'ERROR'))
                   for s in self.admin_api.get_servers()]
        self.assertEqual(4, len(servers))
        used = {'h1': 0, 'h2': 0}
        for server in servers:
            if server['status'] == 'ACTIVE':
                used[server['OS-EXT-SRV-ATTR:host']] += int(
                    server['flavor']['extra_specs']['rdt:l3_ways'])
        # 4+4 on one host, 4 (+ nothing) or 6 on the other: never more
        # than 9 on a host, and something landed
        self.assertLessEqual(max(used.values()), 9, used)
        self.assertGreater(sum(used.values()), 0)
        self.counts('after the race', h1=9 - used['h1'], h2=9 - used['h2'])


class RaceFilterTest(_Race, base.RDTTestCase):
    ACCOUNTING = 'filter'

    def test_multi_create_and_a_boot_race(self) -> None:
        self.multi_create_and_a_boot_race()


class RacePlacementTest(_Race, base.RDTTestCase):
    ACCOUNTING = 'placement'
