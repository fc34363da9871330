"""Migrations between two nodes running ovs-rdt, through the real parts.

Two private libvirtds side by side (``two_nodes``: node ``a`` a Xeon Gold
6230, 2 cache domains of 11 ways of 2560 KiB; node ``b`` an E7-8890 v4, 4
domains of 20 ways of 3072 KiB), each with its own emulated resctrl and the
hook; guests of 64 MiB without a disk move with ``virsh migrate --p2p``
over loopback.  Configuration of both (unless a test says otherwise): the
default group keeps 2 ways and pool ``noisy`` holds 2, so ``a`` has 7 ways
per domain free for VMs and ``b`` 16.
"""
from __future__ import annotations

import os
import signal
import threading
from typing import Iterator

import pytest

from tests.functional.fixtures.migration import (Guest, NodeBed, Pair,
                                                 TraceLine, wait_for)
from tests.functional.test_libvirt_hook import nova, rdt
from tests import schemata as schemata_text

POOL = 'ovsrdt-pool-noisy'
#: What Nova's libvirt driver asks for a live migration (its default
#: VIR_MIGRATE_* flags: peer to peer, persistent on the destination,
#: undefined on the source); :meth:`Pair.migrate` adds --p2p --live.
NOVA_FLAGS = ('--persistent', '--undefinesource')
#: A bandwidth cap (MiB/s) that keeps a migration running for seconds,
#: long enough to break it half-way.
SLOW = ('--bandwidth', '1')


@pytest.fixture
def pair(two_nodes: Pair) -> Iterator[Pair]:
    two_nodes.reset()
    try:
        yield two_nodes
    finally:
        two_nodes.remove_guests()
    # Whatever a test did, no VM group is left on either node.
    assert two_nodes.a.vm_groups() == [] and two_nodes.b.vm_groups() == []


# -- what a node shows -----------------------------------------------------------
def status_rows(node: NodeBed, guest: Guest
                ) -> dict[int, tuple[str, int, int]]:
    """``ovs-rdt status --json``: domain -> (group, ways, KiB) holding the
    VM.
    """
    out = {}
    for dom in node.status()['domains']:
        for row in dom['groups']:
            if any(m['kind'] == 'vm' and m['name'] == guest.name
                   for m in row['members']):
                out[dom['domain']] = (row['group'], row['ways'], row['kib'])
    return out


def events(node: NodeBed, guest: Guest) -> list[TraceLine]:
    return [t for t in node.trace() if t.domain == guest.name]


def running_in(node: NodeBed, guest: Guest, group: str,
               ways: dict[int, int] | None, status: bool = False) -> None:
    """Running on ``node``, every vCPU thread in ``group`` of ``ways``;
    ``status``: ``ovs-rdt status`` says so too.
    """
    assert node.state(guest) == 'running', node.state(guest)
    vcpus = node.vcpu_tids(guest)
    assert len(vcpus) == 2 and vcpus <= node.tasks(group), \
        (vcpus, node.tasks(group))
    if ways is not None:
        assert node.l3(group) == ways
    if not status:
        return
    rows = status_rows(node, guest)
    assert {d: row[0] for d, row in rows.items()} == \
        {d: group for d in node.rc.platform().domains}
    if ways is not None:
        assert {d: row[1] for d, row in rows.items()} == ways


def left(node: NodeBed, guest: Guest, before: dict[str, tuple]) -> None:
    """``guest`` gone from ``node``: no group, the ways back, not in status."""
    assert guest.group not in node.groups()
    assert node.snapshot() == before
    assert status_rows(node, guest) == {}


def arrived(dst: NodeBed, guest: Guest, ways: dict[int, int],
            migrated: bool = True) -> None:
    """On ``dst``: the group had its ways before QEMU ran, the threads after.

    From the probe: at ``start begin`` (QEMU not launched yet) the group
    holds its final masks; at ``started begin`` (an incoming QEMU is
    paused until the migration completes) the vCPU threads it runs with
    now.
    """
    trace = events(dst, guest)
    seen = [t.event for t in trace]
    first = ['migrate begin'] if migrated else []
    assert seen[:4] == first + ['prepare begin', 'start begin',
                                'started begin'][:4 - len(first)], seen
    masks = trace[seen.index('start begin')].groups[guest.group][0]
    assert schemata_text.masks(masks) == {
        d: m.value for d, m in dst.rc.group(guest.group).l3.items()}
    assert dst.vcpu_tids(guest) <= \
        trace[seen.index('started begin')].groups[guest.group][1]
    running_in(dst, guest, guest.group, ways, status=True)


