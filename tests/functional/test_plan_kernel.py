"""Write ordering, undo and layout stability against the mounted emulator.

Each case drives a sequence the kernel's resctrl rules can refuse half-way
(rdtgroup.c, ctrlmondata.c: overlaps with exclusive groups, shareable_bits,
the mkdir default mask, MB ranges) and checks the final state, or that a
failure leaves the previous state exactly.
"""
from __future__ import annotations

import os

import pytest

from ovs_rdt.conf import Settings
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Request
from ovs_rdt.exceptions import AllocationError, InvalidMask, ResctrlError
from ovs_rdt.manager import CacheManager
from ovs_rdt import desired, transaction
from ovs_rdt.resctrl import Resctrl
from tests import schemata as schemata_text

E7 = 'xeon-e7-8890-v4'
E7_DOMAINS = (0, 1, 2, 3)


def state(emu):
    """Every group's schemata and mode, as the kernel shows them."""
    out = {}
    for name in [''] + sorted(os.listdir(emu.root)):
        if name in ('info', 'mon_data', 'mon_groups') or \
                not os.path.isdir(emu.path(name)):
            continue
        with open(emu.path(name, 'schemata')) as fh:
            schemata = ' '.join(fh.read().split())
        with open(emu.path(name, 'mode')) as fh:
            out[name or '/'] = (schemata, fh.read().strip())
    return out


def l3(emu, group=''):
    with open(emu.path(group, 'schemata')) as fh:
        return schemata_text.masks(fh.read())


def mode(emu, group):
    with open(emu.path(group, 'mode')) as fh:
        return fh.read().strip()


def write(emu, group, name, text):
    with open(emu.path(group, name), 'w') as fh:
        fh.write(text)


class Flaky(Resctrl):
    """Refuses the ``nth`` write of a kind (as a racing tool could)."""

    def __init__(self, root, sysfs, op, group=None, nth=1):
        super().__init__(root, sysfs)
        self.fail_op, self.fail_group, self.left = op, group, nth

    def _maybe(self, op, group):
        if op == self.fail_op and self.fail_group in (None, group):
            self.left -= 1
            if self.left == 0:
                raise ResctrlError(self.path(group, op), op, 22,
                                   'injected failure')

    def write_schemata(self, name, text):
        self._maybe('schemata', name)
        super().write_schemata(name, text)

    def write_mode(self, name, value):
        self._maybe('mode', name)
        super().write_mode(name, value)


def manager(emu, rc=None, **allocation):
    allocation.setdefault('system_min_ways', 2)
    pools = allocation.pop('pools', {})
    settings = Settings.defaults(
        resctrl={'root': emu.root, 'sysfs_cpu_root': emu.sysfs},
        allocation=allocation, pools=pools)
    return CacheManager(rc or Resctrl(emu.root, emu.sysfs), settings)


def all4(ways):
    return {d: ways for d in E7_DOMAINS}


def test_isolated_groups_avoid_shareable_bits(emulator_factory):
    # info/L3/shareable_bits = 600: ways the hardware (I/O) fills too; the
    # kernel refuses "exclusive" on a mask overlapping them.
    emu = emulator_factory(extra_args=['--set', 'shareable_bits=0x600'])
    mgr = manager(emu)
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 2, 1: 2}))
    # Packed at the bottom, away from the I/O ways, so that the default
    # group's run reaches into them instead of stranding them.
    assert l3(emu, 'ovsrdt-vm-a') == {0: 0x003, 1: 0x003}
    assert l3(emu, '') == {0: 0x7fc, 1: 0x7fc}
    assert mode(emu, 'ovsrdt-vm-a') == 'exclusive'
    # A shared (not isolated) pool may use them.
    mgr = manager(emu, pools={'noisy': {'l3_ways': 1}})
    mgr.apply()
    assert CBM(l3(emu, 'ovsrdt-pool-noisy')[0], 11).overlaps(CBM(0x600, 11))
    before = state(emu)
    bad = manager(emu, pools={'hp': {'l3_cbm': '700', 'isolated': True}})
    with pytest.raises(InvalidMask, match='ovsrdt-pool-hp l3_cbm on domain 0 '
                       '700 is isolated but overlaps .*shareable_bits 600'):
        bad.apply()
    assert state(emu) == before


