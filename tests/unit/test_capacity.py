"""The way and CLOSID arithmetic shared by the scheduler and the node."""
from __future__ import annotations

from ovs_rdt import capacity
from ovs_rdt.capacity import Holding, HostCapacity, Usage

CAP = HostCapacity(l3_ways=11, system_ways=2, closids=16, reserved_closids=1)


def usage(*holdings: Holding) -> Usage:
    out = Usage()
    for held in holdings:
        out.add(held)
    return out


def test_free_ways_never_negative() -> None:
    assert capacity.free_ways(11, 2, 3) == 6
    assert capacity.free_ways(11, 2, 9) == 0
    assert capacity.free_ways(11, 2, 12) == 0


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