# -- live migration ----------------------------------------------------------------
def test_live_migration_there_and_back(pair: Pair) -> None:
    """An annotated persistent VM: a -> b -> a; both nodes end as they began."""
    a, b = pair.a, pair.b
    a_empty, b_empty = a.snapshot(), b.snapshot()
    guest = a.define(rdt('<rdt:l3 ways="3"/>'))
    a.start(guest)
    running_in(a, guest, guest.group, {0: 3, 1: 3})
    a_start = {g: v[:2] for g, v in a.snapshot().items()}

    pair.migrate(guest, a)
    # 3 ways on every domain of b (4 of them, ways of 3072 KiB)
    arrived(b, guest, {0: 3, 1: 3, 2: 3, 3: 3})
    left(a, guest, a_empty)
    assert a.state(guest) == 'shut off'          # still defined there
    trace = events(a, guest)
    assert [t.event for t in trace][-2:] == ['stopped end', 'release end']
    # The wrapper ends `stopped end` in the shell: `release end` removes it.
    assert guest.group in trace[-2].groups
    assert guest.group not in trace[-1].groups

    a.clear_logs()
    pair.migrate(guest, b)
    arrived(a, guest, {0: 3, 1: 3})
    left(b, guest, b_empty)
    assert {g: v[:2] for g, v in a.snapshot().items()} == a_start


def test_live_migration_of_a_nova_vm_asking_by_size(pair: Pair) -> None:
    """Extra specs in <nova:extraSpecs>, migrated with Nova's flags.

    ``rdt:l3_kib=6144``: 3 ways of 2560 KiB on a, 2 of 3072 KiB on b, so at
    least 6144 KiB on both (``rdt:l3_ways=3`` would be 7680 KiB on a and
    9216 KiB on b: the way count moves, not the size).
    """
    a, b = pair.a, pair.b
    a_empty = a.snapshot()
    guest = a.define(nova({'hw:cpu_policy': 'shared', 'rdt:l3_kib': '6144'}))
    a.start(guest)
    running_in(a, guest, guest.group, {0: 3, 1: 3})
    pair.migrate(guest, a, extra=NOVA_FLAGS)
    arrived(b, guest, {0: 2, 1: 2, 2: 2, 3: 2})
    assert {row[2] for row in status_rows(b, guest).values()} == {6144}
    left(a, guest, a_empty)
    assert guest.name not in a.virsh('list', '--all', '--name').stdout
    assert 'reserved 6144 KiB of L3 (from flavor m1.nfv extra specs)' in \
        b.hook_log()


def test_transient_pool_member_joins_the_pool_of_that_name(pair: Pair) -> None:
    a, b = pair.a, pair.b
    a_before = a.snapshot()
    guest = a.define(rdt('<rdt:pool name="noisy"/>'))
    xml = a.virsh('dumpxml', guest.name).stdout
    a.virsh('undefine', guest.name)
    path = os.path.join(a.workdir, 'transient.xml')
    with open(path, 'w', encoding='utf-8') as fh:
        fh.write(xml)
    a.virsh('create', path)                      # transient
    running_in(a, guest, POOL, {0: 2, 1: 2})
    pair.migrate(guest, a)
    running_in(b, guest, POOL, {0: 2, 1: 2, 2: 2, 3: 2}, status=True)
    assert 'Persistent:     no' in b.virsh('dominfo', guest.name).stdout
    assert guest.name not in a.virsh('list', '--all', '--name').stdout
    assert b.vm_groups() == [] and a.vm_groups() == []
    assert a.snapshot() == a_before


