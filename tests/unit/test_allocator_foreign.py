"""Other tools' groups (libvirt <cachetune>) and the default group."""
import pytest

from ovs_rdt.core.allocator import mirrors_default, plan
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.foreign import written
from ovs_rdt.core.model import Group, Platform, Request
from ovs_rdt.exceptions import InsufficientWays

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


# -- a group another tool has just made (or made and never wrote) -------------
HP = 'ovsrdt-pool-hp'
NOISY = 'ovsrdt-pool-noisy'
VM = 'ovsrdt-vm-00000000-0000-0000-0000-000000000001'


def pools():
    """The issue's layout: hp 7 isolated ways, noisy 1 shared way."""
    return [Request(HP, ways={0: 7, 1: 7}, exclusive=True),
            Request(NOISY, ways={0: 1, 1: 1}, exclusive=False)]


def mkdir(groups, name):
    """A group as the kernel's mkdir makes it (__init_one_rdt_domain)."""
    from ovs_rdt.core.kernel import new_group_mask
    return Group(name, {d: CBM(new_group_mask(gold(), d, [
        (g.mode, g.l3[d].value) for g in groups]), W) for d in (0, 1)})


def applied():
    return [Group('', masks(0x007, 0x007)),
            Group(HP, masks(0x7f0, 0x7f0), mode='exclusive'),
            Group(NOISY, masks(0x008, 0x008))]


def test_the_kernel_gives_a_new_group_every_shareable_way():
    # ovs-rdt's own noisy pool included: what the issue saw
    assert mkdir(applied(), 'COS1').l3 == masks(0x00f, 0x00f)


def test_reapply_after_a_bare_mkdir_changes_nothing():
    groups = applied()
    groups.append(mkdir(groups, 'COS1'))
    result = plan(gold(), groups, pools(), 2)
    assert result.steps == []
    assert result.l3[''] == masks(0x007, 0x007)
    assert result.l3[HP] == masks(0x7f0, 0x7f0)
    assert result.l3[NOISY] == masks(0x008, 0x008)
    assert result.modes[HP] == 'exclusive'


def test_release_after_a_bare_mkdir_frees_the_vm():
    groups = [Group('', masks(0x003, 0x003)),
              Group(HP, masks(0x7f0, 0x7f0), mode='exclusive'),
              Group(NOISY, masks(0x008, 0x008)),
              Group(VM, masks(0x004, 0x004), mode='exclusive')]
    groups.append(mkdir(groups, 'handmade'))
    assert groups[-1].l3 == masks(0x003, 0x003)
    result = plan(gold(), groups, pools(), 2)
    assert result.remove == [VM]
    # the VM's way goes back to the default group, handmade untouched
    assert result.l3[''] == masks(0x007, 0x007)
    assert all(s.group != 'handmade' for s in result.steps)
    # and the next plan (the ways moved under handmade) keeps it so
    after = [Group('', result.l3['']), groups[1], groups[2], groups[4]]
    assert plan(gold(), after, pools(), 2).steps == []


def test_ways_a_fresh_group_covers_wait_for_its_tool():
    groups = applied()
    groups.append(mkdir(groups, 'COS1'))
    vm = Request(VM, ways={0: 1, 1: 1})
    with pytest.raises(InsufficientWays) as err:
        plan(gold(), groups, pools() + [vm], 2)
    text = str(err.value)
    assert 'COS1 (f, the mask mkdir gave it: not written yet)' in text
    assert 'come free when that tool writes its own masks' in text
    # once it wrote its own mask (one way the default group had), the
    # other ways are free again; its way stays where it was
    groups[-1] = Group('COS1', masks(0x001, 0x001))
    result = plan(gold(), groups, pools() + [vm], 2)
    for dom in (0, 1):
        assert not result.l3[VM][dom].overlaps(CBM(0x001, W))
        assert result.l3[VM][dom].count == 1
    assert result.modes[VM] == 'exclusive'


def test_ways_another_tool_took_are_never_given_away():
    # COS1 took a way nobody had (the default group had freed it)
    groups = [Group('', masks(0x003, 0x003)),
              Group(HP, masks(0x7f0, 0x7f0), mode='exclusive'),
              Group(NOISY, masks(0x008, 0x008)),
              Group('COS1', masks(0x004, 0x004))]
    result = plan(gold(), groups, pools(), 2)
    assert result.l3[''] == masks(0x003, 0x003)
    with pytest.raises(InsufficientWays, match=r'COS1 \(4\)'):
        plan(gold(), groups, pools() + [Request(VM, ways={0: 1, 1: 1})], 2)


