"""Two ``nova-scheduler`` services race for the last ways of a host.

A deployment runs several schedulers: RabbitMQ hands the conductor's
``select_destinations`` calls to them in turn, and each has its own
``HostManager``, its own filter instances and so its own
``RDTCacheFilter`` ledger.  Here a second scheduler service runs beside
the one Nova's functional base starts, each call is sent to the next
scheduler in turn, and both requests are held after their filters ran
until both have filtered: neither scheduler can see the other's request
(not in its ledger, not yet claimed in Placement).  The hosts are
fakelibvirt computes whose domains start through the real ovs-rdt hook on
an emulated node (:mod:`tests.nova_functional.libvirt_base`).

What is proven, with two 5-way boots for a host with 5 ways left:

* Placement path: Placement's claims are atomic across schedulers, one
  boot lands, the other gets ``No valid host`` (no other host has room).
* Filter path: both schedulers pass (and pick) the host; its node's hook
  has the ways for one and refuses the other; Nova reschedules that one to
  the alternate the scheduler gave it, a host with room.  With no host
  with room there is no alternate: it ends in ERROR, retries exhausted.

In every case no way of any node is promised twice: the VM groups' masks
on each emulated node never overlap, never exceed the ways for VMs, and
each ACTIVE instance has a group on its host, a refused one none.

Both requests must pick the same host while another has room: the
scheduler weighs hosts by free RAM only, with a negative multiplier
(stacking): the host already holding an instance has less free RAM and
comes first.  RPC casts stay casts (as in ``test_concurrency``).

Worked around in Nova 34: ``nova.test.TestCase.start_service`` refuses a
second scheduler (``Duplicate start_service``): the second one is started
with ``nova.tests.fixtures.ServiceFixture`` directly.  The fake
oslo.messaging driver gives a topic message to whichever listener polls
first (``impl_fake.FakeExchange.poll``), not in turn: each call is
addressed to a scheduler's own queue (``prepare(server=...)``).
"""
from __future__ import annotations

import copy
import itertools
import threading
from typing import Any, Callable

import fixtures

from nova.scheduler import rpcapi as scheduler_rpcapi
from nova.tests import fixtures as nova_fixtures

from tests.nova_functional import libvirt_base
from tests.nova_functional import nodes

#: How long a held request waits for the other one (a broken test fails).
GATE_TIMEOUT = 30.0
RACERS = 2


class Gate:
    """Once armed, holds the first :data:`RACERS` requests after their
    filters and weighers ran (the scheduler manager's
    ``_get_sorted_hosts``), before any claim, until all have got there;
    other requests pass.  Records, for each held request, the manager that
    ran it and the hosts it sorted (the chosen one first).

    Nova 34's tests run monkey-patched by eventlet (``nova/tests/__init__``
    calls ``monkey_patch.patch()``; the RPC servers take the eventlet
    executor): ``threading``'s Barrier and Lock are then green, and native
    in threading mode: the gate works in either.
    """

    def __init__(self) -> None:
        self._barrier = threading.Barrier(RACERS, timeout=GATE_TIMEOUT)
        self._lock = threading.Lock()
        self.armed = False
        self.held: list[tuple[Any, str, list[str]]] = []
        self.broken = False

    def wrap(self, manager: Any) -> Callable[..., list]:
        real = manager._get_sorted_hosts

        def sorted_hosts(spec_obj: Any, host_states: Any,
                         index: int) -> list:
            hosts = real(spec_obj, host_states, index)
            with self._lock:
                hold = self.armed and len(self.held) < RACERS
                if hold:
                    self.held.append((manager, spec_obj.instance_uuid,
                                      [h.host for h in hosts]))
            if hold:
                try:
                    self._barrier.wait()
                except threading.BrokenBarrierError:
                    self.broken = True
                    raise
            return hosts
        return sorted_hosts


