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
    # The count status and provider-config show (allocator.room).
    assert str(err.value) == (
        'ovsrdt-vm-a needs 10 ways on cache domain 0, but only 9 of 11 are '
        'free for it (11 - 2 reserved for the default group, pools, OvS and '
        'other tools - 0 held by VMs)')


def test_new_request_is_blamed_not_existing_ones():
    first = plan(gold(), [root()], [Request('ovsrdt-vm-a', ways={0: 8,
                                                                 1: 8})], 2)
    groups = apply_plan([root()], first)
    with pytest.raises(InsufficientWays, match='ovsrdt-vm-b needs 2 ways.*'
                       'only 1 of 11 are free'):
        plan(gold(), groups, [Request('ovsrdt-vm-a', ways={0: 8, 1: 8}),
                              Request('ovsrdt-vm-b', ways={0: 2, 1: 2})], 2)


def test_messages_count_one_way_in_the_singular():
    # Before: "ovsrdt-vm-b needs 1 ways".
    first = plan(gold(), [root()], [Request('ovsrdt-vm-a', ways={0: 9,
                                                                 1: 9})], 2)
    groups = apply_plan([root()], first)
    with pytest.raises(InsufficientWays) as err:
        plan(gold(), groups, [Request('ovsrdt-vm-a', ways={0: 9, 1: 9}),
                              Request('ovsrdt-vm-b', ways={0: 1, 1: 1})], 2)
    assert 'ovsrdt-vm-b needs 1 way on cache domain 0, but only 0 of 11 ' \
        'are free' in str(err.value)
    from ovs_rdt.exceptions import count
    assert [count(n, 'way') for n in (0, 1, 2)] == ['0 ways', '1 way',
                                                    '2 ways']


def test_pinned_request_only_takes_ways_on_its_domain():
    result = plan(gold(), [root()], [Request('ovsrdt-vm-a', ways={0: 3})], 2)
    assert result.l3['ovsrdt-vm-a'][0] == CBM(0x700, W)
    # On domain 1 it follows the default group and holds nothing.
    assert result.l3['ovsrdt-vm-a'][1] == result.l3[''][1] == CBM(0x7ff, W)
    assert result.modes['ovsrdt-vm-a'] == 'shareable'
    assert result.free == {0: 6, 1: 9}


def test_release_leaves_the_others_where_they_are():
    reqs = [Request('ovsrdt-vm-a', ways={0: 2, 1: 2}),
            Request('ovsrdt-vm-b', ways={0: 3, 1: 3}),
            Request('ovsrdt-vm-c', ways={0: 2, 1: 2})]
    groups = apply_plan([root()], plan(gold(), [root()], reqs, 2))
    # New groups from the top, in the order they come.
    assert [str(g.l3[0]) for g in groups] == ['f', '600', '1c0', '30']
    # b goes: its ways stay free where they are; c keeps its warm cache.
    result = plan(gold(), groups, [reqs[0], reqs[2]], 2)
    assert result.remove == ['ovsrdt-vm-b']
    assert result.l3['ovsrdt-vm-c'][0] == CBM(0x030, W)
    assert result.l3[''][0] == CBM(0x00f, W)
    assert result.free[0] == 5 and result.moves == []
    ops = [(s.op, s.group, s.value) for s in result.steps]
    assert ops == [('mode', 'ovsrdt-vm-b', 'shareable'),
                   ('rmdir', 'ovsrdt-vm-b', '')]
    # A new 3-way VM takes the hole b left, and nothing else moves.
    groups = apply_plan(groups, result)
    result = plan(gold(), groups, [reqs[0], reqs[2], Request(
        'ovsrdt-vm-d', ways={0: 3, 1: 3})], 2)
    assert result.l3['ovsrdt-vm-d'][0] == CBM(0x1c0, W)
    assert result.moves == []
    assert [s.group for s in result.steps if s.op == 'schemata'] == \
        ['ovsrdt-vm-d']
    # c goes: its ways are next to the default group's, which grows.
    groups = apply_plan(groups, result)
    result = plan(gold(), groups, [reqs[0], Request(
        'ovsrdt-vm-d', ways={0: 3, 1: 3})], 2)
    assert result.l3[''][0] == CBM(0x03f, W) and result.moves == []


