"""Other tools' groups (libvirt <cachetune>) and the default group."""
from ovs_rdt.core.allocator import mirrors_default, plan
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import Group, Platform, Request

W = 11
LIBVIRT = 'qemu-1-guest-vcpus_0-1'


def gold():
    return Platform(W, 16, (0, 1))


def masks(d0, d1):
    return {0: CBM(d0, W), 1: CBM(d1, W)}


def unused(result, groups, domain):
    """What libvirt counts as free (virResctrlAllocGetUnused).

    Ways in no group's mask, the default group's included.
    """
    used = CBM.empty(W)
    for grp in groups:
        used |= result.l3.get(grp.name, grp.l3).get(domain, CBM.empty(W))
    for name, m in result.l3.items():
        used |= m[domain]
    return ~used


def hp():
    return Request('ovsrdt-pool-hp', ways={0: 4, 1: 4}, exclusive=True)


def test_default_group_never_grows_over_a_cachetune_guest():
    # The operator shrank the default group so that libvirt has room;
    # libvirt took 0x18 on domain 0 and copied the default mask on 1.
    groups = [Group('', masks(0x007, 0x007)),
              Group(LIBVIRT, masks(0x018, 0x007))]
    result = plan(gold(), groups, [hp()], 2)
    assert not result.l3[''][0].overlaps(CBM(0x018, W))
    assert not result.l3['ovsrdt-pool-hp'][0].overlaps(CBM(0x018, W))
    assert all(step.group != LIBVIRT for step in result.steps)
    # libvirt still has room for another guest on both domains
    assert unused(result, groups, 0).count >= 1
    assert unused(result, groups, 1).count >= 1
    assert result.modes['ovsrdt-pool-hp'] == 'exclusive'


def test_a_copy_of_the_default_mask_is_not_held():
    # libvirt copied an 8-way default mask onto domain 1, which its guest
    # does not use: a 4-way pool still fits there.
    groups = [Group('', masks(0x007, 0x0ff)),
              Group(LIBVIRT, masks(0x018, 0x0ff))]
    assert mirrors_default(groups[1], 1, groups)
    assert not mirrors_default(groups[1], 0, groups)
    result = plan(gold(), groups, [hp()], 2)
    pool = result.l3['ovsrdt-pool-hp']
    assert pool[1].count == 4 and not pool[1].overlaps(result.l3[''][1])
    assert not pool[0].overlaps(CBM(0x018, W))
    # the kernel refuses exclusive mode to a group overlapping libvirt's
    # copy: the pool stays shareable rather than failing
    assert pool[1].overlaps(CBM(0x0ff, W))
    assert result.modes['ovsrdt-pool-hp'] == 'shareable'


def test_foreign_group_overlapping_the_default_everywhere_holds_its_ways():
    groups = [Group('', masks(0x7ff, 0x7ff)),
              Group('COS1', masks(0x180, 0x180))]
    assert not mirrors_default(groups[1], 0, groups)
    result = plan(gold(), groups, [hp()], 2)
    for dom in (0, 1):
        assert not result.l3['ovsrdt-pool-hp'][dom].overlaps(CBM(0x180, W))


def test_ways_nobody_holds_stay_out_of_the_default_group():
    # libvirt's guest holds 0x400; 0x300 were freed by another guest
    groups = [Group('', masks(0x0ff, 0x0ff)),
              Group(LIBVIRT, masks(0x400, 0x0ff))]
    result = plan(gold(), groups, [], 2)
    assert result.l3[''] == masks(0x0ff, 0x0ff)
    # they are still free for a request of ours (the count Nova uses)
    assert result.free == {0: 8, 1: 9}


def test_without_other_tools_the_default_group_takes_every_spare_way():
    groups = [Group('', masks(0x0ff, 0x0ff))]
    result = plan(gold(), groups, [], 2)
    assert result.l3[''] == masks(0x7ff, 0x7ff)


def test_default_group_takes_only_its_minimum_from_free_ways():
    groups = [Group('', masks(0x001, 0x001)),
              Group(LIBVIRT, masks(0x400, 0x001))]
    result = plan(gold(), groups, [], 2)
    assert result.l3[''][0].count == 2
    assert result.l3[''][1].count == 2
    assert not result.l3[''][0].overlaps(CBM(0x400, W))


def test_released_ways_go_back_to_the_default_group():
    groups = [Group('', masks(0x07f, 0x07f)),
              Group('ovsrdt-pool-hp', masks(0x780, 0x780))]
    result = plan(gold(), groups, [], 2)
    assert result.l3[''] == masks(0x7ff, 0x7ff)