# -- cold migration --------------------------------------------------------------
def test_cold_migrations(pair: Pair) -> None:
    """Offline migration then a start (annotated); save, restore (Nova)."""
    a, b = pair.a, pair.b
    a_empty = a.snapshot()
    annotated = a.define(rdt('<rdt:l3 ways="4"/>'))       # shut off
    pair.migrate(annotated, a, live=False,
                 extra=('--offline', '--persistent', '--undefinesource'))
    assert b.state(annotated) == 'shut off'
    assert annotated.group not in b.groups()       # only defined, so far
    b.start(annotated)
    arrived(b, annotated, {0: 4, 1: 4, 2: 4, 3: 4})

    nova_vm = a.define(nova({'rdt:l3_ways': '2'}))
    a.start(nova_vm)
    image = os.path.join(a.workdir, 'nova_vm.save')
    a.virsh('save', nova_vm.name, image)
    left(a, nova_vm, a_empty)
    b.clear_logs()
    b.virsh('restore', image)
    b.guests[nova_vm.name] = nova_vm
    seen = [t.event for t in events(b, nova_vm)]
    assert seen[:2] == ['restore begin', 'prepare begin'], seen
    running_in(b, nova_vm, nova_vm.group, {0: 2, 1: 2, 2: 2, 3: 2})
    assert 'restore begin: capacity check passed for 2 L3 ways' in \
        b.hook_log()


# -- refusals ----------------------------------------------------------------------
def fill_closids(node: NodeBed, free: int = 0) -> list[str]:
    """Hand-made groups (as pqos makes) until ``free`` CLOSIDs are left.

    Each on the lowest way only, so ways stay free.
    """
    platform = node.rc.platform()
    made = []
    spare = platform.num_closids - len(node.rc.group_names()) - free
    for i in range(spare):
        path = node.emu.path('COS%d' % (i + 1))
        os.mkdir(path)
        made.append(path)
        with open(os.path.join(path, 'schemata'), 'w') as fh:
            fh.write('L3:%s\n' % ';'.join('%d=1' % d
                                          for d in platform.domains))
    return made


def refused(pair: Pair, guest: Guest, src: NodeBed, reason: str) -> None:
    """Migrating ``guest`` from ``src`` fails with the hook's one line, and
    changes nothing on either node.
    """
    dst = pair.other(src)
    src_before, dst_before = src.snapshot(), dst.snapshot()
    res = pair.migrate(guest, src, check=False)
    assert res.returncode != 0
    line = ("ovs-rdt: refusing the incoming migration of domain '%s': %s"
            % (guest.name, reason))
    assert line in res.stderr, res.stderr
    assert 'Traceback' not in res.stderr
    assert '\n' not in res.stderr[res.stderr.index(line):].strip()
    assert src.snapshot() == src_before         # in its group, its ways
    assert dst.snapshot() == dst_before         # exactly as it was
    assert [t.event for t in events(dst, guest)] == ['migrate begin']


def test_full_destination_refuses_then_takes_it_unmanaged_with_warn(
        pair: Pair) -> None:
    """b has 2 ways left: the move is refused.  With ``on_failure = warn``
    (as documented) b takes the VM without a cache allocation, logged, and
    a gives its ways back as after any move.
    """
    a, b = pair.a, pair.b
    a_empty = a.snapshot()
    hog = b.define(rdt('<rdt:l3 ways="14"/>'))        # 2 of 16 left
    b.start(hog)
    guest = a.define(rdt('<rdt:l3 ways="3"/>'))
    a.start(guest)
    refused(pair, guest, a, 'free cache ways on this host (stop a VM), or '
            'ask for fewer: %s needs 3 ways on cache domain 0, but only 2 of '
            '20 are free' % guest.group)
    running_in(a, guest, guest.group, {0: 3, 1: 3})

    b.configure(on_failure='warn')
    b_before = b.snapshot()
    pair.migrate(guest, a)
    assert b.state(guest) == 'running'
    assert guest.group not in b.groups()
    assert b.vcpu_tids(guest) <= b.tasks('')       # the default group
    assert b.snapshot() == b_before
    left(a, guest, a_empty)
    assert "migrate begin: starting it without a cache allocation " \
        "([libvirt] on_failure = warn): free cache ways on this host (stop a " \
        "VM), or ask for fewer: %s needs 3 ways" % guest.group in \
        b.hook_log()


