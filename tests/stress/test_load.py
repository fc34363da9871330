"""Load: N concurrent ``virsh start`` of annotated guests, with PMD
re-creation and ``ovs-rdt apply`` at the same moment, on real parts.

Guests are minimal (1 vCPU, 32 MiB, no disk), mixed: a quarter join the
pool ``noisy``, the others ask for 1, 2 or 3 dedicated ways on every cache
domain; with 14 ways free per domain and 13 spare CLOSIDs, some cannot fit.
After each round :func:`bed.check_invariants` and :func:`bed.check_refusal`
judge the emulator's files; then every guest is destroyed at once and the
node must be back where it was (groups and free ways counted before and
after).  Figures: starts/s and p50/p95/p99 of the hook's time per event.

Quick budget: one round of 16.  ``OVS_RDT_STRESS=long``: rounds of 16, 32,
16, 32.
"""
from __future__ import annotations

import time

import pytest

from tests.functional.fixtures.libvirt import Guest
from tests.stress import bed, figures
from tests.stress.conftest import LONG

ROUNDS = (16, 32, 16, 32) if LONG else (16,)


def percentiles(name: str, values: list[float]) -> None:
    for pct in (50, 95, 99):
        figures.record('hook %s p%d ms' % (name, pct),
                       round(figures.percentile(values, pct), 1))


@pytest.mark.parametrize('size', ROUNDS)
def test_concurrent_starts(node: bed.Node, size: int) -> None:
    assert node.vm_groups() == []
    ours_before = node.our_groups()
    free_before = bed.check_invariants(node)
    guests: list[tuple[Guest, int | None]] = []
    for i in range(size):
        ways = None if i % 4 == 0 else (1, 2, 3)[i % 3]
        meta = bed.pooled() if ways is None else bed.dedicated(ways)
        guests.append((node.tb.define(meta, vcpus=1, memory_mib=32), ways))
    since = node.hook_log_size()
    assert node.ovs is not None

    def pmd_churn() -> None:            # PMD threads re-created twice
        for mask in ('0x3', '0x1'):
            node.ovs.other_config(**{'pmd-cpu-mask': mask})
            time.sleep(0.3)

    jobs = [lambda g=g: node.tb.start(g, check=False) for g, _ in guests]
    jobs += [pmd_churn, node.apply]
    start = time.monotonic()
    results = bed.all_at_once(jobs)
    elapsed = time.monotonic() - start
    for res in results:
        assert not isinstance(res, BaseException), res
    applied = results[-1]
    assert applied.returncode == 0, applied.stderr

    running, refused = [], {'ways': 0, 'closids': 0}
    for (guest, ways), res in zip(guests, results):
        if res.returncode == 0:
            running.append((guest, bed.POOL_GROUP if ways is None
                            else guest.group))
            continue
        assert ways is not None, 'pool guest %s refused: %s' % (
            guest.name, res.stderr)
        ours = [ln for ln in res.stderr.splitlines() if 'ovs-rdt:' in ln]
        assert len(ours) == 1, res.stderr       # one line of ours
        refused[bed.check_refusal(node, guest, ways, res.stderr)] += 1
    node.wait_agent_ok()
    bed.wait_for(node.pmd_in_group, timeout=30, what='PMDs in their group')
    bed.check_invariants(node, running)
    assert refused['ways'] + refused['closids'] > 0, 'every guest fit'

    figures.add('guests started concurrently', len(running))
    figures.add('starts refused (ways or CLOSIDs ran out)',
                refused['ways'] + refused['closids'])
    figures.add('double-allocated ways', 0)
    figures.record('round %d: started/refused/seconds' % size,
                   '%d/%d/%.1f' % (len(running), size - len(running), elapsed))
    figures.record('round %d: starts/s' % size,
                   round(len(running) / elapsed, 2))
    for event, values in node.hook_times(since).items():
        percentiles(event, values)

    bed.all_at_once([lambda g=g: node.tb.destroy(g) for g, _ in running])
    for guest, _ in guests:
        node.tb.undefine(guest)
    assert node.vm_groups() == []
    assert node.our_groups() == ours_before
    assert bed.check_invariants(node) == free_before
    figures.add('groups leaked', 0)
