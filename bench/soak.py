"""A week of a node in an hour: two nodes under every lifecycle event and
fault at once, sampled for leaks and checked for invariants.

Two nodes of the sandbox (:class:`ovs_rdt.sandbox.node.Node`: node ``a`` an
emulated Xeon Gold 6230, node ``b`` an E7-8890 v4, each its own libvirtd
with the hook), each with a private OvS (one PMD thread in pool ``hp``,
``rdt-pmd-pool=hp``) and ``ovs-rdt-agent`` with the dynamic policy (hp and
noisy) and the metrics endpoint on.  Events are drawn at random from
``--seed``: KVM guests that ask by ways, by size, by pool or for nothing
are started and stopped, migrated live and cold from node to node, given a
vCPU (``setvcpus --live``), and the PMD threads re-created
(``pmd-cpu-mask``); the metrics of both agents are scraped every second.
Every ``--fault-every`` events a fault comes, in turn: node b's agent
killed and restarted, a libvirtd restarted under its guests, a QEMU killed,
EIO and ENOSPC from the emulator on a write, another tool's group made and
removed, Intel's real ``pqos -I`` (where installed; its classes then
removed, as the README tells an operator).

After every event the nodes it touched are checked (:mod:`soak_checks`),
and the event that broke an invariant is named.  Every ``--sample`` events
a row per node goes to ``soak.csv`` (the agent's RSS, fds and threads;
groups and CLOSIDs against the guests alive; the hook's own time per event,
p50/p99; the metrics scrape time) and ``soak.png`` is drawn again.  Node
a's agent runs from start to end (its RSS growth is the leak figure);
node b's is the one killed.  At the end every guest is stopped: no group
or CLOSID may be left.  Exit status 0 only when nothing broke.

    python3 bench/soak.py                    (10000 events, ~1 hour)
    python3 bench/soak.py --quick            (500 events, < 3 minutes)
    python3 bench/soak.py --events 2000 --seed 7 --out /tmp/soak

Needs root, /dev/kvm, libvirt, OvS and FUSE (tools/setup.sh); the plot
needs matplotlib (in the stress environments' requirements).
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path[:0] = [REPO, os.path.dirname(os.path.abspath(__file__))]

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
    """The event loop over two nodes."""

    def __init__(self, args: argparse.Namespace, work: str) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.work = work
        self.nodes = [SoakNode(os.path.join(work, 'a'), 'a', 'xeon-gold-6230',
                               args.port, restartable=False),
                      SoakNode(os.path.join(work, 'b'), 'b',
                               'xeon-e7-8890-v4', args.port + 1,
                               restartable=True)]
        self.guests: list[Guest] = []
        self.serial = 0
        self.done = 0
        self.counts: dict[str, int] = {}
        self.violations: list[str] = []
        self.report = soak_report.Report(args.out, self.nodes)
        self.leaks: list[str] = []
        #: Seconds spent in events, in checks and in faults.
        self.spent: dict[str, float] = {}

    # -- the run -----------------------------------------------------------
    def run(self) -> int:
        began = time.monotonic()
        for node in self.nodes:
            node.start()
        self.report.start()
        fault = 0
        while self.done < self.args.events:
            if self.done and self.done % self.args.fault_every == 0 and \
                    self.counts.get('fault at', -1) != self.done:
                self.counts['fault at'] = self.done
                kind = FAULTS[fault % len(FAULTS)]
                fault += 1
                began_fault = time.monotonic()
                self.fault(kind)
                self.spent['faults'] = self.spent.get('faults', 0.0) + \
                    time.monotonic() - began_fault
            began_event = time.monotonic()
            what, touched = self.event()
            self.done += 1
            self.spent['events'] = self.spent.get('events', 0.0) + \
                time.monotonic() - began_event
            began_check = time.monotonic()
            self.check(touched, '#%d %s' % (self.done, what))
            self.spent['checks'] = self.spent.get('checks', 0.0) + \
                time.monotonic() - began_check
            if self.done % self.args.sample == 0:
                self.sample()
        self.finish()
        self.sample()
        elapsed = time.monotonic() - began
        print('soak: seconds in %s' % ', '.join(
            '%s %.0f' % item for item in sorted(self.spent.items())))
        return self.report.summary(self.done, elapsed, self.counts,
                                   self.violations, self.leaks,
                                   strict=not self.args.quick)

    def finish(self) -> None:
        """Every guest stopped: what is left is leaked."""
        for guest in list(self.guests):
            guest.node.remove(guest)
            self.guests.remove(guest)
        for node in self.nodes:
            self.leaks += node.leaks()

    def count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def check(self, nodes: list[SoakNode], event: str,
              settle: float = 5.0) -> None:
        for node in nodes:
            problems = node.settle([g for g in self.guests
                                    if g.node is node], settle)
            for problem in problems:
                self.violations.append('%s on node %s: %s'
                                       % (event, node.name, problem))
                print('VIOLATION after %s on node %s: %s'
                      % (event, node.name, problem), flush=True)

    def sample(self) -> None:
        for node in self.nodes:
            node.settle([g for g in self.guests if g.node is node], 15.0)
        self.report.sample(self.done, self.counts, len(self.violations),
                           self.guests)

    # -- events ------------------------------------------------------------
    def running(self, node: SoakNode | None = None) -> list[Guest]:
        return [g for g in self.guests if node is None or g.node is node]

    def event(self) -> tuple[str, list[SoakNode]]:
        kinds = [k for k, _ in EVENTS]
        weights = [w for _, w in EVENTS]
        while True:
            kind = self.rng.choices(kinds, weights)[0]
            result = getattr(self, 'do_' + kind.replace('-', '_'))()
            if result is not None:
                self.count(kind)
                return result

    def new_guest(self, node: SoakNode, kind: str | None = None) -> Guest:
        self.serial += 1
        kind = kind or self.rng.choice(KINDS)
        vcpus = self.rng.choice((1, 1, 2))
        return node.define(self.serial, kind, vcpus, self.rng)

    def do_start(self) -> tuple[str, list[SoakNode]] | None:
        node = self.rng.choice(self.nodes)
        if len(self.running(node)) >= MAX_RUNNING:
            return None
        guest = self.new_guest(node)
        if node.start_guest(guest):
            self.guests.append(guest)
            return 'start %s on %s' % (guest, node.name), [node]
        self.count('start refused')
        return 'start %s on %s (refused)' % (guest, node.name), [node]

    def do_stop(self) -> tuple[str, list[SoakNode]] | None:
        if not self.guests:
            return None
        guest = self.rng.choice(self.guests)
        guest.node.remove(guest)
        self.guests.remove(guest)
        return 'stop %s on %s' % (guest, guest.node.name), [guest.node]

    def _migration(self, live: bool) -> tuple[str, list[SoakNode]] | None:
        if not self.guests:
            return None
        guest = self.rng.choice(self.guests)
        src = guest.node
        dst = self.nodes[1 - self.nodes.index(src)]
        if len(self.running(dst)) >= MAX_RUNNING:
            return None
        how = 'live' if live else 'cold'
        ok = src.migrate(guest, dst, live)
        if not ok:
            self.count('%s migration refused' % how)
            if not live:             # stopped on the way: gone
                self.guests.remove(guest)
        return ('%s-migrate %s %s -> %s%s' % (how, guest, src.name, dst.name,
                                              '' if ok else ' (refused)'),
                [src, dst])

    def do_live_migrate(self) -> tuple[str, list[SoakNode]] | None:
        return self._migration(True)

    def do_cold_migrate(self) -> tuple[str, list[SoakNode]] | None:
        return self._migration(False)

    def do_setvcpus(self) -> tuple[str, list[SoakNode]] | None:
        grow = [g for g in self.guests if g.vcpus < g.max_vcpus]
        if not grow:
            return None
        guest = self.rng.choice(grow)
        guest.node.setvcpus(guest, guest.vcpus + 1)
        return 'setvcpus %s %d' % (guest, guest.vcpus), [guest.node]

    def do_pmd(self) -> tuple[str, list[SoakNode]] | None:
        node = self.rng.choice(self.nodes)
        mask = node.toggle_pmds()
        return 'pmd-cpu-mask=%s on %s' % (mask, node.name), [node]

    # -- faults ------------------------------------------------------------
    def fault(self, kind: str) -> None:
        node = self.nodes[1] if kind == 'agent-kill' else \
            self.rng.choice(self.nodes)
        label = 'fault %s on %s (before event #%d)' % (kind, node.name,
                                                       self.done + 1)
        if kind == 'agent-kill':
            node.restart_agent()
        elif kind == 'libvirtd-restart':
            node.restart_libvirtd()
        elif kind == 'qemu-kill':
            victims = self.running(node)
            if not victims:
                kind = 'qemu-kill (no guest)'
            else:
                guest = self.rng.choice(victims)
                node.kill_qemu(guest)
                self.guests.remove(guest)
                label += ': ' + str(guest)
        elif kind in ('eio', 'enospc'):
            guest = self.new_guest(node, 'ways')
            rule = ('write /*/schemata EIO' if kind == 'eio' else
                    'mkdir /ovsrdt-vm-* ENOSPC')
            if node.start_under_fault(guest, rule):
                self.guests.append(guest)      # the write it needed was none
        elif kind == 'foreign-group':
            node.foreign_group(lambda: self.do_start() or self.do_stop())
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
                        help='500 events, a fault every 20 (the stress '
                        'lane of tools/test.sh)')
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
        args.fault_every = min(args.fault_every, 20)
    if args.out is None:
        args.out = tempfile.mkdtemp(prefix='ovsrdt-soak-')
    os.makedirs(args.out, exist_ok=True)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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