def test_a_request_that_fits_where_the_groups_are_moves_none():
    # A hole of 2 ways above vm-c; the default group's run below reaches
    # 5 ways: a 4-way request fits there, the default group keeps 1.
    groups = [root(0x00f),
              Group('ovsrdt-vm-a', both(0x600), mode='exclusive'),
              Group('ovsrdt-vm-c', both(0x060), mode='exclusive')]
    reqs = [Request('ovsrdt-vm-a', ways={0: 2, 1: 2}),
            Request('ovsrdt-vm-c', ways={0: 2, 1: 2}),
            Request('ovsrdt-vm-d', ways={0: 4, 1: 4})]
    result = plan(gold(), groups, reqs, 1)
    assert result.l3['ovsrdt-vm-c'][0] == CBM(0x060, W)
    assert result.l3['ovsrdt-vm-d'][0] == CBM(0x01e, W)
    assert result.l3[''][0] == CBM(0x001, W)
    assert result.moves == []


def test_a_request_that_fits_only_by_moving_moves_the_fewest():
    """Holes of 2 ways at 7-8 and 1 way under the default group's floor:
    a 4-way request fits once one 2-way group moves (the repacking of
    0.3 moved both groups under the hole).
    """
    groups = [root(0x007),
              Group('ovsrdt-vm-a', both(0x600), mode='exclusive'),
              Group('ovsrdt-vm-c', both(0x060), mode='exclusive'),
              Group('ovsrdt-vm-e', both(0x018), mode='exclusive')]
    reqs = [Request('ovsrdt-vm-a', ways={0: 2, 1: 2}),
            Request('ovsrdt-vm-c', ways={0: 2, 1: 2}),
            Request('ovsrdt-vm-e', ways={0: 2, 1: 2}),
            Request('ovsrdt-vm-d', ways={0: 4, 1: 4})]
    result = plan(gold(), groups, reqs, 1)
    # One of them moves (a, the first of the three in name order).
    assert result.l3['ovsrdt-vm-a'][0] == CBM(0x006, W)
    assert result.l3['ovsrdt-vm-c'][0] == CBM(0x060, W)
    assert result.l3['ovsrdt-vm-e'][0] == CBM(0x018, W)
    assert result.l3['ovsrdt-vm-d'][0] == CBM(0x780, W)
    assert result.l3[''][0] == CBM(0x001, W)
    assert [(m.group, m.domain, str(m.old), str(m.new), m.room)
            for m in result.moves] == [
        ('ovsrdt-vm-a', 0, '600', '6', ['ovsrdt-vm-d']),
        ('ovsrdt-vm-a', 1, '600', '6', ['ovsrdt-vm-d'])]
    assert str(result.moves[0]) == (
        'moves ovsrdt-vm-a on cache domain 0 from 600 to 6 to make room for '
        'ovsrdt-vm-d')
    ops = [(s.op, s.group, s.value) for s in result.steps]
    # The moving group drops to shareable first, back last.
    assert ops[0] == ('mode', 'ovsrdt-vm-a', 'shareable')
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


def test_steps_are_typed_values() -> None:
    """A plan's steps hold the group, the kind and the per-domain masks and
    MB values (what the manager's undo writes back from), not only text.
    """
    from ovs_rdt.core.bitmask import CBM
    from ovs_rdt.core.model import Group, MBInfo, Platform, Request
    from ovs_rdt.core.plan import SCHEMATA, Step
    plat = Platform(11, 16, (0, 1), mb=MBInfo(10, 10, True, (0, 1)))
    root = Group('', {0: CBM(0x7ff, 11), 1: CBM(0x7ff, 11)},
                 mb={0: 100, 1: 100})
    result = plan(plat, [root], [Request('ovsrdt-vm-a', ways={0: 2, 1: 2},
                                         mb_percent=50)])
    write = next(s for s in result.steps
                 if s.op == SCHEMATA and s.group == 'ovsrdt-vm-a')
    assert isinstance(write, Step)
    assert write.l3 == result.l3['ovsrdt-vm-a']
    assert write.mb == {0: 50, 1: 50}
    assert write.value == 'L3:0=%s;1=%s\nMB:0=50;1=50\n' % (
        write.l3[0], write.l3[1])
    assert tuple(write) == (SCHEMATA, 'ovsrdt-vm-a', write.value)


def test_plan_and_writes_import_no_allocator() -> None:
    """Plan lives in its own module: core.writes no longer imports
    core.allocator (which imports it), ending the cycle.
    """
    import ast
    import os
    from ovs_rdt.core import writes
    with open(os.path.splitext(writes.__file__)[0] + '.py') as fh:
        tree = ast.parse(fh.read())
    names = {n.module for n in ast.walk(tree)
             if isinstance(n, ast.ImportFrom)}
    assert 'ovs_rdt.core.allocator' not in names