class _TwoSchedulers(libvirt_base.LibvirtRDTTestCase):
    CAST_AS_CALL = False

    def setUp(self) -> None:
        self.flags(weight_classes=['nova.scheduler.weights.ram.RAMWeigher'],
                   ram_weight_multiplier=-1.0, group='filter_scheduler')
        super().setUp()
        second = self.useFixture(nova_fixtures.ServiceFixture(
            'scheduler', host='scheduler-2')).service
        self.schedulers = [self.scheduler, second]
        self.gate = Gate()
        for service in self.schedulers:
            self.useFixture(fixtures.MockPatchObject(
                service.manager, '_get_sorted_hosts',
                self.gate.wrap(service.manager)))
        self.routed: list[str] = []
        self._route()

    def _route(self) -> None:
        """Send each ``select_destinations`` to the next scheduler in turn,
        as RabbitMQ does with a topic queue's consumers.
        """
        real = scheduler_rpcapi.SchedulerAPI.select_destinations
        servers = itertools.cycle([s.host for s in self.schedulers])
        lock = threading.Lock()
        routed = self.routed

        def select_destinations(api: Any, ctxt: Any, *args: Any,
                                **kwargs: Any) -> Any:
            with lock:
                server = next(servers)
                routed.append(server)
            addressed = copy.copy(api)
            addressed.client = api.client.prepare(server=server)
            return real(addressed, ctxt, *args, **kwargs)

        self.useFixture(fixtures.MonkeyPatch(
            'nova.scheduler.rpcapi.SchedulerAPI.select_destinations',
            select_destinations))

    # -- the race ----------------------------------------------------------
    def race(self, ways: int) -> list[dict]:
        """Two boots of ``ways``, scheduled concurrently by the two
        schedulers; their final states (ACTIVE or ERROR), in post order.
        """
        flavor = self.flavor(ways)
        self.gate.armed = True
        posted = [self.post(flavor) for _ in range(RACERS)]
        done = [self.wait(s, ('ACTIVE', 'ERROR')) for s in posted]
        self.assertFalse(self.gate.broken, 'a request waited %.0f s for the '
                         'other at the gate' % GATE_TIMEOUT)
        managers = {id(m) for m, _, _ in self.gate.held}
        self.assertEqual({id(s.manager) for s in self.schedulers}, managers,
                         'the racing requests were not scheduled by both '
                         'schedulers: %s (routed to %s)'
                         % (self.gate.held, self.routed))
        self.assertEqual(sorted(s['id'] for s in posted),
                         sorted(uuid for _, uuid, _ in self.gate.held))
        return done

    def sorted_hosts(self) -> list[list[str]]:
        """The hosts each racing request's scheduler passed, chosen first."""
        return [hosts for _, _, hosts in self.gate.held]

    # -- the nodes ---------------------------------------------------------
    def assert_no_way_twice(self, servers: list[dict], step: str) -> None:
        """On each emulated node, the VM groups' own masks (not mirroring
        the default group's) are disjoint per domain, off the default
        group's (the ways kept for the system) and hold no more than the
        ways for VMs; the groups are those of the ACTIVE ``servers`` on
        that host.
        """
        for host, emu in sorted(self.hooked.emulators.items()):
            default = libvirt_base._l3(emu.path('schemata'))
            taken = dict.fromkeys(default, 0)
            for group in self.groups(host):
                for dom, mask in libvirt_base._l3(
                        emu.path(group, 'schemata')).items():
                    if mask == default[dom]:
                        continue
                    self.assertEqual(
                        0, default[dom] & mask,
                        '%s (%s), domain %d: %s has ways %#x of the default '
                        'group' % (host, step, dom, group,
                                   default[dom] & mask))
                    self.assertEqual(
                        0, taken[dom] & mask,
                        '%s (%s), domain %d: %s has ways %#x already '
                        'promised' % (host, step, dom, group,
                                      taken[dom] & mask))
                    taken[dom] |= mask
            for dom, mask in taken.items():
                self.assertLessEqual(
                    bin(mask).count('1'), self.host_node[host].vm_ways,
                    '%s (%s), domain %d: VM groups hold %#x'
                    % (host, step, dom, mask))
            self.assertEqual(
                sorted('ovsrdt-vm-' + s['id'] for s in servers
                       if s['status'] == 'ACTIVE'
                       and s['OS-EXT-SRV-ATTR:host'] == host),
                self.groups(host), '%s (%s): VM groups' % (host, step))

    def refused_one(self, done: list[dict]) -> tuple[dict, dict, str]:
        """The hook refused exactly one of the racing instances, on h1:
        (the other one, the refused one, why).
        """
        self.assertEqual(1, len(self.hooked.refusals), self.hooked.refusals)
        host, domain, why = self.hooked.refusals[0]
        self.assertEqual('h1', host, self.hooked.refusals)
        by_name = {s['OS-EXT-SRV-ATTR:instance_name']: s for s in done}
        self.assertIn(domain, by_name, self.hooked.refusals)
        refused = by_name.pop(domain)
        (other,) = by_name.values()
        return other, refused, why

    def one_landed_on_h1(self, done: list[dict]) -> tuple[dict, dict]:
        """One racing instance is ACTIVE on h1, the other in ERROR: (the
        one that landed, the other).
        """
        self.assertEqual(['ACTIVE', 'ERROR'],
                         sorted(s['status'] for s in done),
                         [(s['status'], s['OS-EXT-SRV-ATTR:host'])
                          for s in done])
        (won,) = [s for s in done if s['status'] == 'ACTIVE']
        (lost,) = [s for s in done if s['status'] == 'ERROR']
        self.assertEqual('h1', won['OS-EXT-SRV-ATTR:host'])
        return won, lost

    def counts_everywhere(self, step: str, **free: int) -> None:
        """:meth:`counts` through each scheduler's filters."""
        for service in self.schedulers:
            self.scheduler_service = service
            self.counts('%s, %s' % (step, service.host), **free)


