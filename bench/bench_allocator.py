"""Allocator: time to place and release 1,000 requests (20 ways, 4 domains),
and how often a running VM's ways move.

Time: each request is a VM asking 1-3 ways on one domain or on all four; at
most 6 are live at once, the oldest released first.  Every operation runs
the full planner (``allocator.plan`` over the whole state, as the node
does).  Baseline: a naive first-fit bitmap placer doing the same sequence
with no validation, no moves and no write ordering.

Moves: on every emulated profile, 2,000 seeded lifecycle events (VM starts
asking 1-4 ways on one domain or on all, and stops of a random running VM)
beside an isolated PMD group (2 ways) and the default group's floor (2).  A
VM starts only when the free-way count of the last plan says it fits (what
Nova's filter and ``provider-config`` trust); each plan is written before
the next event.  Printed: live-group moves per event (a group that existed
before the plan and after, whose ways changed on a domain, once per domain),
and the starts refused although the count said they fit.  Baseline: the
allocator before issue 40 (``git worktree add /tmp/ovs-rdt-old 76a5f55``,
then ``--tree /tmp/ovs-rdt-old``), which repacked at every plan: 0.29-4.2
moves per event, every one on a stop, none refused (``BASELINE``).

    python3 bench/bench_allocator.py [--moves-only] [--tree DIR]
"""
from __future__ import annotations

import os
import random
import sys
import time


def _tree() -> str:
    """The source tree to measure: ``--tree DIR``, else this checkout."""
    if '--tree' in sys.argv:
        return os.path.abspath(sys.argv[sys.argv.index('--tree') + 1])
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')


sys.path.insert(0, _tree())

from ovs_rdt.core.allocator import plan  # noqa: E402
from ovs_rdt.core.bitmask import CBM  # noqa: E402
from ovs_rdt.core.model import Group, Platform, Request  # noqa: E402
from ovs_rdt.emulator.profiles import PROFILES  # noqa: E402
from ovs_rdt.exceptions import AllocationError  # noqa: E402

WAYS, DOMAINS, N, LIVE = 20, (0, 1, 2, 3), 1000, 6


def sequence() -> list[Request]:
    rnd = random.Random(42)
    out = []
    for i in range(N):
        ways = rnd.randint(1, 3)
        doms = DOMAINS if rnd.random() < 0.3 else (rnd.choice(DOMAINS),)
        out.append(Request('ovsrdt-vm-%04d' % i, ways={d: ways for d in doms}))
    return out


def run_planner(reqs: list[Request]) -> float:
    platform = Platform(WAYS, 64, DOMAINS)
    groups = [Group('', {d: CBM.full(WAYS) for d in DOMAINS})]
    live: list[Request] = []
    start = time.perf_counter()
    for req in reqs:
        if len(live) >= LIVE:
            live.pop(0)
            groups = _after(groups, plan(platform, groups, live, 2))
        live.append(req)
        groups = _after(groups, plan(platform, groups, live, 2))
    return time.perf_counter() - start


def _after(groups: list[Group], result) -> list[Group]:
    out = [Group('', dict(result.l3['']))]
    for name, masks in result.l3.items():
        if name:
            out.append(Group(name, dict(masks), mode=result.modes[name]))
    return out


def run_baseline(reqs: list[Request]) -> float:
    used = {d: 0 for d in DOMAINS}
    held: dict[str, dict[int, int]] = {}
    live: list[str] = []
    start = time.perf_counter()
    for req in reqs:
        if len(live) >= LIVE:
            for d, m in held.pop(live.pop(0)).items():
                used[d] &= ~m
        masks = {}
        for d, w in req.ways.items():
            for low in range(WAYS - w, -1, -1):
                m = ((1 << w) - 1) << low
                if not used[d] & m:
                    used[d] |= m
                    masks[d] = m
                    break
        held[req.name] = masks
        live.append(req.name)
    return time.perf_counter() - start


EVENTS, SEED, PMD = 2000, 40, 'ovsrdt-ovs-pmd'
#: Per profile, the allocator before issue 40 (76a5f55, ``--tree``): live
#: group moves per event, on stops and on starts, starts refused, and the
#: planner's milliseconds per plan (this machine, one run).
BASELINE: dict[str, tuple[float, int, int, int, float]] = {
    'xeon-gold-6230': (0.375, 594, 0, 0, 0.17),
    'xeon-e7-8890-v4': (1.789, 3154, 0, 0, 0.51),
    'xeon-d-1540': (0.285, 478, 0, 0, 0.10),
    'xeon-6-granite-rapids-snc3': (0.836, 1429, 0, 0, 0.23),
    'epyc-9654': (4.242, 7669, 0, 0, 2.17),
    'epyc-9575f': (2.737, 4888, 0, 0, 1.32),
}


