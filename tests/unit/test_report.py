import os

from ovs_rdt.cmd import report
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Group, Platform
from ovs_rdt import members


def plan_with(colour=False):
    plat = Platform(11, 16, (0, 1), cache_bytes={0: 28835840, 1: 28835840})
    groups = [
        Group('', {0: CBM(0xc, 11), 1: CBM(0xc, 11)}, tasks=[1, 2, 3],
              cpus=frozenset(range(40))),
        Group('ovsrdt-pool-hp', {0: CBM(0x7f0, 11), 1: CBM(0x7f0, 11)},
              mode='exclusive', tasks=[10, 11]),
        Group('ovsrdt-pool-noisy', {0: CBM(0x2, 11), 1: CBM(0x2, 11)},
              mb={0: 50, 1: 50}, tasks=[20]),
        Group('COS3', {0: CBM(0x7ff, 11), 1: CBM(0x7ff, 11)}),
    ]
    fake = {
        'ovsrdt-pool-hp': [{'kind': 'ovs-vswitchd', 'name': 'ovs-vswitchd',
                            'pid': 9, 'tids': [10, 11, 12],
                            'pmds': {0: 10, 1: 11}}],
        'ovsrdt-pool-noisy': [{'kind': 'vm', 'name': 'noisy1', 'uuid': 'u',
                               'pid': 19, 'tids': [20, 21],
                               'vcpu_tids': [20]}],
    }
    return report.build(plat, groups, lambda g: fake.get(g.name, []))


def test_build_rows_sizes_and_unused_ways():
    plan = plan_with()
    dom = plan['domains'][0]
    assert dom['size_kib'] == 28160 and dom['way_kib'] == 2560
    rows = {r['group']: r for r in dom['groups']}
    assert rows['ovsrdt-pool-hp']['kib'] == 17920
    assert rows['ovsrdt-pool-hp']['map'] == '#######....'
    assert rows['/']['kind'] == 'default' and rows['/']['tasks'] == 3
    assert rows['COS3']['kind'] == 'foreign'
    assert rows['ovsrdt-pool-noisy']['mb_percent'] == 50
    # The foreign group covers every way: none unused.
    assert dom['unused_ways'] == 0
    assert plan['platform']['closids_used'] == 4


def test_render_table4_style():
    text = report.render(plan_with())
    lines = text.splitlines()
    hp = next(ln for ln in lines if 'ovsrdt-pool-hp' in ln)
    assert '0x7f0' in hp and '17920' in hp
    assert '## ## ## ## ## ## ##  .  .  .  .' in hp
    assert 'pmd=0 (TID 10), pmd=1 (TID 11), ovs-vswitchd (1 threads)' in hp
    noisy = next(ln for ln in lines if 'ovsrdt-pool-noisy' in ln)
    assert 'vm=noisy1 (vCPU TIDs 20, +1 QEMU threads)' in noisy
    assert 'MB 50%' in noisy
    assert 'OS and everything else (3 tasks, CPUs 0-39)' in text
    assert '\033[' not in text
    assert '\033[' in report.render(plan_with(), colour=True)


def test_members_of_a_real_process():
    me = members.describe([os.getpid(), 999999999])
    assert len(me) == 1
    assert me[0]['kind'] == 'process' and me[0]['pid'] == os.getpid()
    assert '(pid %d, 1 threads)' % os.getpid() in members.summary(me[0])


def test_members_named_as_the_metrics_labels_name_them():
    uuid = '0b0580e0-4511-437a-855b-3e988e147bd5'
    vm = {'kind': 'vm', 'name': 'sut', 'uuid': uuid.upper(), 'pid': 5,
          'tids': [5, 6], 'vcpu_tids': [6]}
    ovs = {'kind': 'ovs-vswitchd', 'name': 'ovs-vswitchd', 'pid': 9,
           'tids': [9, 10, 11], 'pmds': {1: 11, 0: 10}}
    bare = {'kind': 'ovs-vswitchd', 'name': 'ovs-vswitchd', 'pid': 9,
            'tids': [10], 'pmds': {0: 10}}
    other = {'kind': 'process', 'name': 'memtester', 'pid': 7, 'tids': [7]}
    assert members.names([vm, ovs, other]) == [
        'vm=sut', 'pmd=0,1', 'ovs-vswitchd', 'memtester[7]']
    assert members.names([bare]) == ['pmd=0']
    assert members.vm_name('ovsrdt-vm-' + uuid, [other, vm]) == 'sut'
    assert members.vm_name('ovsrdt-vm-' + uuid.replace('0b', 'ef'), [vm]) == ''
    assert members.vm_name('ovsrdt-vm-ab-cd', [vm]) == ''   # not a UUID
    assert members.vm_name('ovsrdt-pool-hp', [vm]) == ''
    assert members.summary(vm) == 'vm=sut (vCPU TIDs 6, +1 QEMU threads)'


