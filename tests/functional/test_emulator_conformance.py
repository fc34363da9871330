"""Kernel-behaviour checks of the resctrl emulator, on every profile and mount
option of the suite (``tests/platform_matrix.py``).

The behaviours are ``ovs-rdt selftest``'s own (``ovs_rdt/selftest/behaviours/``):
one description of each, which the selftest runs on a real node and these
tests run against the emulator, through the same runner (its lock, its
clean-up, its check that no other group changed).  Each case is mounted
twice: fresh (the default group holds every way) and in use as ovs-rdt
leaves a node (the default group shrunk, an isolated ovs-rdt pool, a
libvirt group, free ways), where every part of every behaviour must run.

What the selftest may not do on a node (write the default group), and the
exact file set of the emulated kernel, is checked here directly.  The
expected errnos and ``info/last_cmd_status`` texts are the kernel's.  On a
fresh mount ``exclusive`` and ``cdp`` say what they could not try (the
default group holds every way) and skip.
"""
from __future__ import annotations

import errno
import os
from typing import Callable, Iterator, NamedTuple

import pytest

from ovs_rdt.emulator.profiles import PROFILES
from ovs_rdt.resctrl.text import parse_domain_values
from ovs_rdt.selftest.behaviours import BEHAVIOURS, Behaviour
from ovs_rdt.selftest.behaviours.common import GROUP_FILES, MON_GROUP_FILES
from ovs_rdt.selftest.geometry import Geometry
from ovs_rdt.selftest.node import Node
from ovs_rdt.selftest.runner import PASS, SKIP, run_one
from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.test_emulator import rd, status, wr, write_fails
from tests.functional.test_profiles import enable_io_alloc
from tests.platform_matrix import CAPACITY_CASES, Case
from tests import schemata as schemata_text

#: The selftest's memory load gets a demand no L3 holds (doc/emulator.md).
FOOTPRINTS = {'comm:ovsrdt-load': 1 << 30}
#: In use: an isolated pool of ovs-rdt's, a shared one, a libvirt group.
POOL, NOISY, LIBVIRT = 'ovsrdt-pool-hp', 'ovsrdt-pool-noisy', 'qemu-1-vm1-vcpus_0'
FREE_WAYS = 4
#: Behaviours that cannot try everything while the default group holds every way.
NEED_FREE_WAYS = ('exclusive', 'cdp')


class Mounted(NamedTuple):
    case: Case
    in_use: bool
    emu: EmulatorFixture
    node: Node


def case_has(case: Case, need: str) -> bool:
    """What the profile gives (the hardware), not what the mount reads."""
    prof = PROFILES[case.profile]
    return {'mon': True, 'cdp': case.cdp, 'mb': prof.mba, 'snc': prof.snc_nodes > 1,
            'io_alloc': prof.io_alloc, 'mbm_event': prof.mbm_cntrs > 0}[need]


def use(emu: EmulatorFixture, case: Case) -> None:
    """As ovs-rdt leaves a node: the default group on the middle ways, an
    isolated pool on the lowest, a libvirt group with the default group's
    ways, of the top :data:`FREE_WAYS` the highest two in a shared
    (not isolated) pool, the other two free (io_alloc's, where enabled).
    """
    geo = Geometry.read(Node(emu.root))
    ways = max(geo.min_bits, 1)
    low = (1 << ways) - 1
    middle = geo.full >> FREE_WAYS & ~low
    os.mkdir(emu.path(POOL))
    wr(emu, 'schemata', geo.l3_line({d: middle for d in geo.ids}))
    wr(emu, POOL + '/schemata', geo.l3_line({d: low for d in geo.ids}))
    wr(emu, POOL + '/mode', 'exclusive\n')
    for name, ways_ in ((LIBVIRT, middle), (NOISY, geo.full & ~(geo.full >> 2))):
        os.mkdir(emu.path(name))
        wr(emu, name + '/schemata', geo.l3_line({d: ways_ for d in geo.ids}))


@pytest.fixture(scope='module', params=[(c, u) for c in CAPACITY_CASES for u in (0, 1)],
                ids=lambda p: p[0].id + ('-in-use' if p[1] else ''))
def mounted(request: pytest.FixtureRequest) -> Iterator[Mounted]:
    case, in_use = request.param
    emu = EmulatorFixture(case.profile, case.options)
    emu.setUp()
    try:
        emu.set_footprints(FOOTPRINTS)
        enable_io_alloc(emu.root, case)
        if in_use:
            use(emu, case)
        yield Mounted(case, bool(in_use), emu, Node(emu.root, emu.sysfs))
    finally:
        emu.cleanUp()


