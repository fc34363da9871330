import pytest

from ovs_rdt.core.allocator import plan
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Group, MBInfo, Platform, Request
from ovs_rdt.exceptions import InsufficientWays, InvalidMask, OutOfClosids

W = 11


def gold(**kw):
    kw.setdefault('mb', MBInfo(10, 10, True, (0, 1)))
    return Platform(W, 16, (0, 1), **kw)


def root(mask=0x7ff, domains=(0, 1)):
    return Group('', {d: CBM(mask, W) for d in domains})


def both(value):
    return {0: CBM(value, W), 1: CBM(value, W)}


def apply_plan(groups, result):
    """The group list as it is after the plan (for chained calls)."""
    out = []
    names = {g.name for g in groups}
    for g in groups:
        if g.name in result.remove:
            continue
        masks = result.l3.get(g.name, g.l3)
        mode = result.modes.get(g.name, g.mode)
        out.append(Group(g.name, dict(masks), result.mb.get(g.name, g.mb),
                         mode))
    for name in result.create:
        if name not in names:
            out.append(Group(name, dict(result.l3[name]),
                             result.mb.get(name), result.modes[name]))
    return out


def assert_no_overlap(result, names):
    for dom in (0, 1):
        seen = CBM.empty(W)
        for name in names:
            mask = result.l3[name][dom]
            assert not mask.overlaps(seen), (name, dom, mask, seen)
            seen |= mask


def test_table4_explicit_masks():
    reqs = [Request('ovsrdt-pool-hp', cbm=both(0x7f0)),
            Request('ovsrdt-pool-noisy', cbm=both(0x2), exclusive=False)]
    result = plan(gold(), [root()], reqs, 2)
    assert result.l3['ovsrdt-pool-hp'] == both(0x7f0)
    assert result.l3['ovsrdt-pool-noisy'] == both(0x2)
    # The default group: the largest run of what the pools leave.
    assert result.l3[''] == both(0xc)
    assert result.modes == {'ovsrdt-pool-hp': 'exclusive',
                            'ovsrdt-pool-noisy': 'shareable'}
    assert result.free == {0: 1, 1: 1}


def test_table4_by_way_counts_same_widths_no_overlap():
    reqs = [Request('ovsrdt-pool-hp', ways={0: 7, 1: 7}),
            Request('ovsrdt-pool-noisy', ways={0: 1, 1: 1}, exclusive=False)]
    result = plan(gold(), [root()], reqs, 2)
    for dom in (0, 1):
        assert result.l3['ovsrdt-pool-hp'][dom].count == 7
        assert result.l3['ovsrdt-pool-noisy'][dom].count == 1
        assert result.l3[''][dom].count == 3
        assert result.l3['ovsrdt-pool-hp'][dom].is_contiguous()
    assert_no_overlap(result, ['ovsrdt-pool-hp', 'ovsrdt-pool-noisy', ''])
    # One dedicated way more gives exactly Table 4's widths: 7 / 1 / 2.
    groups = apply_plan([root()], result)
    more = plan(gold(), groups, reqs + [Request('ovsrdt-vm-a', ways={0: 1,
                                                                     1: 1})], 2)
    assert [more.l3[n][0].count for n in
            ('ovsrdt-pool-hp', 'ovsrdt-pool-noisy', '')] == [7, 1, 2]


def test_system_min_ways_is_kept():
    reqs = [Request('ovsrdt-vm-a', ways={0: 9, 1: 9})]
    result = plan(gold(), [root()], reqs, 2)
    assert result.l3[''] == both(0x3)
    with pytest.raises(InsufficientWays) as err:
        plan(gold(), [root()], [Request('ovsrdt-vm-a', ways={0: 10, 1: 10})],
             2)
    assert 'ovsrdt-vm-a needs 10 ways on cache domain 0' in str(err.value)
    assert '2 kept for the system' in str(err.value)


def test_new_request_is_blamed_not_existing_ones():
    first = plan(gold(), [root()], [Request('ovsrdt-vm-a', ways={0: 8,
                                                                 1: 8})], 2)
    groups = apply_plan([root()], first)
    with pytest.raises(InsufficientWays, match='ovsrdt-vm-b needs 2 ways.*'
                       'only 1 of 11 are free'):
        plan(gold(), groups, [Request('ovsrdt-vm-a', ways={0: 8, 1: 8}),
                              Request('ovsrdt-vm-b', ways={0: 2, 1: 2})], 2)


