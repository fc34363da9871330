"""The way and CLOSID arithmetic shared by the scheduler and the node."""
from __future__ import annotations

import random
from typing import Any

from ovs_rdt.core import allocator
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core import capacity
from ovs_rdt.core.capacity import Holding, HostCapacity, Usage
from ovs_rdt.core.model import PMD_GROUP, ROOT, Group, Platform, Request
from ovs_rdt.core.model import pool_group, vm_group
from ovs_rdt.exceptions import AllocationError

CAP = HostCapacity(l3_ways=11, system_ways=2, closids=16, reserved_closids=1)


def usage(*holdings: Holding) -> Usage:
    out = Usage()
    for held in holdings:
        out.add(held)
    return out


def test_free_ways_never_negative() -> None:
    assert capacity.ways_left(11, 2, 3) == 6
    assert capacity.ways_left(11, 2, 9) == 0
    assert capacity.ways_left(11, 2, 12) == 0


def test_closids_free_and_fit() -> None:
    assert capacity.closids_free(16, 1, 3, 2) == 10
    assert capacity.closids_free(4, 1, 3, 1) == 0
    assert capacity.closids_fit(16, 16)
    assert not capacity.closids_fit(16, 17)


def test_exact_capacity_unpinned() -> None:
    used = usage(Holding(3), Holding(3))
    assert capacity.check(CAP, used, Holding(3), {0, 1}) is None
    reason = capacity.check(CAP, used, Holding(4), {0, 1})
    assert reason == ('4 L3 way(s) requested on cache domain 0, 3 free '
                      '(11 ways, 2 system, 6 used by instances)')


def test_pinned_instances_count_on_their_domains_only() -> None:
    used = usage(Holding(9, frozenset({0})))
    assert used.used_ways(0) == 9 and used.used_ways(1) == 0
    assert capacity.check(CAP, used, Holding(1), {0, 1}) is not None
    assert capacity.check(CAP, used, Holding(9, frozenset({1})), {0, 1}) \
        is None
    assert 'domain 0' in capacity.check(CAP, used, Holding(1, frozenset({0})),
                                        {0, 1})


def test_unknown_domain_refused() -> None:
    reason = capacity.check(CAP, Usage(), Holding(1, frozenset({2})), {0, 1})
    assert reason == 'L3 cache domain(s) 2 do not exist (host has 0,1)'


def test_best_domains_prefers_free_then_lowest() -> None:
    used = usage(Holding(4, frozenset({0})), Holding(1, frozenset({2})))
    assert capacity.best_domains(CAP, used, {0, 1, 2}, 1) == {1}
    assert capacity.best_domains(CAP, used, {0, 1, 2}, 2) == {1, 2}


def test_closids_run_out() -> None:
    cap = CAP._replace(closids=4)
    used = usage(Holding(1), Holding(1), Holding(1))
    assert capacity.check(cap, used, Holding(1), {0}) == (
        'no free CLOSID (4, 1 reserved, 3 dedicated, pools in use: none)')
    assert capacity.free_closids(cap, usage(Holding(1), Holding(1))) == 1


def test_pool_needs_a_closid_only_when_new() -> None:
    cap = CAP._replace(closids=3)
    used = usage(Holding(2), Holding(pool='noisy'), Holding(pool='noisy'))
    # root + one VM + pool noisy: 3 of 3 CLOSIDs
    assert capacity.free_closids(cap, used) == 0
    assert capacity.check(cap, used, Holding(pool='noisy'), {0}) is None
    assert 'no free CLOSID' in capacity.check(cap, used, Holding(pool='hp'),
                                              {0})
    # a pool the node creates up front holds a reserved CLOSID
    assert capacity.check(cap._replace(pools=frozenset({'hp'})), used,
                          Holding(pool='hp'), {0}) is None


def test_pool_members_hold_no_ways() -> None:
    used = usage(*[Holding(pool='noisy')] * 20)
    assert used.used_ways(0) == 0 and used.dedicated == 0
    assert used.pools == {'noisy': 20}


def test_remove_and_copy() -> None:
    used = usage(Holding(3, frozenset({1})), Holding(pool='p'))
    copy = used.copy()
    copy.add(Holding(3, frozenset({1})), -1)
    copy.add(Holding(pool='p'), -1)
    assert copy.used_ways(1) == 0 and copy.dedicated == 0 and not copy.pools
    assert used.used_ways(1) == 3 and used.pools == {'p': 1}


def test_usage_forgets_domains_it_no_longer_holds() -> None:
    used = usage(Holding(3, frozenset({1})))
    used.add(Holding(3, frozenset({1})), -1)
    assert used.on == {} and used.domains() == frozenset()


