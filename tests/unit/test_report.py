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
