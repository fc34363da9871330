"""A Nova flavor against what Placement counts (ovs_rdt.inputs.placement),
and the ``resources:CUSTOM_RDT_*`` rule every surface reads
(ovs_rdt.inputs.request): the count is written once, in what Placement
claims.
"""
from __future__ import annotations

import pytest

from ovs_rdt import domain_xml as domain
from ovs_rdt.inputs import placement, request
from ovs_rdt.inputs.request import CacheRequest
from tests.unit.test_inputs import refused

WAYS = 'resources:CUSTOM_RDT_L3_WAY'
CLOSID = 'resources:CUSTOM_RDT_CLOSID'


# -- resources:CUSTOM_RDT_* (the hook reads them too) ---------------------------
@pytest.mark.parametrize('specs, expect', [
    ({WAYS: '6', CLOSID: '1'}, CacheRequest(l3_total=6)),
    ({WAYS: '06', CLOSID: '1', 'rdt:mb_percent': '50'},
     CacheRequest(l3_total=6, mb_percent=50)),
    # the count is Placement's: rdt:l3_ways beside it is checked, not used
    ({WAYS: '6', CLOSID: '1', 'rdt:l3_ways': '3'}, CacheRequest(l3_total=6)),
    # 0 is Nova's "not asked"
    ({WAYS: '0', CLOSID: '0'}, None),
    ({WAYS: '0', 'hw:cpu_policy': 'dedicated'}, None),
    ({'resources:VCPU': '2', 'trait:CUSTOM_RDT_L3_CAT': 'required'}, None),
])
def test_what_placement_counts_is_the_request(specs: dict, expect: object
                                              ) -> None:
    assert request.from_extra_specs(specs) == expect


@pytest.mark.parametrize('specs, message', [
    ({WAYS: '6'}, 'resources:CUSTOM_RDT_L3_WAY=6 needs '
                  'resources:CUSTOM_RDT_CLOSID=1 too'),
    ({WAYS: '6', CLOSID: '0'}, 'resources:CUSTOM_RDT_L3_WAY=6 needs '
                               'resources:CUSTOM_RDT_CLOSID=1 too'),
    ({CLOSID: '1'}, 'resources:CUSTOM_RDT_CLOSID=1 without '
                    'resources:CUSTOM_RDT_L3_WAY'),
    ({WAYS: '6', CLOSID: '2'},
     "resources:CUSTOM_RDT_CLOSID: '2' must be from 0 to 1"),
    ({WAYS: '+6', CLOSID: '1'},
     "resources:CUSTOM_RDT_L3_WAY: '+6' is not a whole number"),
    ({'resources1:CUSTOM_RDT_L3_WAY': '3', CLOSID: '1'},
     'resources1:CUSTOM_RDT_L3_WAY: ovs-rdt reads '
     'resources:CUSTOM_RDT_L3_WAY only, not in a request group: write it '
     'without the suffix "1"'),
    ({'resources:CUSTOM_RDT_L3_WAYS': '3'},
     'resources:CUSTOM_RDT_L3_WAYS: unknown ovs-rdt resource class'),
    ({WAYS: '6', CLOSID: '1', 'rdt:pool': 'hp'},
     'resources:CUSTOM_RDT_L3_WAY and rdt:pool exclude each other'),
    ({WAYS: '6', CLOSID: '1', 'rdt:l3_ways': 'x'},
     "rdt:l3_ways: 'x' is not a whole number"),
])
def test_what_placement_cannot_count_is_refused(specs: dict,
                                                message: str) -> None:
    assert refused(request.from_extra_specs, specs).startswith(message)


def test_one_key_at_a_time_as_nova_api_validates() -> None:
    request.check_extra_spec(WAYS, '0')
    request.check_extra_spec(CLOSID, '1')
    assert refused(request.check_extra_spec, CLOSID, '2') == \
        "resources:CUSTOM_RDT_CLOSID: '2' must be from 0 to 1"
    assert refused(request.check_extra_spec, WAYS, '-1') == \
        "resources:CUSTOM_RDT_L3_WAY: '-1' is not a whole number"


@pytest.mark.parametrize('key, ours', [
    ('rdt:l3_ways', True), (WAYS, True), ('resources2:CUSTOM_RDT_X', True),
    ('resources:VCPU', False), ('trait:CUSTOM_RDT_L3_CAT', False),
    ('hw:cpu_policy', False), ('quota:CUSTOM_RDT_L3_WAY', False)])
def test_which_keys_are_ours(key: str, ours: bool) -> None:
    assert request.is_ours(key) is ours
    # the hook's cheap look before it imports the rules misses none
    assert domain._maybe_ours(key) or not ours