def test_pool_not_configured_on_the_host_does_not_fit() -> None:
    # the hook refuses a pool the node is not configured with
    cap = CAP._replace(pools=frozenset({'hp'}))
    assert capacity.check(cap, Usage(), Holding(pool='hp'), {0}) is None
    assert capacity.check(cap, Usage(), Holding(pool='noisy'), {0}) == (
        'pool noisy is not configured on this host (rdt_pools: hp)')
    assert 'rdt_pools: none' in capacity.check(
        CAP._replace(pools=frozenset()), Usage(), Holding(pool='hp'), {0})
    # unknown pools: assumed to exist once, taking a CLOSID
    assert capacity.check(CAP, Usage(), Holding(pool='noisy'), {0}) is None


# -- the filter's arithmetic against the node allocator ---------------------
def _node(platform: Platform, system_min_ways: int, pmd: int,
          pools: dict[str, tuple[int, bool]]) -> tuple:
    """The groups after "ovs-rdt apply" and the requests that keep them."""
    doms = platform.domains
    base = [Request(pool_group(name), ways={d: ways for d in doms},
                    exclusive=isolated)
            for name, (ways, isolated) in pools.items()]
    if pmd:
        base.append(Request(PMD_GROUP, ways={d: pmd for d in doms}))
    groups = [Group(ROOT, {d: CBM.full(platform.cbm_len) for d in doms})]
    plan = allocator.plan(platform, groups, base, system_min_ways)
    return _groups(plan), base


def _groups(plan: Any) -> list:
    return [Group(name, dict(masks), mode=plan.modes.get(name, 'shareable'))
            for name, masks in plan.l3.items()]


def _cross_check(seed: int, io_ways: str = '') -> tuple[int, int]:
    """Random VMs come and go on a node; the filter decides each new one.

    Returns (filter passes but the node refuses, filter refuses but the
    node accepts).  The filter's capacity is what the doc tells operators
    to set: rdt_system_ways from "ovs-rdt provider-config", rdt_closids
    from info/L3/num_closids, rdt_reserved_closids = root + PMD + pools.
    """
    rnd = random.Random(seed)
    width = rnd.choice([8, 11, 12, 20])
    platform = Platform(cbm_len=width, num_closids=rnd.choice([4, 8, 16]),
                        domains=tuple(range(rnd.choice([1, 2, 4]))),
                        shareable_bits={'': 0, 'bottom': 0x3,
                                        'top': 0x3 << width - 2}[io_ways])
    doms = platform.domains
    system_min_ways = rnd.randint(1, 3)
    pmd = rnd.choice([0, 0, 1, 2])
    pools = {'p%d' % i: (rnd.randint(1, 2), rnd.random() < .5)
             for i in range(rnd.randint(0, 2))}
    try:
        groups, base = _node(platform, system_min_ways, pmd, pools)
    except AllocationError:
        return 0, 0    # the node cannot even hold its own groups
    reserved = {d: width - n for d, n in allocator.room(
        platform, groups, base, system_min_ways).items()}
    cap = HostCapacity(width, max(reserved.values()), platform.num_closids,
                       1 + bool(pmd) + len(pools), frozenset(pools))
    vms: dict[str, tuple[Request, Holding]] = {}
    used = Usage()
    unsafe = conservative = 0
    for step in range(30):
        if vms and rnd.random() < .3:       # one goes: the others repack
            name = rnd.choice(sorted(vms))
            held = vms.pop(name)[1]
            groups = _groups(allocator.plan(
                platform, groups, base + [r for r, _ in vms.values()],
                system_min_ways))
            used.add(held, -1)
            continue
        ways = rnd.randint(1, width)
        pinned = None
        if len(doms) > 1 and rnd.random() < .5:
            pinned = frozenset(rnd.sample(doms, rnd.randint(1, len(doms))))
        name = vm_group('%08d-0000-4000-8000-%012d' % (seed, step))
        req = Request(name, ways={d: ways for d in (pinned or doms)})
        held = Holding(ways, pinned)
        fits = capacity.check(cap, used, held, frozenset(doms)) is None
        try:
            plan = allocator.plan(platform, groups, base + [
                r for r, _ in vms.values()] + [req], system_min_ways)
        except AllocationError:
            unsafe += fits
            continue
        conservative += not fits
        groups = _groups(plan)
        vms[name] = (req, held)
        used.add(held)
    return unsafe, conservative


def test_filter_and_node_allocator_agree() -> None:
    """With min_cbm_bits 1 and no I/O-shared ways: the same decisions."""
    results = [_cross_check(seed) for seed in range(200)]
    assert sum(u for u, _ in results) == 0     # never passes what fails
    assert sum(c for _, c in results) == 0     # and never refuses for less


def test_filter_with_io_shared_ways_at_an_edge_of_the_mask() -> None:
    """info/L3/shareable_bits (DDIO: 600 on an 11-way Xeon Scalable).

    Exact with rdt_system_ways from "ovs-rdt provider-config", which asks
    the allocator; I/O ways inside the mask would split the free ways.
    """
    for where in ('top', 'bottom'):
        results = [_cross_check(seed, where) for seed in range(100)]
        assert sum(u for u, _ in results) == 0, where
        assert sum(c for _, c in results) == 0, where