def test_repinned_vm_follows_the_default_group_where_it_left(
        emulator_factory):
    # A foreign exclusive group leaves two 4-way runs on domain 1: the
    # default group holds the lower, vm-a the upper.  Re-pinning vm-a to
    # domain 0 frees its ways on domain 1, where it now follows the default
    # group: it must drop to shareable before that write, or the kernel
    # refuses "Overlaps with exclusive group".  The freed ways stay free
    # where they are (the foreign group parts them from the default
    # group's run).
    emu = emulator_factory()
    os.mkdir(emu.path('COS1'))
    write(emu, 'COS1', 'schemata', 'L3:0=70;1=70\n')
    write(emu, '', 'schemata', 'L3:0=f;1=f\n')
    write(emu, 'COS1', 'mode', 'exclusive\n')
    mgr = manager(emu)
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 4, 1: 4}))
    assert l3(emu, 'ovsrdt-vm-a') == {0: 0x780, 1: 0x780}
    assert mode(emu, 'ovsrdt-vm-a') == 'exclusive'
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 4}))
    assert l3(emu) == {0: 0x00f, 1: 0x00f}
    assert l3(emu, 'ovsrdt-vm-a') == {0: 0x780, 1: 0x00f}
    assert mode(emu, 'ovsrdt-vm-a') == 'shareable'
    assert mgr.preview().steps == []
    assert mgr.preview().free[1] == 4 + 4 - 2


def test_mkdir_with_a_lone_free_way_below_an_exclusive_group(emulator_factory):
    # min_cbm_bits = 2: the kernel gives a new group the lowest run of the
    # ways no exclusive group holds; with way 0 alone below the isolated
    # pool that run is one way and mkdir fails "No space on L3:0" unless
    # the pool steps aside for the mkdir.
    emu = emulator_factory(extra_args=['--set', 'min_cbm_bits=2'])
    mgr = manager(emu, pools={'hp': {'l3_cbm': '6', 'isolated': True}})
    mgr.apply()
    assert l3(emu) == {0: 0x7f8, 1: 0x7f8}
    assert mode(emu, 'ovsrdt-pool-hp') == 'exclusive'
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 2, 1: 2}))
    assert l3(emu, 'ovsrdt-vm-a') == {0: 0x600, 1: 0x600}
    assert l3(emu) == {0: 0x1f8, 1: 0x1f8}
    assert mode(emu, 'ovsrdt-pool-hp') == 'exclusive'
    assert mode(emu, 'ovsrdt-vm-a') == 'exclusive'


def test_failure_after_new_groups_went_exclusive_restores_all(
        emulator_factory):
    emu = emulator_factory(E7)
    before = state(emu)
    rc = Flaky(emu.root, emu.sysfs, 'mode', 'ovsrdt-pool-b')
    mgr = manager(emu, rc, pools={'a': {'l3_ways': 3, 'isolated': True},
                                  'b': {'l3_ways': 2, 'isolated': True}})
    with pytest.raises(ResctrlError, match='injected'):
        mgr.apply()
    # ovsrdt-pool-a had gone exclusive: it is set back to shareable before
    # the default group gets its ways back, then removed.
    assert state(emu) == before


def test_failed_release_leaves_everything_as_it_was(emulator_factory):
    emu = emulator_factory(E7)
    mgr = manager(emu)
    mgr.allocate(Request('ovsrdt-vm-a', ways=all4(3), mb_percent=50))
    mgr.allocate(Request('ovsrdt-vm-b', ways={1: 2, 2: 4}))
    mgr.allocate(Request('ovsrdt-vm-c', ways=all4(2)))
    before = state(emu)
    # c is next to the default group's run, which grows into its ways:
    # that write fails.
    flaky = manager(emu, Flaky(emu.root, emu.sysfs, 'schemata', ''))
    with pytest.raises(ResctrlError, match='injected'):
        flaky.release('ovsrdt-vm-c')
    # The group is still there, with its tasks: the removal comes after
    # every write that can be undone.
    assert state(emu) == before
    # (b holds ways on domains 1 and 2 only: elsewhere it follows the
    # default group.)
    held = {'ovsrdt-vm-a': E7_DOMAINS, 'ovsrdt-vm-b': (1, 2)}

    def masks() -> dict[str, dict[int, int]]:
        return {n: {d: l3(emu, n)[d] for d in doms}
                for n, doms in held.items()}
    kept = masks()
    root = l3(emu)
    mgr.release('ovsrdt-vm-c')
    assert not os.path.exists(emu.path('ovsrdt-vm-c'))
    assert masks() == kept      # neither moved
    assert all(CBM(l3(emu)[d], 20).count == CBM(root[d], 20).count + 2
               for d in E7_DOMAINS), l3(emu)
    assert mgr.preview().steps == []


