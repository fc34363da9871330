"""ovs_rdt.core.sizing: peaks -> ways -> lines to paste (seed 000 Table 3)."""
from ovs_rdt.core.model import PMD_GROUP, ROOT
from ovs_rdt.core import sizing

WAY = 2621440          # Xeon Gold 6230: 28835840 bytes / 11 ways
KB = 1024              # seed 000's KB (2560 KB per way)


def test_ways_for_rounds_up():
    assert sizing.ways_for(0, WAY) == 0
    assert sizing.ways_for(1, WAY) == 1
    assert sizing.ways_for(WAY, WAY) == 1
    assert sizing.ways_for(WAY + 1, WAY) == 2
    assert sizing.ways_for(5, 0) == 0


def test_table3_footprints():
    """vswitchd 720 KB, PMDs 15000 KB, VM 5000 KB: 1, 6 and 2 ways; PMDs and
    vswitchd together 7 (Table 4's CLOS 0), all three together 9.
    """
    peaks = sizing.Peaks()
    for scale in (0.5, 1.0, 0.8):          # the peak is kept, not the last
        peaks.add({'prof-vswitchd': {0: int(720 * KB * scale)},
                   'prof-pmd': {0: int(15000 * KB * scale)},
                   'prof-sut': {0: int(5000 * KB * scale)}})
    plan = sizing.plan(peaks, {0: WAY}, 11, together=True)
    ways = {g['group']: g['ways'] for g in plan['groups']}
    assert ways == {'prof-vswitchd': 1, 'prof-pmd': 6, 'prof-sut': 2}
    assert plan['together']['ways'] == 9
    assert plan['together']['paste'] == ['[pool:NAME]', 'l3_ways = 9']
    two = sizing.Peaks()
    two.add({'prof-vswitchd': {0: 720 * KB}, 'prof-pmd': {0: 15000 * KB}})
    assert sizing.plan(two, {0: WAY}, 11, together=True)['together'][
        'ways'] == 7
    assert plan['samples'] == 3


def test_together_is_the_peak_of_the_sum_not_the_sum_of_peaks():
    peaks = sizing.Peaks()
    peaks.add({'a': {0: 3 * WAY}, 'b': {0: 0}})
    peaks.add({'a': {0: 0}, 'b': {0: 3 * WAY}})
    plan = sizing.plan(peaks, {0: WAY}, 11, together=True)
    assert [g['ways'] for g in plan['groups']] == [3, 3]
    assert plan['together']['ways'] == 3


def test_paste_lines_per_kind():
    assert sizing.paste('ovsrdt-pool-hp', 7) == ['[pool:hp]', 'l3_ways = 7']
    assert sizing.paste(ROOT, 2) == ['[allocation]', 'system_min_ways = 2']
    assert sizing.paste(PMD_GROUP, 4) == [
        'ovs-vsctl set Open_vSwitch . other_config:rdt-pmd-l3-ways=4']
    vm = sizing.paste('ovsrdt-vm-8a1f0a6e-0d4c-4b0b-9d55-3c1f8b2a9e11', 3)
    assert vm[0].startswith('<rdt:l3 ways="3"/>')
    assert vm[1].startswith('rdt:l3_ways=3')
    assert 'COS3 is not an ovs-rdt group' in sizing.paste('COS3', 1)[0]


def test_plan_per_domain_filled_and_limits():
    peaks = sizing.Peaks()
    peaks.add({'ovsrdt-pool-hp': {0: 3 * WAY - 100, 1: WAY // 2},
               ROOT: {0: 0, 1: 0}, 'big': {0: 20 * WAY}})
    plan = sizing.plan(peaks, {0: WAY, 1: WAY}, 11, min_ways=2,
                       current={'ovsrdt-pool-hp': {0: 3, 1: 3}},
                       members={'ovsrdt-pool-hp': ['pmd=0,1', 'vm=sut']})
    groups = {g['group']: g for g in plan['groups']}
    assert [g['group'] for g in plan['groups']] == ['default', 'big',
                                                    'ovsrdt-pool-hp']
    hp = groups['ovsrdt-pool-hp']
    assert [d['ways'] for d in hp['domains']] == [3, 1]
    assert hp['ways'] == 3 and hp['filled'] and hp['domains'][0]['filled']
    assert not hp['domains'][1]['filled']
    # Nothing measured: the platform's minimum; too big: capped, not fitting.
    assert groups['default']['ways'] == 0
    assert groups['default']['paste'][1] == 'system_min_ways = 2'
    assert groups['big']['ways'] == 20 and not groups['big']['fits']
    assert groups['big']['paste'][0].endswith('11 ways would hold it')
    text = sizing.render(plan)
    assert 'pmd=0,1 vm=sut' in text and '(filled its 3 ways' in text
    assert '[pool:hp]\nl3_ways = 3' in text
    assert 'does not fit' in text
    assert plan['together'] is None