def test_pinned_request_only_takes_ways_on_its_domain():
    result = plan(gold(), [root()], [Request('ovsrdt-vm-a', ways={0: 3})], 2)
    assert result.l3['ovsrdt-vm-a'][0] == CBM(0x700, W)
    # On domain 1 it follows the default group and holds nothing.
    assert result.l3['ovsrdt-vm-a'][1] == result.l3[''][1] == CBM(0x7ff, W)
    assert result.modes['ovsrdt-vm-a'] == 'shareable'
    assert result.free == {0: 6, 1: 9}


def test_release_repacks_so_free_ways_stay_contiguous():
    reqs = [Request('ovsrdt-vm-a', ways={0: 2, 1: 2}),
            Request('ovsrdt-vm-b', ways={0: 3, 1: 3}),
            Request('ovsrdt-vm-c', ways={0: 2, 1: 2})]
    groups = apply_plan([root()], plan(gold(), [root()], reqs, 2))
    assert groups[1].l3[0] == CBM(0x600, W)   # a at the top
    assert groups[3].l3[0] == CBM(0x030, W)   # c below b
    # b goes: c moves up next to a, the default group gets one run back.
    result = plan(gold(), groups, [reqs[0], reqs[2]], 2)
    assert result.remove == ['ovsrdt-vm-b']
    assert result.l3['ovsrdt-vm-c'][0] == CBM(0x180, W)
    assert result.l3[''][0] == CBM(0x07f, W)
    assert result.free[0] == 5
    # The groups that move or go drop to shareable first; the default
    # group grows last; the removal comes after every write that can be
    # undone (CLOSIDs permitting), exclusivity is restored at the end.
    ops = [(s.op, s.group, s.value) for s in result.steps]
    assert ops[:2] == [('mode', 'ovsrdt-vm-c', 'shareable'),
                       ('mode', 'ovsrdt-vm-b', 'shareable')]
    names = [op[:2] for op in ops]
    assert names.index(('schemata', '')) > names.index(('schemata',
                                                        'ovsrdt-vm-c'))
    assert names.index(('rmdir', 'ovsrdt-vm-b')) > names.index(('schemata',
                                                                ''))
    assert ops[-1] == ('mode', 'ovsrdt-vm-c', 'exclusive')


def test_repack_makes_room_for_a_request_that_only_fits_after_moving():
    # A hole of 2 ways above vm-c, 2 free below: a 4-way request fits
    # only once c moves up.
    groups = [root(0x00f),
              Group('ovsrdt-vm-a', both(0x600), mode='exclusive'),
              Group('ovsrdt-vm-c', both(0x060), mode='exclusive')]
    reqs = [Request('ovsrdt-vm-a', ways={0: 2, 1: 2}),
            Request('ovsrdt-vm-c', ways={0: 2, 1: 2}),
            Request('ovsrdt-vm-d', ways={0: 4, 1: 4})]
    result = plan(gold(), groups, reqs, 1)
    assert result.l3['ovsrdt-vm-c'][0] == CBM(0x180, W)
    assert result.l3['ovsrdt-vm-d'][0] == CBM(0x078, W)
    assert result.l3[''][0] == CBM(0x007, W)
    ops = [(s.op, s.group, s.value) for s in result.steps]
    # Moving exclusive groups: they drop to shareable first, back last.
    assert ops[0] == ('mode', 'ovsrdt-vm-c', 'shareable')
    assert ops[-1][0] == 'mode' and ops[-1][2] == 'exclusive'


def test_foreign_groups_are_obstacles_and_never_written():
    foreign = Group('COS1', both(0x180))
    result = plan(gold(), [root(), foreign],
                  [Request('ovsrdt-vm-a', ways={0: 3, 1: 3})], 2)
    mask = result.l3['ovsrdt-vm-a'][0]
    assert not mask.overlaps(CBM(0x180, W))
    assert mask == CBM(0x070, W)
    assert 'COS1' not in result.l3
    assert all(s.group != 'COS1' for s in result.steps)
    # COS1 shares its two ways with the default group, which keeps them
    # (its minimum fits there): no group of ours gets them.
    assert result.free[0] == 11 - 3 - 2


