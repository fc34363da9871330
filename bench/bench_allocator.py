"""Allocator: time to place and release 1,000 requests (20 ways, 4 domains).

Each request is a VM asking 1-3 ways on one domain or on all four; at most 6
are live at once, the oldest released first (churn, so the allocator repacks).
Every operation runs the full planner (``allocator.plan`` over the whole
state, as the node does).  Baseline: a naive first-fit bitmap placer doing
the same sequence with no validation, no repacking and no write ordering.

    python3 bench/bench_allocator.py
"""
from __future__ import annotations

import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from ovs_rdt.core.allocator import plan  # noqa: E402
from ovs_rdt.core.bitmask import CBM  # noqa: E402
from ovs_rdt.core.model import Group, Platform, Request  # noqa: E402

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


def main() -> int:
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
    print('  ratio planner/naive: %.1fx (the planner validates, repacks and '
          'orders writes over the whole state)' % (best / base))
    return 0


if __name__ == '__main__':
    sys.exit(main())