# -- schedulable: what the scheduler filter refuses ---------------------------
@pytest.mark.parametrize('specs', [
    {WAYS: '6', CLOSID: '1'},
    {WAYS: '6', CLOSID: '1', 'rdt:mb_percent': '40',
     'trait:CUSTOM_RDT_MB_PERCENT': 'required'},
    {'rdt:pool': 'hp.v2', 'trait:CUSTOM_RDT_POOL_HP_V2': 'required'},
    {'hw:cpu_policy': 'dedicated'},
])
def test_schedulable(specs: dict) -> None:
    placement.schedulable(specs)


@pytest.mark.parametrize('specs, message', [
    ({'rdt:l3_ways': '3'},
     'rdt:l3_ways=3 is not counted by Placement: ask '
     'resources:CUSTOM_RDT_L3_WAY=<ways in all> and '
     'resources:CUSTOM_RDT_CLOSID=1 instead (python3 -m nova_plugin.upgrade '
     'lists what to set)'),
    ({'rdt:l3_kib': '4096'}, 'rdt:l3_kib=4096 is not counted by Placement'),
    ({'rdt:pool': 'hp'}, 'rdt:pool needs trait:CUSTOM_RDT_POOL_HP=required '
                         'too: only the hosts that serve it have that trait'),
    ({'rdt:pool': 'hp', 'trait:CUSTOM_RDT_POOL_HP': 'forbidden'},
     'rdt:pool needs trait:CUSTOM_RDT_POOL_HP=required'),
    ({WAYS: '2', CLOSID: '1', 'rdt:mb_mbps': '500'},
     'rdt:mb_mbps needs trait:CUSTOM_RDT_MB_MBPS=required too'),
    ({WAYS: '2'}, 'resources:CUSTOM_RDT_L3_WAY=2 needs'),
    ({'rdt:l3_way': '2'}, 'rdt:l3_way: unknown ovs-rdt key'),
])
def test_not_schedulable(specs: dict, message: str) -> None:
    assert refused(placement.schedulable, specs).startswith(message)


# -- advice: 0.3's flavors ----------------------------------------------------
def test_advice_for_a_pinned_flavor_is_the_same_on_every_host() -> None:
    todo = placement.advice({'rdt:l3_ways': '3', 'hw:cpu_policy': 'dedicated',
                             'rdt:mb_percent': '50'}, cache_groups=2)
    assert todo.set == {WAYS: '3', CLOSID: '1',
                        'trait:CUSTOM_RDT_MB_PERCENT': 'required'}
    assert todo.unset == ['rdt:l3_ways']
    assert todo.notes == ['3 way(s) x 1 NUMA cell(s)']
    two = placement.advice({'rdt:l3_ways': '3', 'hw:numa_nodes': '2'}, 4)
    assert two.set[WAYS] == '6'


def test_advice_for_an_unpinned_flavor_spans_the_cache_groups() -> None:
    todo = placement.advice({'rdt:l3_ways': '3'}, cache_groups=2)
    assert todo.set == {WAYS: '6', CLOSID: '1'}
    assert '2 cache groups' in todo.notes[0]
    assert placement.advice({'rdt:l3_ways': '3'}, 1).set[WAYS] == '3'


def test_advice_for_0_3_placement_flavors() -> None:
    """0.3's docs asked rdt:l3_ways and resources (ways x domains): the
    count stays resources', rdt:l3_ways goes; on EPYC (12 L3s per node)
    0.3's count was per CCD: told so.
    """
    xeon = placement.advice({'rdt:l3_ways': '3', WAYS: '6', CLOSID: '1'}, 2)
    assert (xeon.set, xeon.unset, xeon.notes) == ({}, ['rdt:l3_ways'], [])
    epyc = placement.advice({'rdt:l3_ways': '2', WAYS: '24', CLOSID: '1',
                             'hw:numa_nodes': '1'}, 2)
    assert epyc.unset == ['rdt:l3_ways']
    assert epyc.notes == [
        'resources:CUSTOM_RDT_L3_WAY=24 holds 24 way(s) per cache group on '
        'its NUMA cells, not the 2 of rdt:l3_ways: since 0.4 it is the ways '
        'in all, spread over the cache groups the instance spans; set 2 for '
        '2 per group']


def test_no_advice() -> None:
    assert not placement.advice({WAYS: '6', CLOSID: '1'}, 2)
    assert not placement.advice({'hw:cpu_policy': 'dedicated'}, 2)
    pool = placement.advice({'rdt:pool': 'hp'}, 2)
    assert pool.set == {'trait:CUSTOM_RDT_POOL_HP': 'required'}
    broken = placement.advice({'rdt:l3_ways': 'x'}, 2)
    assert broken.notes == ["fix it first: rdt:l3_ways: 'x' is not a whole "
                            'number']
