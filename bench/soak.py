"""A week of a node in an hour: two nodes under every lifecycle event and
fault at once, sampled for leaks and checked for invariants.

Two nodes of the sandbox (:class:`ovs_rdt.sandbox.node.Node`: node ``a`` an
emulated Xeon Gold 6230, node ``b`` an E7-8890 v4, each its own libvirtd
with the hook), each with a private OvS (one PMD thread in pool ``hp``,
``rdt-pmd-pool=hp``) and ``ovs-rdt-agent`` with the dynamic policy (hp and
noisy) and the metrics endpoint on.  Events are drawn at random from
``--seed`` by one worker per node, the two side by side: KVM guests that
ask by ways, by size, by pool or for nothing are started and stopped,
migrated live and cold from node to node, given a vCPU (``setvcpus
--live``), and the PMD threads re-created (``pmd-cpu-mask``); the metrics
of both agents are scraped every second.  Guests start paused: their vCPU
threads exist and are placed as any guest's, but run no firmware (a guest
in SeaBIOS's boot burns a core, and the run would measure QEMU rather than
ovs-rdt).
Every ``--fault-every`` events a fault comes, in turn: node b's agent
killed and restarted, a libvirtd restarted under its guests, a QEMU killed,
EIO and ENOSPC from the emulator on a write, another tool's group made and
removed, Intel's real ``pqos -I`` (where installed; its classes then
removed, as the README tells an operator).

After every event the nodes it touched are checked (:mod:`soak_checks`;
an event holds the locks of the nodes it touches, so no other event is
half-done there), and the event that broke an invariant is named.  Every ``--sample`` events
a row per node goes to ``soak.csv`` (the agent's RSS, fds and threads;
groups and CLOSIDs against the guests alive; the hook's own time per event,
p50/p99; the metrics scrape time) and ``soak.png`` is drawn again.  Node
a's agent runs from start to end (its RSS growth is the leak figure);
node b's is the one killed.  At the end every guest is stopped: no group
or CLOSID may be left.  Exit status 0 only when nothing broke.

    python3 bench/soak.py                    (10000 events, ~50 minutes)
    python3 bench/soak.py --quick            (500 events, < 3 minutes)
    python3 bench/soak.py --events 2000 --seed 7 --out /tmp/soak

Needs root, /dev/kvm, libvirt, OvS and FUSE (tools/setup.sh); the plot
needs matplotlib (in the stress environments' requirements).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any, Iterator

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path[:0] = [REPO, os.path.dirname(os.path.abspath(__file__))]

from ovs_rdt.sandbox.wait import SandboxError  # noqa: E402
import soak_node  # noqa: E402
from soak_node import Guest, SoakNode  # noqa: E402
import soak_report  # noqa: E402

#: Fault kinds, in the order they come.
FAULTS = ('agent-kill', 'libvirtd-restart', 'qemu-kill', 'eio', 'enospc',
          'foreign-group', 'pqos')
#: Lifecycle events and their weights.
EVENTS = (('start', 30), ('stop', 26), ('live-migrate', 10),
          ('cold-migrate', 4), ('setvcpus', 6), ('pmd', 3))
#: Guests running at most, per node (two cores run both nodes).
MAX_RUNNING = 5
#: Requests a started guest makes, in turn with the seed's choice.
KINDS = ('ways', 'size', 'pool', 'none')


class Soak:
    """The event loop: one worker per node, each driving events that start
    on its node; an event holds the locks of the nodes it touches (a
    migration both, taken in order), so each node's checks see no event
    half-done, while the other node's event runs beside it.  Faults and
    samples hold every lock.
    """

    def __init__(self, args: argparse.Namespace, work: str) -> None:
        self.args = args
        self.work = work
        self.nodes = [SoakNode(os.path.join(work, 'a'), 'a', 'xeon-gold-6230',
                               args.port, restartable=False),
                      SoakNode(os.path.join(work, 'b'), 'b',
                               'xeon-e7-8890-v4', args.port + 1,
                               restartable=True)]
        self.locks = {n.name: threading.Lock() for n in self.nodes}
        #: Guards the bookkeeping below.
        self.lock = threading.Lock()
        self.guests: list[Guest] = []
        self.serial = 0
        self.claimed = 0
        self.faults = 0
        self.counts: dict[str, int] = {}
        self.violations: list[str] = []
        self.report = soak_report.Report(args.out, self.nodes)
        self.leaks: list[str] = []
        #: Events that failed, not by ovs-rdt (the environment's).
        self.errors: list[str] = []
        self.crash: BaseException | None = None

    # -- the run -----------------------------------------------------------
    def run(self) -> int:
        began = time.monotonic()
        for node in self.nodes:
            node.start()
        self.report.start()
        workers = [threading.Thread(target=self.worker, name='soak-' + n.name,
                                    args=(i,))
                   for i, n in enumerate(self.nodes)]
        for thread in workers:
            thread.start()
        try:
            for thread in workers:
                while thread.is_alive():
                    thread.join(1.0)
        except BaseException as exc:   # Ctrl-C, SIGTERM: workers end first
            self.crash = self.crash or exc
            for thread in workers:
                thread.join(300)
            raise
        if self.crash is not None:
            raise self.crash
        self.finish()
        self.sample(self.claimed)
        elapsed = time.monotonic() - began
        return self.report.summary(self.claimed, elapsed, self.counts,
                                   self.violations, self.leaks,
                                   self.errors, strict=not self.args.quick)

    def worker(self, home: int) -> None:
        rng = random.Random(self.args.seed * 1000 + home)
        try:
            while self.crash is None:
                with self.lock:
                    if self.claimed >= self.args.events:
                        return
                    self.claimed += 1
                    number = self.claimed
                if number % self.args.fault_every == 0:
                    with self.every_node():
                        self.fault(FAULTS[(number // self.args.fault_every
                                           - 1) % len(FAULTS)], number, rng)
                self.event(self.nodes[home], rng)
                if number % self.args.sample == 0:
                    self.sample(number)
        except BaseException as exc:  # noqa: BLE001 - re-raised by run()
            self.crash = self.crash or exc

    @contextlib.contextmanager
    def holding(self, nodes: list[SoakNode]) -> Iterator[None]:
        """The locks of ``nodes``, taken in one order (no deadlock)."""
        names = sorted({n.name for n in nodes})
        for name in names:
            self.locks[name].acquire()
        try:
            yield
        finally:
            for name in reversed(names):
                self.locks[name].release()

    def every_node(self) -> Any:
        return self.holding(self.nodes)

    def finish(self) -> None:
        """Every guest stopped: what is left is leaked."""
        for guest in list(self.guests):
            guest.node.remove(guest)
            self.guests.remove(guest)
        for node in self.nodes:
            self.leaks += node.leaks()

    def count(self, key: str) -> None:
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1

    def on(self, node: SoakNode) -> list[Guest]:
        with self.lock:
            return [g for g in self.guests if g.node is node]

    def check(self, nodes: list[SoakNode], event: str,
              settle: float = 5.0) -> None:
        """The invariants on ``nodes`` (their locks held)."""
        for node in nodes:
            problems = node.settle(self.on(node), settle)
            problems += node.take_defects()
            for problem in problems:
                with self.lock:
                    self.violations.append('%s on node %s: %s'
                                           % (event, node.name, problem))
                print('VIOLATION after %s on node %s: %s'
                      % (event, node.name, problem), flush=True)

    def sample(self, number: int) -> None:
        with self.every_node():
            self.check(self.nodes, 'sample at #%d' % number, settle=15.0)
            with self.lock:
                counts = dict(self.counts)
                guests = list(self.guests)
                violations = len(self.violations)
            self.report.sample(number, counts, violations, guests)

    # -- events ------------------------------------------------------------
    def event(self, home: SoakNode, rng: random.Random
              ) -> tuple[str, list[SoakNode]]:
        """One event that starts on ``home``, checked; what it was."""
        kinds = [k for k, _ in EVENTS]
        weights = [w for _, w in EVENTS]
        other = self.nodes[1 - self.nodes.index(home)]
        while True:
            kind = rng.choices(kinds, weights)[0]
            touched = [home, other] if kind.endswith('migrate') else [home]
            with self.holding(touched):
                try:
                    what = getattr(self, 'do_' + kind.replace('-', '_'))(
                        home, other, rng)
                except SandboxError as exc:
                    # Not ovs-rdt's (e.g. two libvirtds on one machine
                    # picked the same migration port): counted, the guests
                    # re-read.
                    self.count(kind + ' failed, not by ovs-rdt')
                    with self.lock:
                        self.errors.append('%s: %s' % (kind, exc))
                    print('ERROR in %s: %s' % (kind, exc), flush=True)
                    self.resync(touched)
                    what = '%s (failed)' % kind
                if what is None:
                    continue
                self.count(kind)
                # The hook's work is done when virsh returns: checked at
                # once (a moment's grace), before the agent's
                # reconciliation could repair it; the agent's (new PMD
                # threads) is given its rescan.
                self.check(touched, what, 5.0 if kind == 'pmd' else 0.5)
                return what, touched

    def resync(self, nodes: list[SoakNode]) -> None:
        """After an event failed half-way: which guests run, where."""
        for guest in [g for n in nodes for g in self.on(n)]:
            for node in [guest.node] + [n for n in nodes
                                        if n is not guest.node]:
                if node.running(guest):
                    guest.node = node
                    break
            else:
                for node in nodes:
                    node.remove(guest)
                with self.lock:
                    self.guests.remove(guest)

    def new_guest(self, node: SoakNode, rng: random.Random,
                  kind: str | None = None) -> Guest:
        with self.lock:
            self.serial += 1
            serial = self.serial
        kind = kind or rng.choice(KINDS)
        return node.define(serial, kind, rng.choice((1, 1, 2)), rng)

    def add(self, guest: Guest) -> None:
        with self.lock:
            self.guests.append(guest)

    def drop(self, guest: Guest) -> None:
        with self.lock:
            self.guests.remove(guest)

    def do_start(self, node: SoakNode, other: SoakNode,
                 rng: random.Random) -> str | None:
        if len(self.on(node)) >= MAX_RUNNING:
            return None
        guest = self.new_guest(node, rng)
        if node.start_guest(guest):
            self.add(guest)
            return 'start %s on %s' % (guest, node.name)
        self.count('start refused')
        return 'start %s on %s (refused)' % (guest, node.name)

    def do_stop(self, node: SoakNode, other: SoakNode,
                rng: random.Random) -> str | None:
        guests = self.on(node)
        if not guests:
            return None
        guest = rng.choice(guests)
        node.remove(guest)
        self.drop(guest)
        return 'stop %s on %s' % (guest, node.name)

    def _migration(self, src: SoakNode, dst: SoakNode, rng: random.Random,
                   live: bool) -> str | None:
        guests = self.on(src)
        if not guests or len(self.on(dst)) >= MAX_RUNNING:
            return None
        guest = rng.choice(guests)
        how = 'live' if live else 'cold'
        ok = src.migrate(guest, dst, live)
        if not ok:
            self.count('%s migration refused' % how)
            if not live:             # stopped on the way: gone
                self.drop(guest)
        return '%s-migrate %s %s -> %s%s' % (how, guest, src.name, dst.name,
                                             '' if ok else ' (refused)')

    def do_live_migrate(self, node: SoakNode, other: SoakNode,
                        rng: random.Random) -> str | None:
        return self._migration(node, other, rng, True)

    def do_cold_migrate(self, node: SoakNode, other: SoakNode,
                        rng: random.Random) -> str | None:
        return self._migration(node, other, rng, False)

    def do_setvcpus(self, node: SoakNode, other: SoakNode,
                    rng: random.Random) -> str | None:
        grow = [g for g in self.on(node) if g.vcpus < g.max_vcpus]
        if not grow:
            return None
        guest = rng.choice(grow)
        node.setvcpus(guest, guest.vcpus + 1)
        return 'setvcpus %s %d' % (guest, guest.vcpus)

    def do_pmd(self, node: SoakNode, other: SoakNode,
               rng: random.Random) -> str | None:
        return 'pmd-cpu-mask=%s on %s' % (node.toggle_pmds(), node.name)

    # -- faults ------------------------------------------------------------
    def fault(self, kind: str, number: int, rng: random.Random) -> None:
        """One fault (every node's lock held), then the checks."""
        node = self.nodes[1] if kind == 'agent-kill' else \
            rng.choice(self.nodes)
        label = 'fault %s on %s (before event #%d)' % (kind, node.name,
                                                       number)
        other = self.nodes[1 - self.nodes.index(node)]
        if kind == 'agent-kill':
            node.restart_agent()
        elif kind == 'libvirtd-restart':
            node.restart_libvirtd()
        elif kind == 'qemu-kill':
            victims = self.on(node)
            if not victims:
                kind = 'qemu-kill (no guest)'
            else:
                guest = rng.choice(victims)
                node.kill_qemu(guest)
                self.drop(guest)
                label += ': ' + str(guest)
        elif kind in ('eio', 'enospc'):
            guest = self.new_guest(node, rng, 'ways')
            rule = ('write /*/schemata EIO' if kind == 'eio' else
                    'mkdir /ovsrdt-vm-* ENOSPC')
            if node.start_under_fault(guest, rule):
                self.add(guest)      # it needed no such write
        elif kind == 'foreign-group':
            node.foreign_group(lambda: self.do_start(node, other, rng) or
                               self.do_stop(node, other, rng))
        elif kind == 'pqos':
            if not node.pqos():
                kind = 'pqos (not installed)'
        self.count('faults')
        self.count('fault ' + kind)
        self.check(self.nodes, label, settle=30.0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--events', type=int, default=10000,
                        help='lifecycle events in the run (default 10000)')
    parser.add_argument('--quick', action='store_true',
                        help='500 events (the stress lane of '
                        'tools/test.sh)')
    parser.add_argument('--seed', type=int, default=36,
                        help='the seed of the events (default 36)')
    parser.add_argument('--sample', type=int, default=100,
                        help='events between two samples (default 100)')
    parser.add_argument('--fault-every', type=int, default=50,
                        help='events between two faults (default 50)')
    parser.add_argument('--port', type=int, default=19468,
                        help='node a\'s metrics port (b: the next one)')
    parser.add_argument('--out', default=None,
                        help='where soak.csv and soak.png go (default: a '
                        'new directory in /tmp, printed)')
    args = parser.parse_args(argv)
    if args.quick:
        args.events = min(args.events, 500)
    if args.out is None:
        args.out = tempfile.mkdtemp(prefix='ovsrdt-soak-')
    os.makedirs(args.out, exist_ok=True)
    return args


def interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt('signal %d' % signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (a test's time-out) tears down as Ctrl-C does.
    signal.signal(signal.SIGTERM, interrupt)
    why = soak_node.missing()
    if why:
        print('soak: %s' % why)
        return 1
    work = tempfile.mkdtemp(prefix='ovsrdt-soak-nodes-')
    os.chmod(work, 0o755)
    soak = Soak(args, work)
    problems: list[str] = []
    try:
        status = soak.run()
    except KeyboardInterrupt as exc:
        print('soak: interrupted (%s) after %d events: the nodes are torn '
              'down' % (exc or 'Ctrl-C', soak.claimed), flush=True)
        status = 130
    finally:
        soak.report.stop()
        for node in soak.nodes:
            problems += node.stop()
        if not problems:
            shutil.rmtree(work, ignore_errors=True)
    if problems:
        print('soak: teardown problems: %s' % '; '.join(problems))
        return 1
    return status


if __name__ == '__main__':
    sys.exit(main())
