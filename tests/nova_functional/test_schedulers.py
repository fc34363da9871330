"""Two ``nova-scheduler`` services, native threads, race for the last cache.

A deployment runs several schedulers (``[scheduler] workers`` defaults to
the CPUs, HA runs several hosts): RabbitMQ hands the conductor's
``select_destinations`` calls to them in turn, and each has its own
``HostManager`` and filters.  Here a second scheduler service runs beside
the one Nova's functional base starts, each call is sent to the next
scheduler in turn, and a burst of boots is held after the filters and
weighers ran (``SchedulerManager._get_sorted_hosts``), before any claim,
until every boot of the burst got there: all are decided on the same view
of the hosts, then all claim at once.  Nova runs in native threads
(``OS_NOVA_DISABLE_EVENTLET_PATCHING``: each scheduler's RPC server handles
its calls in a thread pool, as Nova 34's services do by default).

The hosts are fakelibvirt computes whose domains start through the real
ovs-rdt hook on an emulated node (:mod:`tests.nova_functional.libvirt_base`),
the scheduler stacks (free RAM, negative multiplier: the fullest host
first), so the burst goes for the same host's last cache.  What is proven:

* the last ways (unpinned instances, ways on both sockets): Placement's
  claims, atomic across the schedulers, admit exactly what each host has;
  the others get ``No valid host``; no node refuses anything;
* the last CLOSIDs (hosts with 4): the same, CLOSIDs running out first;
* a socket's fit, which Placement does not see (instances pinned to one
  NUMA node, the NFV norm): Nova's NUMA fit gives them the socket with the
  most free CPUs, whose ways are taken; the node's hook refuses each one
  Placement admitted there (the test counts them: 3), and Nova reschedules
  each to its alternate host, where it runs.

After each burst no way of any node is promised twice (the VM groups'
masks never overlap), and Placement's allocation of each instance is what
its node holds.

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
from nova import utils

from tests.nova_functional import libvirt_base
from tests.nova_functional import nodes

#: How long a held request waits for the others (a broken test fails).
GATE_TIMEOUT = 60.0


class Gate:
    """Once armed for ``n`` requests, holds the first ``n`` after their
    filters and weighers ran, before any claim, until all have got there;
    other requests pass.  Records, for each held request, the manager that
    ran it and the hosts it sorted (the chosen one first).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._barrier: threading.Barrier | None = None
        self.held: list[tuple[Any, str, list[str]]] = []
        self.broken = False

    def arm(self, n: int) -> None:
        self._barrier = threading.Barrier(n, timeout=GATE_TIMEOUT)
        self.held = []

    def wrap(self, manager: Any) -> Callable[..., list]:
        real = manager._get_sorted_hosts

        def sorted_hosts(spec_obj: Any, host_states: Any,
                         index: int) -> list:
            hosts = real(spec_obj, host_states, index)
            with self._lock:
                barrier = self._barrier
                hold = barrier is not None and \
                    len(self.held) < barrier.parties
                if hold:
                    self.held.append((manager, spec_obj.instance_uuid,
                                      [h.host for h in hosts]))
            if hold:
                assert barrier is not None
                try:
                    barrier.wait()
                except threading.BrokenBarrierError:
                    self.broken = True
                    raise
            return hosts
        return sorted_hosts


