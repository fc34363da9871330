"""RDTCacheFilter with each emulated platform's capacity (issue 14).

The capacities are those ``ovs-rdt provider-config`` reports for each case
on a mounted emulator (``tests/functional/test_profiles.py`` checks that):
ways per domain = the CBM length, ways kept from VMs with the tests'
configuration, CLOSIDs halved under CDP and one fewer with io_alloc, two
of them held by the default group and pool ``noisy`` (``rdt_pools``, as
doc/nova.md says to set it).  Whichever runs out
first, ways or CLOSIDs, turns the host away.
"""
from __future__ import annotations

import pytest

from tests.nova.test_filter import host, instance, passes, request
from tests.platform_matrix import CAPACITY_CASES, Case, ids

RESERVED_CLOSIDS = 2


def capacity(case: Case) -> dict[str, str]:
    return {'rdt_l3_ways': str(case.cbm_len),
            'rdt_system_ways': str(case.system_ways),
            'rdt_closids': str(case.closids),
            'rdt_reserved_closids': str(RESERVED_CLOSIDS),
            'rdt_pools': 'noisy'}     # its CLOSID is among the reserved


def ways(n: int) -> dict[str, str]:
    return {'rdt:l3_ways': str(n)}


@pytest.mark.parametrize('case', CAPACITY_CASES, ids=ids(CAPACITY_CASES))
def test_capacity_of_each_platform(case: Case) -> None:
    meta = capacity(case)
    free = case.cbm_len - case.system_ways
    slots = case.closids - RESERVED_CLOSIDS
    # an empty host: every free way, not one more
    assert passes(host(meta=meta), request(**ways(free))) == ['h1']
    assert passes(host(meta=meta), request(**ways(free + 1))) == []
    # one-way VMs until ways or CLOSIDs run out
    fits = min(free, slots)
    vms = [instance(**ways(1)) for _ in range(fits)]
    assert passes(host(meta=meta, instances=vms[:-1]),
                  request(**ways(1))) == ['h1']
    assert passes(host(meta=meta, instances=vms), request(**ways(1))) == []
    # pool members and plain instances hold neither
    others = [instance(**{'rdt:pool': 'noisy'}), instance()]
    assert passes(host(meta=meta, instances=vms[:-1] + others),
                  request(**ways(1))) == ['h1']


def test_cdp_halves_the_closids_before_the_ways_run_out() -> None:
    """Gold 6230: 7 free ways either way; 14 VM CLOSIDs, 6 under CDP."""
    plain, cdp = (next(c for c in CAPACITY_CASES if c.profile ==
                       'xeon-gold-6230' and c.cdp is on)
                  for on in (False, True))
    vms = [instance(**ways(1)) for _ in range(6)]
    assert passes(host(meta=capacity(plain), instances=vms),
                  request(**ways(1))) == ['h1']
    assert passes(host(meta=capacity(cdp), instances=vms),
                  request(**ways(1))) == []