class PlacementTwoSchedulersTest(_TwoSchedulers):
    ACCOUNTING = 'placement'

    def test_one_claim_wins(self) -> None:
        """Placement hands the 10 ways (5 x 2 domains) left on h1 to one
        claim: the other request has no other candidate (h2 is full).
        """
        self.start_hosts(nodes.GOLD, ['h1', 'h2'])
        full = self.boot(self.flavor(9), 'h2')
        first = self.boot(self.flavor(4), 'h1')     # 5 left on h1
        done = self.race(5)
        self.assertEqual([['h1'], ['h1']], self.sorted_hosts())
        won, lost = self.one_landed_on_h1(done)
        self.assertIn('No valid host', lost['fault']['message'])
        self.assertEqual({}, self._get_allocations_by_server_uuid(lost['id']))
        self.assertEqual({0: 5, 1: 5}, self.planned('h1', won))
        self.assertEqual([], self.hooked.refusals)
        self.assert_no_way_twice([full, first] + done, 'after the race')
        self.counts('after the race', h1=0, h2=0)


class FilterTwoSchedulersTest(_TwoSchedulers):
    ACCOUNTING = 'filter'

    def test_hook_refuses_and_nova_reschedules(self) -> None:
        """Both schedulers pass h1 (5 left) and pick it (stacking), h2 (9
        left) their alternate; h1's hook refuses the second start, Nova
        builds it on h2.
        """
        self.start_hosts(nodes.GOLD, ['h1', 'h2'])
        first = self.boot(self.flavor(4), 'h1')     # 5 left on h1
        done = self.race(5)
        self.assertEqual([['h1', 'h2'], ['h1', 'h2']], self.sorted_hosts())
        self.assertEqual(['ACTIVE', 'ACTIVE'], [s['status'] for s in done],
                         [s.get('fault') for s in done])
        won, moved, why = self.refused_one(done)
        self.assertIn('needs 5 ways', why)
        self.assertEqual('h1', won['OS-EXT-SRV-ATTR:host'])
        self.assertEqual('h2', moved['OS-EXT-SRV-ATTR:host'])
        self.assertEqual({0: 5, 1: 5}, self.planned('h1', won))
        self.assertEqual({0: 5, 1: 5}, self.planned('h2', moved))
        self.assertEqual(
            {self.rp_uuid('h2')},
            set(self._get_allocations_by_server_uuid(moved['id'])),
            'the rescheduled instance is allocated on h2 only')
        self.assert_no_way_twice([first] + done, 'after the race')
        self.counts_everywhere('after the race', h1=0, h2=4)

    def test_hook_refuses_and_no_host_is_left(self) -> None:
        """h2 is full: the filter refuses it, the schedulers give no
        alternate; h1's hook refuses the second start and Nova has no host
        to retry on.
        """
        self.start_hosts(nodes.GOLD, ['h1', 'h2'])
        full = self.boot(self.flavor(9), 'h2')
        first = self.boot(self.flavor(4), 'h1')     # 5 left on h1
        done = self.race(5)
        self.assertEqual([['h1'], ['h1']], self.sorted_hosts())
        self.assertEqual(list(self.one_landed_on_h1(done)),
                         list(self.refused_one(done)[:2]))
        self.assertIn('needs 5 ways', self.refused_one(done)[2])
        won, lost = self.one_landed_on_h1(done)
        # conductor's build_instances: a reschedule with no alternate left
        self.assertIn('Exceeded maximum number of retries. Exhausted all '
                      'hosts available for retrying build failures',
                      lost['fault']['message'])
        self.assertEqual({}, self._get_allocations_by_server_uuid(lost['id']))
        self.assertEqual({0: 5, 1: 5}, self.planned('h1', won))
        self.assert_no_way_twice([full, first] + done, 'after the race')
        self.counts_everywhere('after the race', h1=0, h2=0)