# -- a class another tool wrote (pqos -e llc:3=0x1) ---------------------------
def pqos_wrote(root, cos3):
    """pqos made its classes (mkdir: every way), wrote COS3 and the
    operator removed the others.
    """
    return [Group('', masks(root, root)), Group('COS3', masks(cos3, cos3))]


def test_a_written_class_is_not_the_mkdir_mask():
    groups = pqos_wrote(0x7ff, 0x001)
    assert written(gold(), groups[1], 0, groups, 2) == CBM(0x001, W)
    fresh = applied()
    fresh.append(mkdir(fresh, 'COS1'))
    assert written(gold(), fresh[-1], 0, fresh, 2) is None


def test_the_default_group_leaves_the_ways_a_tool_wrote():
    groups = pqos_wrote(0x7ff, 0x001)
    result = plan(gold(), groups, pools(), 2)
    assert result.l3[''] == masks(0x006, 0x006)     # its floor, off way 0
    assert result.l3[NOISY] == masks(0x008, 0x008)
    assert result.l3[HP] == masks(0x7f0, 0x7f0)
    assert all(s.group != 'COS3' for s in result.steps)
    # a request that needs way 0 still fits, as before: the default
    # group stays over it
    vm = Request(VM, ways={0: 1, 1: 1})
    with_vm = plan(gold(), groups, pools() + [vm], 2)
    assert with_vm.l3[VM][0].count == 1
    assert with_vm.l3[''][0] == CBM(0x003, W)
    # applied: COS3 shares no way with ours, it holds it (no way free
    # after it); nothing changes
    assert result.free == {0: 0, 1: 0}
    after = [Group('', result.l3['']), groups[1],
             Group(HP, result.l3[HP], mode='exclusive'),
             Group(NOISY, result.l3[NOISY])]
    assert plan(gold(), after, pools(), 2).steps == []
    with pytest.raises(InsufficientWays, match=r'COS3 \(1\)'):
        plan(gold(), after, pools() + [vm], 2)
    # once COS3 is gone its way goes back to the default group
    again = plan(gold(), [after[0]] + after[2:], pools(), 2)
    assert again.l3[''] == masks(0x007, 0x007)


def test_a_group_of_ours_keeps_the_ways_a_tool_wrote_over_it():
    # COS3 wrote way 2 (the default group's) and way 3 (a running VM's)
    groups = [Group('', masks(0x007, 0x007)),
              Group(HP, masks(0x7f0, 0x7f0), mode='exclusive'),
              Group(VM, masks(0x008, 0x008)),
              Group('COS3', masks(0x00c, 0x00c))]
    vm = Request(VM, ways={0: 1, 1: 1}, exclusive=False)
    result = plan(gold(), groups, [pools()[0], vm], 2)
    assert result.l3[VM] == masks(0x008, 0x008)
    assert result.l3[''] == masks(0x003, 0x003)
    assert result.moves == []


def test_a_bare_mkdir_group_keeps_sharing_after_ours_changed():
    """A group made by ``mkdir`` while a VM ran (it got the default
    group's 3 ways); the VM stopped and the default group grew back: the
    group's mask is no longer the one ``mkdir`` gives now, but it shares
    all the default group had then: not written, nothing to change.
    """
    groups = [Group('', masks(0x01f, 0x01f)),
              Group(NOISY, masks(0x020, 0x020)),
              Group(HP, masks(0x7c0, 0x7c0), mode='exclusive'),
              Group('handmade', masks(0x007, 0x007))]
    assert written(gold(), groups[3], 0, groups, 2) is None
    requests = [Request(HP, ways={0: 5, 1: 5}, exclusive=True),
                Request(NOISY, ways={0: 1, 1: 1}, exclusive=False)]
    assert plan(gold(), groups, requests, 2).steps == []


def test_a_written_class_the_floor_needs_changes_nothing():
    # three ways for the system: it keeps way 0 beside COS3, as before
    groups = [Group('', masks(0x007, 0x007)),
              Group(HP, masks(0x7f0, 0x7f0), mode='exclusive'),
              Group(NOISY, masks(0x008, 0x008)),
              Group('COS3', masks(0x001, 0x001))]
    result = plan(gold(), groups, pools(), 3)
    assert result.steps == []
    assert result.l3[''] == masks(0x007, 0x007)