class TwoSchedulersTest(libvirt_base.LibvirtRDTTestCase):
    CAST_AS_CALL = False

    def setUp(self) -> None:
        self.flags(weight_classes=['nova.scheduler.weights.ram.RAMWeigher'],
                   ram_weight_multiplier=-1.0, group='filter_scheduler')
        super().setUp()
        self.assertTrue(utils.concurrency_mode_threading(),
                        'Nova runs under eventlet here: set '
                        'OS_NOVA_DISABLE_EVENTLET_PATCHING=1 (tox does)')
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

    # -- the burst ---------------------------------------------------------
    def burst(self, flavor: str, n: int) -> list[dict]:
        """``n`` boots of ``flavor`` scheduled at once by the two
        schedulers; their final states (ACTIVE or ERROR).
        """
        self.gate.arm(n)
        posted = [self.post(flavor, name='burst-%d' % i) for i in range(n)]
        done = [self.wait(s, ('ACTIVE', 'ERROR'), timeout=120)
                for s in posted]
        self.assertFalse(self.gate.broken, 'a request waited %.0f s for the '
                         'others at the gate' % GATE_TIMEOUT)
        self.assertEqual(sorted(s['id'] for s in posted),
                         sorted(uuid for _, uuid, _ in self.gate.held),
                         'every boot of the burst was held')
        managers = {id(m) for m, _, _ in self.gate.held}
        self.assertEqual({id(s.manager) for s in self.schedulers}, managers,
                         'the burst was not scheduled by both schedulers: '
                         '%s (routed to %s)' % (self.gate.held, self.routed))
        return done

    def outcome(self, done: list[dict]) -> dict[str, int]:
        """``host`` -> instances ACTIVE there, ``'No valid host'`` -> the
        others' count (each with no allocation left).
        """
        out: dict[str, int] = {}
        for server in done:
            if server['status'] == 'ACTIVE':
                key = server['OS-EXT-SRV-ATTR:host']
            else:
                self.assertIn('No valid host', server['fault']['message'])
                self.assertEqual(
                    {}, self._get_allocations_by_server_uuid(server['id']))
                key = 'No valid host'
            out[key] = out.get(key, 0) + 1
        return out

    # -- the nodes ---------------------------------------------------------
    def assert_no_way_twice(self, step: str) -> None:
        """On each emulated node the VM groups' own masks (not mirroring
        the default group's) are disjoint per domain, off the default
        group's (the ways kept for the system) and hold no more than the
        ways for VMs.
        """
        for host, emu in sorted(self.hooked.emulators.items()):
            default = libvirt_base._l3(emu.path('schemata'))
            taken = dict.fromkeys(default, 0)
            for group in sorted(self.held(host)):
                for dom, mask in libvirt_base._l3(emu.path(
                        libvirt_base.GROUP_PREFIX + group,
                        'schemata')).items():
                    if mask == default[dom]:
                        continue
                    self.assertEqual(0, (default[dom] | taken[dom]) & mask,
                                     '%s (%s), domain %d: %s has ways '
                                     'already promised' % (host, step, dom,
                                                           group))
                    taken[dom] |= mask
            for dom, mask in taken.items():
                self.assertLessEqual(
                    bin(mask).count('1'), self.host_node[host].vm_ways,
                    '%s (%s), domain %d' % (host, step, dom))

    def settled(self, step: str) -> None:
        self.assert_no_way_twice(step)
        self.assert_counted(step)

    # -- the tests ---------------------------------------------------------
    def test_the_last_ways(self) -> None:
        """h1 and h2 have 4 of their 18 ways left (2 per socket); five
        unpinned 2-way boots (1 + 1): two land on each, one gets No valid
        host, no node refuses.
        """
        self.start_hosts(nodes.GOLD, ['h1', 'h2'])
        for host in ('h1', 'h2'):
            self.boot(self.flavor(14), host)
        done = self.burst(self.flavor(2), 5)
        self.assertEqual({'h1': 2, 'h2': 2, 'No valid host': 1},
                         self.outcome(done))
        self.assertEqual([], self.hooked.refusals)
        self.assertEqual([(0, 12), (0, 12)],
                         [self.free(h) for h in ('h1', 'h2')])
        self.settled('after the burst')

    def test_the_last_closids(self) -> None:
        """Hosts with 4 CLOSIDs (3 for VMs), one VM on each: six 2-way
        boots for the 4 CLOSIDs left: four land, two get No valid host,
        though ways are left; no node refuses.
        """
        self.start_hosts(nodes.GOLD_FEW_CLOSIDS, ['c1', 'c2'])
        for host in ('c1', 'c2'):
            self.boot(self.flavor(2), host)
        done = self.burst(self.flavor(2), 6)
        self.assertEqual({'c1': 2, 'c2': 2, 'No valid host': 2},
                         self.outcome(done))
        self.assertEqual([], self.hooked.refusals)
        self.assertEqual([(12, 0), (12, 0)],
                         [self.free(h) for h in ('c1', 'c2')])
        self.settled('after the burst')

    def test_a_socket_placement_does_not_see(self) -> None:
        """p1: socket 0 holds a 9-way instance on 1 CPU (no way left, 15
        CPUs), socket 1 a 2-way one on 4 CPUs (7 ways left, 12 CPUs); p2 is
        empty.  Four pinned 2-way boots: Placement admits three on p1 (7
        ways in all), Nova's NUMA fit gives each socket 0 (the most free
        CPUs), p1's hook refuses the three (a socket's fit), Nova
        reschedules each to p2; the fourth claims p2 at once.
        """
        self.start_hosts(nodes.GOLD, ['p1', 'p2'])
        full = self.boot(self.pinned(9, vcpus=1), 'p1')
        part = self.boot(self.pinned(2, vcpus=4), 'p1')
        self.assertEqual(({0}, {1}), (self.cells(full), self.cells(part)))
        done = self.burst(self.pinned(2), 4)
        self.assertEqual({'p2': 4}, self.outcome(done))
        refused = self.hooked.refusals
        self.assertEqual(3, len(refused), refused)
        for host, _name, why in refused:
            self.assertEqual('p1', host)
            self.assertIn('needs 2 ways on cache domain 0, but '
                          'only 0 of 11 are free', why)
        # each refused instance ran where Nova rescheduled it, counted
        # there alone
        self.assertEqual((7, 13), self.free('p1'))
        self.assertEqual((10, 11), self.free('p2'))
        self.settled('after the burst')