# -- what the platform is (issue 14) ------------------------------------------
def test_status_shows_cdp_masks_and_platform():
    from ovs_rdt.core.model import MBInfo, UNIT_MBPS
    plat = Platform(11, 8, (0, 1), cache_bytes={0: 28835840, 1: 28835840},
                    cdp=True, mb=MBInfo(10, 10, True, (0, 1), UNIT_MBPS),
                    mbm_assign_mode='mbm_event')
    both = {0: CBM(0x700, 11), 1: CBM(0x700, 11)}
    groups = [Group('', {0: CBM(0xff, 11), 1: CBM(0xff, 11)},
                    l3code={0: CBM(0xff, 11), 1: CBM(0xff, 11)},
                    l3data={0: CBM(0x3f, 11), 1: CBM(0x3f, 11)}),
              Group('ovsrdt-pool-hp', both, mb={0: 2500, 1: 4294967295},
                    l3code=both, l3data=both)]
    plan = report.build(plat, groups, lambda g: [])
    assert plan['platform']['cat'] == 'L3 CAT with CDP'
    assert plan['platform']['mb_unit'] == 'MiB/s'
    assert plan['platform']['mb_max'] == 4294967295
    assert plan['platform']['l3_domains'] == 2
    assert plan['platform']['mbm_assign_mode'] == 'mbm_event'
    row = plan['domains'][0]['groups'][0]
    assert (row['cbm_code'], row['cbm_data']) == ('700', '700')
    assert row['mb'] == 2500 and row['mb_percent'] is None
    text = report.render(plan)
    assert 'Platform: L3 CAT with CDP, 11-bit CBM 7ff, 8 CLOSIDs' in text
    assert '2 L3 cache domain(s), MBA in MiB/s, mba_MBps (mb_mbps)' in text
    assert 'MBM counters: mbm_event mode' in text
    assert 'CODE/DATA' in text
    lines = text.splitlines()
    hp = [ln for ln in lines if 'ovsrdt-pool-hp' in ln]
    assert '700/700' in hp[0] and 'MB 2500 MiB/s' in hp[0]
    assert 'MB' not in hp[1].split('##')[-1]     # uncapped on domain 1
    root = next(ln for ln in lines if 'default (root)' in ln)
    assert 'ff/3f' in root


def test_status_shows_amd_io_alloc_and_smba():
    from ovs_rdt.core.model import MBInfo, UNIT_AMD
    plat = Platform(16, 15, (0, 1), smba=True, io_alloc='enabled',
                    io_alloc_cbm={0: CBM(0x3, 16), 1: CBM(0x3, 16)},
                    mb=MBInfo(0, 1, False, (0, 1), UNIT_AMD, 2048))
    groups = [Group('', {0: CBM(0xffff, 16), 1: CBM(0xffff, 16)}),
              Group('ovsrdt-pool-hp', {0: CBM(0xf000, 16),
                                       1: CBM(0xf000, 16)},
                    mb={0: 9, 1: 2048})]
    plan = report.build(plat, groups, lambda g: [])
    assert plan['platform']['io_alloc_ways'] == {'0': 2, '1': 2}
    assert plan['platform']['smba'] is True
    text = report.render(plan)
    assert 'MBA in 1/8 GB/s, AMD (mb_mbps, converted; 2048 = no limit)' in text
    assert 'io_alloc enabled: ways for I/O domain 0 3 (2)' in text
    assert 'SMBA (slow memory bandwidth) present' in text
    assert 'MB 9 x 1/8 GB/s (1072 MiB/s)' in text


def test_policy_state_names_pools_without_an_mbm_counter():
    import dataclasses

    from ovs_rdt.agent.policy_state import PolicyState
    from ovs_rdt.cmd.report import render_policy
    state = PolicyState(pid=1, time=0.0, high_priority='hp', best_effort='be',
                        hp_min_ways=1, hp_max_ways=4, be_min_ways=2, budget=6,
                        interval=1.0, mba=False, error=None, domains={},
                        uncounted=('ovsrdt-pool-hp:0', 'ovsrdt-pool-hp:3'))
    text = render_policy(state)
    assert ('no MBM counter assigned (misses not measured, drops and '
            'occupancy still count; the agent logs why): ovsrdt-pool-hp on L3 '
            'domain 0, ovsrdt-pool-hp on L3 domain 3') in text
    state = dataclasses.replace(state, uncounted=())
    assert 'no MBM counter' not in render_policy(state)


def test_numa_to_l3_says_sub_numa_clustering():
    from ovs_rdt.cmd.report import numa_text
    from ovs_rdt.core.topology import nodes_per_l3
    snc = {n: frozenset({n // 3}) for n in range(6)}
    assert nodes_per_l3(snc) == 3
    assert numa_text(snc) == ('NUMA to L3: Sub-NUMA Clustering, 3 NUMA nodes '
                              'per L3: nodes 0-2 -> L3 0; nodes 3-5 -> L3 1')
    amd = {0: frozenset(range(12)), 1: frozenset(range(12, 24))}
    assert nodes_per_l3(amd) == 1
    assert numa_text(amd) == 'NUMA to L3: node 0 -> L3 0-11; node 1 -> L3 12-23'