def test_default_group_shrinking_on_one_domain_growing_on_another(
        emulator_factory):
    # vm-a (below vm-b, above the default group) leaves domain 0 and grows
    # on domain 1 into ways the default group gives up; on domain 0 the
    # default group grows into the ways vm-a leaves.
    emu = emulator_factory(E7)
    mgr = manager(emu)
    mgr.allocate(Request('ovsrdt-vm-b', ways=all4(2), mb_percent=30))
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 2, 1: 2}))
    before = state(emu)
    move = Request('ovsrdt-vm-a', ways={1: 4})
    # A refused write half-way: everything goes back.
    for nth in (1, 2, 3):
        flaky = manager(emu, Flaky(emu.root, emu.sysfs, 'schemata', nth=nth))
        with pytest.raises(ResctrlError, match='injected'):
            flaky.allocate(move)
        assert state(emu) == before
    # A crash half-way (the process killed, no undo): after any prefix of
    # the writes, every group still tells which ways it holds, so the next
    # operation neither loses nor invents an allocation.
    cut = 1
    while True:
        target = mgr.preview(change=move)
        writes = [s for s in target.steps if s.op == 'schemata']
        assert writes[0].group == '' and writes[-1].group == ''
        if cut >= len(target.steps):
            break
        with mgr.resctrl.lock():
            for step in target.steps[:cut]:
                transaction.apply_step(mgr.resctrl, step,
                                       lambda *_: None)
        held = {r.name: r.ways for r in desired.desired(
            mgr.settings, mgr.resctrl.platform(), mgr.resctrl.groups())[0]}
        assert held['ovsrdt-vm-b'] == all4(2), (cut, state(emu))
        assert held['ovsrdt-vm-a'] in ({0: 2, 1: 2}, {1: 4}, {1: 2},
                                       {}), cut
        mgr.allocate(Request('ovsrdt-vm-a', ways={0: 2, 1: 2}))
        root = l3(emu)
        for name, ways in (('ovsrdt-vm-a', {0: 2, 1: 2}),
                           ('ovsrdt-vm-b', all4(2))):
            masks = l3(emu, name)
            for dom in E7_DOMAINS:
                mask = CBM(masks[dom], 20)
                if dom in ways:
                    assert mask.count == ways[dom] and \
                        not mask.overlaps(CBM(root[dom], 20)), (cut, name)
                else:
                    assert masks[dom] == root[dom], (cut, name)
        assert mode(emu, 'ovsrdt-vm-b') == 'exclusive'
        assert mgr.preview().steps == []
        cut += 1
    mgr.allocate(move)
    assert CBM(l3(emu, 'ovsrdt-vm-a')[1], 20).count == 4
    assert l3(emu, 'ovsrdt-vm-a')[0] == l3(emu)[0]
    assert mgr.preview().steps == []


def test_layout_is_stable_around_a_foreign_one_way_group(emulator_factory):
    # A 1-way foreign group at way 3 (a libvirt <cachetune>, a pqos COS)
    # splits the free ways in two.  Later operations must not shuffle the
    # VMs that are already placed (a move means cold caches for them).
    emu = emulator_factory()
    os.mkdir(emu.path('COS1'))
    write(emu, 'COS1', 'schemata', 'L3:0=8;1=8\n')
    mgr = manager(emu, system_min_ways=1)
    for name, ways in (('a', {0: 3}), ('b', {1: 3}), ('c', {0: 3, 1: 3})):
        mgr.allocate(Request('ovsrdt-vm-' + name, ways=ways))
        assert mgr.preview().steps == [], name
    placed = {n: l3(emu, 'ovsrdt-vm-' + n) for n in 'abc'}
    mgr.allocate(Request('ovsrdt-vm-d', ways={1: 1}))
    assert l3(emu, 'ovsrdt-vm-a')[0] == placed['a'][0]
    assert l3(emu, 'ovsrdt-vm-b')[1] == placed['b'][1]
    assert l3(emu, 'ovsrdt-vm-c') == placed['c']


