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
import subprocess
import sys
import threading
import time

from ovs_rdt.cmd import install_hook as install
from ovs_rdt.core.model import ROOT
from tests.functional import test_upgrade as upgrade
from tests.stress import bed, figures
from tests.stress.conftest import LONG

FOREIGN = ('qemu-1-ovsrdt-foreign-vcpus_0', 'handmade')
#: Names the kernel takes (it refuses only a newline) and ovs-rdt never
#: gives: libvirt 9.0's ``<cachetune vcpus='0,2'>``, spaces, ``@``, ``+``,
#: non-ASCII, quotes, 255 bytes.
ODD_NAMES = ('qemu-5-guest-vcpus_0,2', 'a group', 'pqos@2+x',
             'caf\u00e9-\u65e5\u672c', '"q\'s\\', 'x' * 255)
#: A tool that takes no flock: ``mkdir``/``rmdir`` of one group in a loop.
CHURNER = '''
import os, sys, time
path, end, cycles = sys.argv[1], time.monotonic() + float(sys.argv[2]), 0
while time.monotonic() < end:
    try:
        os.mkdir(path)
        os.rmdir(path)
        cycles += 1
    except OSError:
        pass
print(cycles)
'''
CHURN_SECONDS = 60 if LONG else 20


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
    before = snapshot(node)
    # pqos starts, fails, leaves its classes; ovs-rdt keeps all it has
    # and re-applies; the operator removes them.
    made = pqos_start(node)
    assert made and len(node.rc.group_names()) == \
        node.rc.platform().num_closids
    res = node.apply()
    assert res.returncode == 0, res.stderr
    # (ovs-vswitchd's threads come and go: one it starts with exits)
    upgrade.same(before, {k: v for k, v in snapshot(node).items()
                          if not k.startswith('COS')}, 'pqos moved ours')
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


def test_odd_names_and_a_churning_tool_stop_nothing(node: bed.Node) -> None:
    """Other tools' groups, whatever the kernel let them be called, and
    one that comes and goes without the flock (a ``mkdir``/``rmdir`` of
    ``COS1`` in a loop), while guests start and stop, and ``status`` and
    ``apply`` run: none refused, no traceback, nothing of theirs touched.
    """
    base_groups = node.our_groups()
    free0 = bed.check_invariants(node)
    root = node.groups()[ROOT].l3
    for name in ODD_NAMES:      # each written: the default group's lowest way
        os.mkdir(node.rc.path(name))
        write(node, name, 'schemata', 'L3:' + ';'.join(
            '%d=%x' % (d, m.value & -m.value) for d, m in sorted(root.items()))
            + '\n')
    theirs = {k: v for k, v in snapshot(node).items() if k in ODD_NAMES}
    assert len(theirs) == len(ODD_NAMES)
    churner = subprocess.Popen(
        [sys.executable, '-c', CHURNER, node.rc.path('COS1'),
         str(CHURN_SECONDS)], stdout=subprocess.PIPE, text=True)
    results: dict[str, list[subprocess.CompletedProcess]] = {
        'start': [], 'stop': [], 'status': [], 'apply': []}
    guests = []
    cli_done = threading.Event()

    def cli() -> None:      # status and apply, over and over
        env = dict(os.environ, PYTHONPATH=bed.REPO)
        while not cli_done.is_set():
            for what in ('status', 'apply'):
                results[what].append(subprocess.run(
                    [sys.executable, '-m', 'ovs_rdt.cmd.main',
                     '--config-file', node.tb.config, what],
                    capture_output=True, text=True, env=env, timeout=120,
                    check=False))

    since = node.hook_log_size()
    thread = threading.Thread(target=cli)
    thread.start()
    try:
        end = time.monotonic() + CHURN_SECONDS - 2
        i = 0
        while time.monotonic() < end:
            meta = bed.pooled() if i % 3 == 2 else bed.dedicated(1)
            guest = node.tb.define(meta, vcpus=1, memory_mib=32)
            results['start'].append(node.tb.start(guest, check=False))
            if results['start'][-1].returncode:
                node.tb.undefine(guest)
            else:
                guests.append(guest)
            if len(guests) >= 4:            # CLOSIDs: keep a few running
                old = guests.pop(0)
                results['stop'].append(node.tb.destroy(old, check=False))
                node.tb.undefine(old)
            i += 1
    finally:
        cli_done.set()
        thread.join()
        cycles = int(churner.communicate(timeout=CHURN_SECONDS + 30)[0])
        for guest in guests:
            node.tb.undefine(guest)
    failed = {what: [r.stderr for r in res if r.returncode not in (0, 3, 5)
                     or (what != 'status' and r.returncode)]
              for what, res in results.items()}
    counts = {what: '%d of %d' % (len(failed[what]), len(results[what]))
              for what in results}
    figures.record('churn: COS1 made and removed, times', cycles)
    figures.record('churn: refused or failed (start, stop, status, apply)',
                   counts)
    with open(node.tb.log, 'rb') as fh:
        fh.seek(since)
        hook_log = fh.read().decode('utf-8', 'replace')
    # (libvirt words every hook failure "internal error: Child process";
    # ours: "report this bug: internal error: ...")
    tracebacks = hook_log.count('internal error') + sum(
        r.stderr.count('Traceback') + r.stderr.count('report this bug') +
        (r.stderr.count('internal error') if what in ('status', 'apply')
         else 0) for what, res in results.items() for r in res)
    figures.record('churn: tracebacks', tracebacks)
    figures.record('churn: plans made again', hook_log.count('planning again'))
    assert cycles > 100, cycles
    assert not any(failed.values()), counts
    assert tracebacks == 0, hook_log[-3000:]
    assert 'internal error' not in node.agent.log() if node.agent else True
    # Theirs as they were; ours back where they were.
    assert {k: v for k, v in snapshot(node).items() if k in ODD_NAMES} \
        == theirs
    for name in ODD_NAMES:
        os.rmdir(node.rc.path(name))
    bed.wait_for(lambda: node.our_groups() == base_groups and
                 bed.check_invariants(node) == free0, timeout=30,
                 what='the ways back (%s)' % bed.check_invariants(node))
    figures.add('groups leaked', 0)
