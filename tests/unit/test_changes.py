"""What a plan does to whom (``apply --dry-run``, ``status``): pure."""
from ovs_rdt.cmd import changes, report
from ovs_rdt.core import allocator
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Group, Platform, Request
from ovs_rdt import members

PLATFORM = Platform(11, 16, (0,), cache_bytes={0: 28835840})


def vm(name, tids=(5, 6, 7, 8, 9), vcpus=(6, 7)):
    return {'kind': 'vm', 'name': name, 'uuid': 'u', 'pid': tids[0],
            'tids': list(tids), 'vcpu_tids': list(vcpus)}


def group(name, mask):
    return Group(name, {0: CBM(mask, 11)})


def plan():
    """Pools a, b, c from the top, the default group keeps 4 ways; b is no
    longer configured and d (4 ways) comes: c moves to make room for d.
    """
    groups = [group('', 0x3f), group('ovsrdt-pool-a', 0x600),
              group('ovsrdt-pool-b', 0x180), group('ovsrdt-pool-c', 0x040)]
    return allocator.plan(PLATFORM, groups, [
        Request('ovsrdt-pool-' + p, ways={0: n}, exclusive=False)
        for p, n in (('a', 2), ('c', 1), ('d', 4))], 4)


def test_each_write_says_what_it_does_to_whom():
    lines = changes.describe(plan(), {'ovsrdt-pool-b': [vm('vm1')],
                                      'ovsrdt-pool-c': [vm('vm2')]},
                             ['a', 'c', 'd'])
    at = lines.index('rmdir ovsrdt-pool-b')
    assert lines[at + 1] == (
        '    removes pool b (not in [allocation] pools): it holds running VM '
        'vm1 (2 vCPU threads, 3 other QEMU threads); the kernel moves them '
        'to the default group')
    at = lines.index('schemata ovsrdt-pool-c L3:0=100')
    assert lines[at + 1:at + 3] == [
        '    sets the masks of pool c, which holds running VM vm2 (2 vCPU '
        'threads, 3 other QEMU threads)',
        '    moves ovsrdt-pool-c on cache domain 0 from 40 to 100 to make '
        'room for ovsrdt-pool-d; its tasks stay in it, their cached data '
        'there is lost']
    assert lines[lines.index('mkdir ovsrdt-pool-d') + 1] == \
        '    creates pool d'
    assert '    sets the masks of pool d (no task)' in lines
    # Every write is there, in order, each followed by its effects.
    assert [ln for ln in lines if not ln.startswith(' ')] == \
        [str(step) for step in plan().steps]


def test_a_removed_group_without_tasks_and_other_members():
    said = changes.explain(plan(), {}, ['a', 'b', 'c', 'd'])
    steps = [str(s) for s in plan().steps]
    assert said[steps.index('rmdir ovsrdt-pool-b')] == [
        'removes pool b: it holds no task']
    ovs = {'kind': 'ovs-vswitchd', 'name': 'ovs-vswitchd', 'pid': 9,
           'tids': [9, 10, 11, 12], 'pmds': {0: 10, 1: 11}}
    other = {'kind': 'process', 'name': 'sleep', 'pid': 30, 'tids': [30]}
    assert members.prose([vm('x', (5, 6), (6,)), ovs, other]) == (
        'running VM x (1 vCPU thread, 1 other QEMU thread), OvS PMD threads '
        'of cores 0,1, 2 other ovs-vswitchd threads, sleep (pid 30, 1 '
        'thread)')


def test_status_says_whether_the_configuration_is_applied():
    root = '/sys/fs/resctrl'
    assert report.render_configuration(
        {'state': 'applied', 'error': None, 'writes': []}, root) == \
        'Configuration: applied (/sys/fs/resctrl holds what it asks)'
    text = report.render_configuration(
        {'state': 'invalid', 'writes': [],
         'error': '[pool:hp] l3_ways = 12 is more than the 11 ways of this '
                  'platform'}, root)
    assert text.startswith('Configuration: cannot be applied: [pool:hp] '
                           'l3_ways = 12 is more than the 11 ways')
    text = report.render_configuration(
        {'state': 'differs', 'error': None, 'writes': [
            {'write': 'rmdir ovsrdt-pool-b', 'effects': ['removes pool b']}]},
        root)
    assert text.splitlines() == [
        'Configuration: not applied: 1 write would make /sys/fs/resctrl what '
        'it asks ("ovs-rdt apply" makes them):',
        '  rmdir ovsrdt-pool-b', '      removes pool b']
    assert report.free_text({'vm_ways': 3, 'reserved_ways': 6,
                             'vm_held_ways': 2, 'pool_ways': 3,
                             'shared_pool_ways': 4}, 11) == (
        'free: 3 ways for a VM or an isolated pool, 4 for a pool that is not '
        'isolated (11 - 6 reserved for the default group, pools, OvS and '
        'other tools - 2 held by VMs)')