def test_a_group_grows_where_it_is_or_moves_and_says_so():
    groups = [root(0x07f), Group('ovsrdt-vm-c', both(0x080)),
              Group('ovsrdt-vm-a', both(0x100)),
              Group('ovsrdt-vm-b', both(0x600))]
    c = Request('ovsrdt-vm-c', ways={0: 1, 1: 1})
    b = Request('ovsrdt-vm-b', ways={0: 2, 1: 2})
    # Without c, a grows down over c's way and the default group's.
    result = plan(gold(), groups, [Request('ovsrdt-vm-a', ways={0: 3, 1: 3}),
                                   b], 2)
    assert result.l3['ovsrdt-vm-a'][0] == CBM(0x1c0, W)
    assert result.l3['ovsrdt-vm-b'][0] == CBM(0x600, W)
    assert result.moves == []
    # With c, no run around a's way holds 3: a moves, naming why.
    result = plan(gold(), groups, [Request('ovsrdt-vm-a', ways={0: 3, 1: 3}),
                                   b, c], 2)
    assert result.l3['ovsrdt-vm-c'][0] == CBM(0x080, W)
    assert [str(m) for m in result.moves] == [
        'moves ovsrdt-vm-a on cache domain %d from 100 to 70 to grow to 3 '
        'ways' % d for d in (0, 1)]


def one_way_vms(pattern: str, doms=(0,)):
    """Groups from a picture of the ways, highest first: R the default
    group's, V a 1-way isolated VM's, . free.
    """
    width = len(pattern)
    root, groups, reqs = 0, [], []
    for bit, c in enumerate(reversed(pattern)):
        if c == 'R':
            root |= 1 << bit
        elif c == 'V':
            name = 'ovsrdt-vm-%02d' % bit
            groups.append(Group(name, {d: CBM(1 << bit, width) for d in doms},
                                mode='exclusive'))
            reqs.append(Request(name, ways={d: 1 for d in doms}))
    return [Group('', {d: CBM(root, width) for d in doms})] + groups, reqs


def test_many_small_groups_move_the_fewest():
    """Found in review: 14 one-way VMs and five free ways in holes; a 5-way
    VM needs 3 of them moved.  The sets tried are those whose moving could
    free a run of 5, so the 200 tried reach the sets of 3 (before, the
    whole repacking moved 13).
    """
    groups, reqs = one_way_vms('V.VVV.VV.VVVV..VVVVR')
    result = plan(Platform(20, 16, (0,)), groups,
                  reqs + [Request('ovsrdt-vm-new', ways={0: 5})], 1)
    assert len({m.group for m in result.moves}) == 3, result.moves


def test_two_domains_that_each_need_another_layout():
    """Found in review: I/O shares ways 4-5 of 6; the cheapest layout of
    each domain would have the default group trade places with a VM and no
    way to stand aside on.  Each domain takes its next layout, both at
    once (before, only one domain at a time could).
    """
    doms = (0, 1)
    platform = Platform(6, 16, doms, shareable_bits=0x30)

    def masks(value: int) -> dict[int, CBM]:
        return {d: CBM(value, 6) for d in doms}
    groups = [Group('', masks(0x30)), Group('ovsrdt-vm-7', masks(0x03)),
              Group('ovsrdt-vm-8', masks(0x0c), mode='exclusive')]
    reqs = [Request('ovsrdt-vm-7', ways={d: 2 for d in doms},
                    exclusive=False),
            Request('ovsrdt-vm-8', ways={d: 2 for d in doms})]
    assert plan(platform, groups, reqs, 0).steps == []
    result = plan(platform, groups, reqs + [
        Request('ovsrdt-vm-9', ways={d: 1 for d in doms})], 0)
    assert {m.domain for m in result.moves} == {0, 1}


def test_a_one_way_move_rather_than_a_trade():
    """Found in review: min_cbm_bits 2, I/O shares ways 7-8 of 9; the free
    count says 2.  Moving vm-4 by one way makes the run (before, only a
    trade with the default group did, which no order of writes reaches).
    """
    platform = Platform(9, 16, (0,), min_cbm_bits=2, shareable_bits=0x180)
    groups = [Group('', {0: CBM(0x007, 9)}),
              Group('ovsrdt-vm-4', {0: CBM(0x038, 9)}, mode='exclusive'),
              Group('ovsrdt-vm-5', {0: CBM(0x180, 9)})]
    reqs = [Request('ovsrdt-vm-4', ways={0: 3}),
            Request('ovsrdt-vm-5', ways={0: 2}, exclusive=False)]
    assert plan(platform, groups, reqs, 0).free == {0: 2}
    result = plan(platform, groups, reqs + [
        Request('ovsrdt-vm-new', ways={0: 2})], 0)
    assert [(m.group, str(m.old), str(m.new)) for m in result.moves] == [
        ('ovsrdt-vm-4', '38', '1c')]