def test_default_group_avoids_foreign_exclusive_group():
    foreign = Group('libvirt-cachetune', both(0x003), mode='exclusive')
    result = plan(gold(), [root(0x7fc), foreign], [], 2)
    assert not result.l3[''][0].overlaps(CBM(0x003, W))


def test_explicit_mask_overlapping_a_used_way_is_refused():
    foreign = Group('COS1', both(0x400))
    with pytest.raises(InvalidMask, match='overlaps ways already in use'):
        plan(gold(), [root(), foreign],
             [Request('ovsrdt-pool-hp', cbm=both(0x7f0))], 2)


def test_invalid_masks_for_the_platform():
    with pytest.raises(InvalidMask, match='not contiguous'):
        plan(gold(), [root()], [Request('ovsrdt-pool-x', cbm=both(0x5))], 2)
    with pytest.raises(InvalidMask, match='fewer than the platform minimum'):
        plan(Platform(W, 16, (0, 1), min_cbm_bits=2), [root()],
             [Request('ovsrdt-pool-x', cbm=both(0x4))], 2)
    # Sparse masks are fine where the platform says so.
    plan(Platform(W, 16, (0, 1), sparse_masks=True), [root()],
         [Request('ovsrdt-pool-x', cbm=both(0x5), exclusive=False)], 2)


def test_closid_limit():
    groups = [root()] + [Group('COS%d' % i, both(0x001)) for i in range(1, 15)]
    plan(gold(), groups, [Request('ovsrdt-vm-a', ways={0: 1, 1: 1})], 1)
    with pytest.raises(OutOfClosids, match='ovsrdt-vm-a, ovsrdt-vm-b.*16 '
                       'CLOSIDs'):
        plan(gold(), groups, [Request('ovsrdt-vm-a', ways={0: 1, 1: 1}),
                              Request('ovsrdt-vm-b', ways={0: 1, 1: 1})], 1)


def test_mb_percent_rounded_to_granularity():
    result = plan(gold(), [root()], [Request('ovsrdt-vm-a', ways={0: 1, 1: 1},
                                             mb_percent=45)], 2)
    assert result.mb['ovsrdt-vm-a'] == {0: 50, 1: 50}
    line = [s.value for s in result.steps if s.group == 'ovsrdt-vm-a'
            and s.op == 'schemata'][0]
    assert line == 'L3:0=400;1=400\nMB:0=50;1=50\n'


def test_system_cbm_explicit():
    result = plan(gold(), [root()], [Request('ovsrdt-vm-a', ways={0: 2, 1: 2})],
                  2, system_cbm=both(0x00c))
    assert result.l3[''] == both(0xc)
    # Best fit: the 2-way run below the system mask, not the 7-way one.
    assert result.l3['ovsrdt-vm-a'] == both(0x3)
    with pytest.raises(InvalidMask, match='system_l3_cbm'):
        plan(gold(), [root()], [Request('ovsrdt-pool-hp', cbm=both(0x00f))], 2,
             system_cbm=both(0x00c))


def test_unchanged_state_needs_no_steps():
    reqs = [Request('ovsrdt-vm-a', ways={0: 2, 1: 2})]
    groups = apply_plan([root()], plan(gold(), [root()], reqs, 2))
    assert plan(gold(), groups, reqs, 2).steps == []


def test_unknown_domain_is_refused():
    with pytest.raises(InvalidMask, match='cache domains \\[5\\]'):
        plan(gold(), [root()], [Request('ovsrdt-vm-a', ways={5: 1})], 2)


def test_free_way_left_by_explicit_masks_is_used_without_splitting_system():
    # Table 4 leaves way 0 free; a 1-way VM must get it, not split 0xc.
    reqs = [Request('ovsrdt-pool-hp', cbm=both(0x7f0)),
            Request('ovsrdt-pool-noisy', cbm=both(0x2), exclusive=False)]
    groups = apply_plan([root()], plan(gold(), [root()], reqs, 2))
    result = plan(gold(), groups, reqs + [Request('ovsrdt-vm-a',
                                                  ways={0: 1, 1: 1})], 2)
    assert result.l3['ovsrdt-vm-a'] == both(0x1)
    assert result.l3[''] == both(0xc)
    assert result.free == {0: 0, 1: 0}