@pytest.mark.parametrize('short', ['closids', 'cache'])
def test_destination_short_of_closids_or_cache_refuses(
        pair: Pair, short: str) -> None:
    """b out of CLOSIDs (hand-made groups, as pqos makes); a VM with 15
    ways, which b's 20-way cache holds and a's 11 ways cannot.
    """
    a, b = pair.a, pair.b
    made: list[str] = []
    try:
        if short == 'closids':
            made = fill_closids(b)
            guest = a.define(rdt('<rdt:l3 ways="3"/>'))
            a.start(guest)
            refused(pair, guest, a, 'free a CLOSID on this host (stop a VM), '
                    'or use a pool: out of CLOSIDs')
            running_in(a, guest, guest.group, {0: 3, 1: 3})
        else:
            guest = b.define(rdt('<rdt:l3 ways="15"/>'))
            b.start(guest)
            refused(pair, guest, b, "fix the domain XML: <rdt:l3 ways>: '15' "
                    "is more than the 11 ways of this host's L3 cache")
            running_in(b, guest, guest.group, {0: 15, 1: 15, 2: 15, 3: 15})
    finally:
        for path in made:
            os.rmdir(path)


# -- faults half-way ---------------------------------------------------------------
def _restart(node: NodeBed) -> None:
    proc = node.libvirtd.proc
    if proc is not None:
        proc.wait(timeout=30)
    node.libvirtd.start(die_with_parent=True)


#: The faults, each half-way through its own migration of the same VM.
FAULTS = ('domjobabort', 'destination-qemu-killed',
          'destination-libvirtd-killed')


def test_broken_migrations_leak_nothing(pair: Pair) -> None:
    """Each fault half-way: the migration fails, the source runs on with
    its group and ways as before, and the destination ends as it began.
    """
    a, b = pair.a, pair.b
    b_before = b.snapshot()
    guest = a.define(rdt('<rdt:l3 ways="3"/>'))
    a.start(guest)
    a_before = a.snapshot()
    for fault in FAULTS:
        b.clear_logs()
        result: dict[str, object] = {}
        mover = threading.Thread(target=lambda: result.update(
            res=pair.migrate(guest, a, extra=SLOW, check=False)))
        mover.start()
        try:
            wait_for(lambda: 'started begin' in [t.event for t in
                                                 events(b, guest)],
                     120, 0.05, 'the incoming QEMU on b (%s)' % fault)
            # Half-way: b's QEMU is paused, waiting for the guest's memory,
            # and already in its group with the requested ways.
            state = b.state(guest)
            assert state == 'paused', (fault, state)
            assert b.vcpu_tids(guest) <= b.tasks(guest.group), fault
            assert b.l3(guest.group) == {0: 3, 1: 3, 2: 3, 3: 3}, fault
            if fault == 'destination-qemu-killed':
                os.kill(b.pid(guest), signal.SIGKILL)
            elif fault == 'destination-libvirtd-killed':
                pid = b.libvirtd.pid()
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
            else:
                a.virsh('domjobabort', guest.name)
        finally:
            mover.join(300)
        res = result['res']
        assert res.returncode != 0, \
            '%s: the migration was not broken half-way' % fault
        if fault == 'destination-libvirtd-killed':
            # Until b's libvirtd is back its paused QEMU and group stay;
            # back, it ends the unfinished incoming migration (stopped,
            # release).
            assert guest.group in b.groups()
            _restart(b)
            wait_for(lambda: [t.event for t in events(b, guest)][-1:] ==
                     ['release end'], 120, what='b to end the incoming guest')
        # The source runs on, in its group, as before; b is as it was.
        running_in(a, guest, guest.group, {0: 3, 1: 3})
        assert a.snapshot() == a_before, fault
        wait_for(lambda: b.snapshot() == b_before, 30,
                 what='b as before the migration (%s)' % fault)
        assert guest.name not in b.virsh('list', '--all', '--name').stdout