@pytest.mark.parametrize('behaviour', BEHAVIOURS, ids=lambda b: b.name)
def test_behaviour(mounted: Mounted, behaviour: Behaviour) -> None:
    before = sorted(os.listdir(mounted.emu.root))
    geo = Geometry.read(mounted.node)
    others = {g.name: g.l3 for g in geo.groups(mounted.node) if g.name}
    res = run_one(mounted.node, behaviour)
    wanted = all(case_has(mounted.case, n) for n in behaviour.needs)
    if wanted and not mounted.in_use and behaviour.name in NEED_FREE_WAYS:
        assert res.result == SKIP, res.detail
        assert res.detail.startswith('not tried: ') and \
            '(the default group holds every way on domain %d)' % geo.d0 in res.detail
    else:
        assert res.result == (PASS if wanted else SKIP), res.detail
        assert 'not tried' not in res.detail
    if behaviour.name == 'mon-data':
        # the load filled no other group's ways (before: ovs-rdt's shared
        # pool's and libvirt's), nor the I/O's
        load = parse_domain_values(res.detail.split('a memory load in ways ')[1].split(',')[0])
        assert {d: int(m, 16) & (others.get(LIBVIRT, {}).get(d, 0) |
                                 others.get(NOISY, {}).get(d, 0) | geo.io_cbm.get(d, 0))
                for d, m in load.items()} == {d: 0 for d in geo.ids}
    assert sorted(os.listdir(mounted.emu.root)) == before


# -- what only the emulator's own tests may do ---------------------------------------
def test_tree_listing(mounted: Mounted) -> None:
    """The emulated kernel's exact file set (the selftest asks for a superset)."""
    emu, geo = mounted.emu, Geometry.read(mounted.node)
    extra = ['mbm_L3_assignments'] if os.path.exists(emu.path('info/L3_MON/num_mbm_cntrs')) \
        else []
    ctrl = extra + (['mba_MBps_event'] if 'mba_MBps' in mounted.case.options else [])
    groups = [POOL, NOISY, LIBVIRT] if mounted.in_use else []
    assert sorted(os.listdir(emu.root)) == sorted(
        list(GROUP_FILES) + ['info'] + ctrl + groups)
    assert sorted(geo.info) == sorted(list(geo.root) + ['L3_MON', 'last_cmd_status'])
    assert set(os.listdir(emu.path('info', geo.l3[0]))) >= {'sparse_masks'}
    os.mkdir(emu.path('g'))
    try:
        os.mkdir(emu.path('g/mon_groups/m'))
        assert sorted(os.listdir(emu.path('g'))) == sorted(list(GROUP_FILES) + ctrl)
        assert sorted(os.listdir(emu.path('g/mon_groups/m'))) == sorted(
            list(MON_GROUP_FILES) + extra)
    finally:
        os.rmdir(emu.path('g'))


@pytest.mark.parametrize('profile', sorted(PROFILES))
def test_default_group_exclusive(emulator_factory: Callable[..., EmulatorFixture],
                                 profile: str) -> None:
    """The default group's own writes: over an exclusive group refused; made
    exclusive itself, it leaves no way for a new group.
    """
    emu = emulator_factory(profile)
    geo = Geometry.read(Node(emu.root))
    ways = max(geo.min_bits, 1)
    low, rest = (1 << ways) - 1, geo.full & ~((1 << ways) - 1)
    os.mkdir(emu.path('a'))
    wr(emu, 'a/schemata', geo.l3_line({d: low for d in geo.ids}))
    write_fails(emu, 'a/mode', 'exclusive\n', errno.EINVAL, 'Schemata overlaps\n')
    wr(emu, 'schemata', geo.l3_line({d: rest for d in geo.ids}))
    wr(emu, 'a/mode', 'exclusive\n')
    write_fails(emu, 'schemata', 'L3:%d=%x\n' % (geo.dl, geo.full), errno.EINVAL,
                'Overlaps with exclusive group\n')
    wr(emu, 'mode', 'exclusive\n')            # every way now held exclusively
    if geo.min_bits:
        with pytest.raises(OSError) as exc:
            os.mkdir(emu.path('c'))
        assert exc.value.errno == errno.ENOSPC
        assert status(emu) == 'No space on L3:%d\n' % geo.d0
        assert not os.path.exists(emu.path('c'))
    else:                                     # an empty CBM is valid (AMD)
        os.mkdir(emu.path('c'))
        assert schemata_text.lines(rd(emu, 'c/schemata'))['L3'] == {
            d: '0' for d in geo.ids}
