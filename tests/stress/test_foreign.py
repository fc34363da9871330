"""Other tools beside us, and an upgrade in place.

Foreign groups (a group named like libvirt's own ``<cachetune>`` groups
and a hand-made one, each written with its own mask) are created and
removed while our guests run: we never write, move or remove them, their
ways count as held, and when they go the ways come back.  ``pqos -I`` is
modelled as the real one behaves (intel-cmt-cat's ``os_alloc_prep()``,
checked against the real tool in tests/functional/test_foreign_tools.py):
at every start it makes ``COS1``..``COS<num_closids-1>`` and gives up at
the first ``mkdir`` the kernel refuses, writing nothing; its classes keep
the kernel's default mask until an operator removes them.

Upgrade in place: with guests running, the hook wrapper is reinstalled, the
agent restarted, ``ovs-rdt apply`` run and libvirtd restarted (its
``reconnect`` hook runs for every guest): nothing moves (every group's
masks and tasks are the same before and after), under load.  The upgrade
from the real previous release (its wheel and its .deb, built from its
commit) is tests/functional/test_upgrade.py.
"""
from __future__ import annotations

import errno
import os

from ovs_rdt.cmd import install_hook as install
from ovs_rdt.core.model import ROOT
from tests.functional import test_upgrade as upgrade
from tests.stress import bed, figures

FOREIGN = ('qemu-1-ovsrdt-foreign-vcpus_0', 'handmade')


def pqos_start(node: bed.Node) -> list[str]:
    """What ``pqos -I`` does at start beside our groups: one ``COSn`` per
    CLOSID but the default group's, until the kernel says "Out of
    CLOSIDs"; then it exits (its command never runs).
    """
    made = []
    for i in range(1, node.rc.platform().num_closids):
        try:
            os.mkdir(node.rc.path('COS%d' % i))
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            break
        made.append('COS%d' % i)
    return made


def write(node: bed.Node, group: str, name: str, text: str) -> None:
    with open(node.rc.path(group, name), 'w', encoding='ascii') as fh:
        fh.write(text)


def snapshot(node: bed.Node) -> dict[str, tuple]:
    return upgrade.snapshot(node.rc)


def test_foreign_groups_come_and_go(node: bed.Node) -> None:
    base_groups = node.our_groups()
    free0 = bed.check_invariants(node)
    ours0 = {k: v for k, v in snapshot(node).items() if k != ROOT}
    # pqos starts, fails, leaves its classes; ovs-rdt keeps all it has
    # and re-applies; the operator removes them.
    made = pqos_start(node)
    assert made and len(node.rc.group_names()) == \
        node.rc.platform().num_closids
    res = node.apply()
    assert res.returncode == 0, res.stderr
    assert {k: v for k, v in snapshot(node).items()
            if k != ROOT and not k.startswith('COS')} == ours0
    for name in made:
        os.rmdir(node.rc.path(name))
    root = node.groups()[ROOT].l3
    # Two ways each from the top of the default group's, on every domain.
    for i, name in enumerate(FOREIGN):
        os.mkdir(node.rc.path(name))
        write(node, name, 'schemata', 'L3:' + ';'.join(
            '%d=%x' % (d, 3 << (m.value.bit_length() - 2 - 2 * i))
            for d, m in sorted(root.items())) + '\n')
    # (A hand-made group cannot be made exclusive here: the kernel wants
    # no other mask over it, and the default group, with our groups that
    # follow it on domains where they hold nothing, shares these ways.)
    theirs = {k: v for k, v in snapshot(node).items() if k in FOREIGN}
    assert len(theirs) == 2

    # Their ways are held: 4 fewer free ways per domain.
    free = bed.check_invariants(node)
    assert all(free[d] <= free0[d] - 4 for d in free), (free, free0)
    guests = [node.tb.define(bed.dedicated(2), vcpus=1, memory_mib=32)
              for _ in range(3)] + [node.tb.define(bed.pooled(), vcpus=1,
                                                   memory_mib=32)]
    results = bed.all_at_once([lambda g=g: node.tb.start(g, check=False)
                               for g in guests] + [node.apply])
    assert all(r.returncode == 0 for r in results), [
        r.stderr for r in results if r.returncode]
    running = [(g, g.group) for g in guests[:3]] + [(guests[3],
                                                     bed.POOL_GROUP)]
    bed.check_invariants(node, running)
    now = snapshot(node)
    assert {k: now[k] for k in FOREIGN} == theirs, 'a foreign group changed'

    # They go while ours run: the ways come back; ours keep their masks
    # (their warm cache), modes and threads.
    ours = {k: v for k, v in now.items() if k.startswith(bed.OURS)}
    for name in FOREIGN:
        os.rmdir(node.rc.path(name))
    res = node.apply()
    assert res.returncode == 0, res.stderr
    bed.check_invariants(node, running)
    after = snapshot(node)

    def sizes(snap: dict[str, tuple]) -> dict[str, tuple]:
        """Ways held per domain (not where a group follows the root)."""
        root_masks = dict(snap[ROOT][0])
        return {k: (tuple((d, bin(v).count('1')) for d, v in masks
                          if v != root_masks[d]), mode)
                for k, (masks, mode, tids) in snap.items() if k in ours}
    assert sizes(after) == sizes(now), 'ours changed'
    assert {k: after[k][:2] for k in ours} == {k: now[k][:2] for k in ours}, \
        'ours moved'
    for name in ours:       # (no thread gone: see upgrade.same)
        assert set(now[name][2]) <= set(after[name][2]), name
    for guest in guests:
        node.tb.undefine(guest)
    bed.wait_for(lambda: node.our_groups() == base_groups and
                 bed.check_invariants(node) == free0, timeout=30,
                 what='the ways back (%s)' % bed.check_invariants(node))
    figures.add('foreign groups created and removed beside ours',
                2 + len(made))
    figures.add('groups leaked', 0)


def test_upgrade_in_place_moves_nothing(node: bed.Node) -> None:
    guests = [node.tb.define(bed.dedicated(ways), vcpus=1, memory_mib=32)
              for ways in (1, 3)] + [node.tb.define(bed.pooled(), vcpus=1,
                                                    memory_mib=32)]
    for guest in guests:
        node.tb.start(guest)
    running = [(g, g.group) for g in guests[:2]] + [(guests[2],
                                                     bed.POOL_GROUP)]
    bed.check_invariants(node, running)
    node.wait_agent_ok()
    before = snapshot(node)

    install.install(node.tb.hook, node.tb.config)      # the new hook
    node.stop_agent()                                  # the new agent
    node.start_agent()
    res = node.apply()
    assert res.returncode == 0, res.stderr
    node.tb.restart_libvirtd()                         # "reconnect" hooks
    node.wait_agent_ok()
    bed.wait_for(node.pmd_in_group, timeout=30, what='PMDs in their group')

    assert all(node.tb.state(g) == 'running' for g in guests)
    bed.check_invariants(node, running)
    upgrade.same(before, snapshot(node), 'something moved in the upgrade')
    for guest in guests:
        node.tb.undefine(guest)
    figures.add('upgrades in place with guests running (nothing moved)')