class Count:
    """One profile's run: events, moves on stops and on starts, starts
    refused that the count let in, starts the count kept out, starts whose
    plan said a move was needed, moves in plans that named none, and the
    planner's time.
    """

    def __init__(self) -> None:
        self.events = self.on_stop = self.on_start = 0
        self.refused = self.kept_out = self.needed = self.unneeded = 0
        self.seconds = 0.0


def lifecycle(name: str) -> Count:
    """One profile's seeded sequence of VM starts and stops."""
    prof = PROFILES[name]
    doms = tuple(prof.domains)
    platform = Platform(prof.cbm_len, prof.num_closids, doms,
                        min_cbm_bits=prof.min_cbm_bits,
                        shareable_bits=prof.shareable_bits,
                        sparse_masks=prof.sparse_masks)
    rnd = random.Random('%s-%d' % (name, SEED))
    groups = [Group('', {d: CBM.full(prof.cbm_len) for d in doms})]
    live = [Request(PMD, ways={d: 2 for d in doms})]
    result = plan(platform, groups, live, 2)
    groups = _after(groups, result)
    out = Count()
    for event in range(EVENTS):
        vms = [r for r in live if r.name != PMD]
        stop = bool(vms) and (rnd.random() < 0.45 or
                              len(groups) >= prof.num_closids)
        if stop:
            live.remove(rnd.choice(vms))
        else:
            ways = rnd.randint(1, 4)
            on = doms if rnd.random() < 0.5 else (rnd.choice(doms),)
            if any(result.free[d] < ways for d in on):
                out.kept_out += 1
                continue
            live.append(Request('ovsrdt-vm-%05d' % event,
                                ways={d: ways for d in on}))
        start = time.perf_counter()
        try:
            result = plan(platform, groups, live, 2)
        except AllocationError:
            refused = True
        else:
            refused = False
        out.seconds += time.perf_counter() - start
        out.events += 1
        if refused:
            out.refused += 1
            if not stop:
                live.pop()
            continue
        named = getattr(result, 'moves', None)
        out.needed += bool(named)
        moves = _moved(groups, result)
        if named is not None and not named:
            out.unneeded += moves
        if stop:
            out.on_stop += moves
        else:
            out.on_start += moves
        groups = _after(groups, result)
    return out


def _moved(groups: list[Group], result) -> int:
    """Groups that existed before the plan and after, holding ways both
    times, whose ways changed: once per domain.
    """
    before = {g.name: g.l3 for g in groups}
    root_before, root_after = before[''], result.l3['']
    moves = 0
    for name, masks in result.l3.items():
        old = before.get(name)
        if not name or old is None:
            continue
        moves += sum(1 for d, m in masks.items()
                     if m != old[d] and not m.overlaps(root_after[d])
                     and not old[d].overlaps(root_before[d]))
    return moves


def report_moves() -> None:
    print('live-group moves per lifecycle event (%d events, seed %d, tree '
          '%s): stops and starts; starts refused although the free count '
          'let them in' % (EVENTS, SEED, os.path.relpath(_tree())))
    for name in PROFILES:
        c = lifecycle(name)
        moves = c.on_stop + c.on_start
        line = ('  %-27s %.3f/event (stops %d, starts %d; %d starts needed '
                'a move, %d moves where none did) refused %d, %.2f ms/plan'
                % (name, moves / c.events, c.on_stop, c.on_start, c.needed,
                   c.unneeded, c.refused, c.seconds / c.events * 1e3))
        if name in BASELINE:
            base = BASELINE[name]
            line += ('\n  %27s baseline %.3f/event (stops %d, starts %d) '
                     'refused %d, %.2f ms/plan; ratio moves %.3f, time %.2f'
                     % ('', base[0], base[1], base[2], base[3], base[4],
                        moves / c.events / base[0],
                        c.seconds / c.events * 1e3 / base[4]))
        print(line)


def main() -> int:
    report_moves()
    if '--moves-only' in sys.argv:
        return 0
    reqs = sequence()
    ops = 2 * N
    best = min(run_planner(reqs) for _ in range(3))
    base = min(run_baseline(reqs) for _ in range(3))
    print('allocator: %d place + %d release on %d ways x %d domains'
          % (N, N, WAYS, len(DOMAINS)))
    print('  ovs-rdt planner : %8.1f ms total, %7.1f us/operation'
          % (best * 1e3, best / ops * 1e6))
    print('  naive first-fit : %8.1f ms total, %7.1f us/operation'
          % (base * 1e3, base / ops * 1e6))
    print('  ratio planner/naive: %.1fx (the planner validates, places and '
          'orders writes over the whole state)' % (best / base))
    return 0


if __name__ == '__main__':
    sys.exit(main())