def test_mb_lines_only_where_bandwidth_changes(emulator_factory):
    # With a non-linear MBA the kernel refuses every MB value; allocations
    # without a cap must not write any.
    emu = emulator_factory(extra_args=['--set', 'delay_linear=0'])
    mgr = manager(emu)
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 2, 1: 2}))
    mgr.allocate(Request('ovsrdt-vm-b', ways={0: 2, 1: 2}))
    mgr.release('ovsrdt-vm-a')
    assert l3(emu, 'ovsrdt-vm-b') == {0: 0x180, 1: 0x180}      # kept
    before = state(emu)
    with pytest.raises(AllocationError, match="ovsrdt-vm-c mb_percent: '50' "
                       'cannot be met on this host: .*delay_linear is 0'):
        mgr.allocate(Request('ovsrdt-vm-c', ways={0: 1}, mb_percent=50))
    assert state(emu) == before


def test_mb_percent_below_the_platform_minimum(emulated_resctrl):
    emu = emulated_resctrl
    before = state(emu)
    with pytest.raises(AllocationError, match="ovsrdt-vm-a mb_percent: '5' "
                       "is below this host's minimum memory bandwidth, 10%"):
        manager(emu).allocate(Request('ovsrdt-vm-a', ways={0: 1},
                                      mb_percent=5))
    with pytest.raises(Exception, match=r"\[pool:p\] mb_percent: '5' is "
                       r"below this host's minimum memory bandwidth, 10%"):
        manager(emu, pools={'p': {'l3_ways': 1, 'mb_percent': 5}}).apply()
    assert state(emu) == before


def test_a_layout_made_once_always_fits_again(emulated_resctrl):
    # A foreign group at ways 4-5.  After these three VMs, re-packing in
    # position order no longer fits vm-b on domain 0: every later operation
    # (a VM on domain 1, the agent's next PMD update) would fail with
    # "needs 3 contiguous ways" although nothing asked for more.
    emu = emulated_resctrl
    os.mkdir(emu.path('COS1'))
    write(emu, 'COS1', 'schemata', 'L3:0=30;1=30\n')
    mgr = manager(emu, system_min_ways=1)
    mgr.allocate(Request('ovsrdt-vm-a', ways={0: 2, 1: 2}))
    mgr.allocate(Request('ovsrdt-vm-b', ways={0: 3, 1: 3}))
    mgr.allocate(Request('ovsrdt-vm-c', ways={0: 3}))
    assert mgr.preview().steps == []
    placed = {n: l3(emu, 'ovsrdt-vm-' + n) for n in 'abc'}
    mgr.allocate(Request('ovsrdt-vm-d', ways={1: 1}))
    assert l3(emu, 'ovsrdt-vm-a') == placed['a']
    assert l3(emu, 'ovsrdt-vm-b') == placed['b']
    assert l3(emu, 'ovsrdt-vm-c')[0] == placed['c'][0]


def _allocate_many(root, sysfs, prefix):
    mgr = manager(type('E', (), {'root': root, 'sysfs': sysfs})())
    for i in range(3):
        mgr.allocate(Request('ovsrdt-vm-%s%d' % (prefix, i), ways=all4(1)))


def test_concurrent_processes_lose_no_update(emulator_factory):
    # Each process plans from what it read under flock(LOCK_EX): without
    # the lock, two plans made from the same state would overwrite each
    # other's masks.
    import multiprocessing
    emu = emulator_factory(E7)
    ctx = multiprocessing.get_context('fork')
    procs = [ctx.Process(target=_allocate_many,
                         args=(emu.root, emu.sysfs, p)) for p in 'abcd']
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    mgr = manager(emu)
    names = ['ovsrdt-vm-%s%d' % (p, i) for p in 'abcd' for i in range(3)]
    seen = {d: CBM.empty(20) for d in E7_DOMAINS}
    for name in names:
        assert mode(emu, name) == 'exclusive'
        for dom, value in l3(emu, name).items():
            mask = CBM(value, 20)
            assert mask.count == 1 and not mask.overlaps(seen[dom])
            seen[dom] |= mask
    assert all(seen[d] == CBM(0xfff00, 20) for d in E7_DOMAINS)
    assert l3(emu) == all4(0xff)
    assert mgr.preview().steps == []
