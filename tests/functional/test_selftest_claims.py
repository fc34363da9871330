"""Every kernel behaviour ``ovs-rdt selftest`` claims fails when it is false,
on every profile where it applies (doc/platforms.md, "What each line
claims").

Each divergence of the emulator (``ovs_rdt/emulator/divergences.py``) makes
one claim false; here it is turned on (a ``diverge NAME`` line in the
mounted emulator's faults file) on every case of tests/platform_matrix.py
where the claim applies, and the behaviour that checks the claim must FAIL
with the symptom it names, through the selftest's own runner (its lock, its
guard on every other group, its clean-up).  The faithful mounts pass:
test_emulator_conformance.py, and test_selftest.py on a loaded machine.
"""
from __future__ import annotations

import os
import re
from typing import Callable, Iterator, NamedTuple

import pytest

from ovs_rdt.emulator.divergences import DIVERGENCES
from ovs_rdt.emulator.profiles import PROFILES
from ovs_rdt.selftest.behaviours import BEHAVIOURS, monitoring
from ovs_rdt.selftest.node import Node
from ovs_rdt.selftest import runner
from ovs_rdt.selftest.runner import FAIL, run_one
from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.test_emulator_conformance import FOOTPRINTS, use
from tests.functional.test_profiles import enable_io_alloc
from tests.platform_matrix import CAPACITY_CASES, Case

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def every(case: Case) -> bool:
    return True


def prof(case: Case, field: str) -> object:
    return getattr(PROFILES[case.profile], field)


class Claim(NamedTuple):
    behaviour: str
    #: what the behaviour's FAIL line says
    symptom: str
    applies: Callable[[Case], bool] = every
    #: on a node in use (free ways: what a fresh node cannot try)
    in_use: bool = False
    #: it leaves the mount unlike the kernel: last on it
    last: bool = False
    #: on a mount of its own, started with --diverge and ``extra`` (what it
    #: changes is written at start, or needs a profile of its own)
    own_mount: bool = False
    extra: tuple[str, ...] = ()


#: divergence -> the claim it makes false.
CLAIMS = {
    'info-files': Claim('info', "lacks ['bit_usage']"),
    'cbm-mask-gap': Claim('info', 'is not contiguous from way 0'),
    'cache-ids': Claim('info', "the CPUs' L3 cache ids", own_mount=True),
    'mon-data-dirs': Claim('tree', '/mon_data lists'),
    'new-group-mode': Claim('tree', "a new group is 'exclusive\\n', not shareable"),
    'mkdir-moves-caller': Claim('tree', 'a new group has tasks'),
    'new-group-cpus': Claim('tree', 'a new group has cpus'),
    'mkdir-drops-cpu': Claim('tree', 'changed the default group (cpus, cpus_list)',
                             last=True),
    'size-writable': Claim('read-only', "not read-only: ["),
    'sparse-masks': Claim('schemata-refused', 'has non-consecutive 1-bits',
                          lambda c: not prof(c, 'sparse_masks')),
    'sparse-refused': Claim('schemata-accepted', 'has non-consecutive 1-bits',
                            lambda c: bool(prof(c, 'sparse_masks'))),
    'status-text': Claim('schemata-refused', "'Invalid mask\\n', expected 'Mask out of "
                         "range\\n'"),
    'partial-write': Claim('schemata-refused', 'refused writes changed the schemata'),
    # one domain and one resource (no MB, no CDP): nothing a reset could change
    'schemata-reset': Claim('schemata-accepted', 'alone the schemata reads',
                            lambda c: c.domains > 1 or c.cdp or bool(prof(c, 'mba'))),
    'size-all-ways': Claim('schemata-accepted', 'bytes a way)'),
    'new-group-one-way': Claim('new-group', 'ovs-rdt predicts'),
    'new-group-mb': Claim('new-group', ', not the maximum',
                          lambda c: bool(prof(c, 'mba'))),
    'mkdir-takes-exclusive': Claim('new-group', 'ovs-rdt predicts', in_use=True),
    'exclusive-overlap': Claim('exclusive', "expected EINVAL and 'Schemata overlaps"),
    'exclusive-unmarked': Claim('exclusive', 'of an exclusive group are not E', in_use=True),
    'overlap-taken': Claim('exclusive', "was accepted, expected EINVAL and 'Overlaps with "
                           'exclusive group', in_use=True),
    'cdp-together': Claim('schemata-accepted', 'alone the schemata reads L3CODE',
                          lambda c: c.cdp),
    'cdp-no-peer': Claim('cdp', "expected EINVAL and 'Overlaps with exclusive group",
                         lambda c: c.cdp, in_use=True),
    'num-closids': Claim('closids', 'groups made'),
    'io-alloc-closid': Claim('closids', 'groups made', lambda c: c.io_alloc, last=True),
    'tasks-stay': Claim('tasks', 'tasks reads set() after moving'),
    'tasks-one-write': Claim('tasks', 'two writes on one open moved'),
    'no-task-errno': Claim('tasks', 'failed with EINVAL, expected ESRCH'),
    'mon-move-across': Claim('tasks', "expected EINVAL and \"Can't move task to "
                             'different control group'),
    'rmdir-loses-tasks': Claim('tasks', 'did not give its tasks to the default group'),
    'removed-group-files': Claim('removed-group', 'expected ENODEV'),
    'counter-hex': Claim('mon-data', "reads '0x0\\n': neither a count"),
    'mbm-frozen': Claim('mon-data', 'mbm_total_bytes stayed at 0 under a memory load'),
    'occupancy-stuck': Claim('mon-data', 'llc_occupancy stayed at'),
    'ctrl-counts-own': Claim('mon-data', "less than its monitor group's"),
    'snc-sum': Claim('snc', 'its SNC nodes sum to', lambda c: prof(c, 'snc_nodes') != 1),
    'unassigned-zero': Claim('mbm-assign', "reads '0\\n' with no counter",
                             lambda c: bool(prof(c, 'mbm_cntrs'))),
    'counter-kept': Claim('mbm-assign', 'unassigning freed counters',
                          lambda c: bool(prof(c, 'mbm_cntrs'))),
    'assign-any-domain': Claim('mbm-assign', "was accepted, expected EINVAL and 'Invalid "
                               'domain id', lambda c: bool(prof(c, 'mbm_cntrs'))),
    'mb-granularity': Claim('mb', 'expected 20 (granularity 10)',
                            lambda c: c.mb == 'percent'),
    'mb-range': Claim('mb', 'was accepted, expected EINVAL and \'MB value',
                      lambda c: c.mb in ('percent', 'amd')),
    'nonlinear-mb': Claim('mb', "was accepted, expected EINVAL and 'No support for "
                          'non-linear MB domains', lambda c: c.mb == 'percent',
                          own_mount=True, extra=('--set', 'delay_linear=0')),
    'mbps-percent': Claim('mb', "'MB value 800 out of range [10,100]\\n'), expected it to "
                          'be accepted', lambda c: c.mb == 'mbps'),
    'mba-event-stays': Claim('mb', 'mba_MBps_event did not change',
                             lambda c: c.mb == 'mbps'),
    'io-alloc-cbm-readable': Claim('io-alloc', 'io_alloc_cbm reads while io_alloc is '
                                   'disabled',
                                   lambda c: bool(prof(c, 'io_alloc')) and not c.io_alloc),
    'io-alloc-unmarked': Claim('io-alloc', 'are not H or X', lambda c: c.io_alloc),
}
#: (divergence, case), a case's together: on one mount, fresh, then in use,
#: then what leaves it unlike the kernel.
RUNS = sorted(((name, case) for name, claim in CLAIMS.items()
               for case in CAPACITY_CASES if claim.applies(case)),
              key=lambda run: (CAPACITY_CASES.index(run[1]), CLAIMS[run[0]].last,
                               CLAIMS[run[0]].in_use))


def test_every_divergence_makes_a_claim_false() -> None:
    assert sorted(CLAIMS) == sorted(DIVERGENCES)
    names = {b.name for b in BEHAVIOURS}
    assert {c.behaviour for c in CLAIMS.values()} == names     # each has claims
    # doc/platforms.md's table of claims names each divergence on a row of
    # the line that fails
    rows: dict[str, list[str]] = {}
    with open(os.path.join(REPO, 'doc', 'platforms.md'), encoding='utf-8') as fh:
        text = fh.read()
    table = text.split('| line | claim (ovs-rdt relies on it) | a FAIL says | divergence |'
                       )[1].split('\n\n')[0]
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip('|').split(' | ')]
        for name in re.findall(r'`([a-z0-9-]+)`', cells[-1]):
            rows.setdefault(name, []).append(cells[0])
    assert sorted(rows) == sorted(CLAIMS)
    for name, claim in CLAIMS.items():
        assert any('`%s`' % claim.behaviour in line or line == 'every line'
                   for line in rows[name]), (name, rows[name])


def mount(case: Case, *extra: str, footprints: bool = True) -> EmulatorFixture:
    emu = EmulatorFixture(case.profile, list(case.options) + list(extra))
    emu.setUp()
    try:
        if footprints:
            emu.set_footprints(FOOTPRINTS)      # the load's counts at once, however busy
        enable_io_alloc(emu.root, case)
    except BaseException:
        emu.cleanUp()
        raise
    return emu


@pytest.fixture(scope='module')
def mounts() -> Iterator[Callable[[Case, bool], EmulatorFixture]]:
    """The mount of a case, fresh or (from the first run that asks) in use,
    one case at a time: its runs come together (:data:`RUNS`).
    """
    held: dict[str, tuple[EmulatorFixture, list[bool]]] = {}

    def get(case: Case, in_use: bool) -> EmulatorFixture:
        if case.id not in held:
            for emu, _ in held.values():
                emu.cleanUp()
            held.clear()
            held[case.id] = (mount(case), [False])
        emu, used = held[case.id]
        if in_use and not used[0]:
            use(emu, case)
            used[0] = True
        return emu

    yield get
    for emu, _ in held.values():
        emu.cleanUp()


@pytest.mark.parametrize('divergence,case', RUNS,
                         ids=['%s-%s' % (name, case.id) for name, case in RUNS])
def test_divergence_fails_the_behaviour(divergence: str, case: Case,
                                        mounts: Callable[[Case, bool], EmulatorFixture],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    claim = CLAIMS[divergence]
    # a count that never moves fails once the wait is over: wait less; and
    # watch less for another writer after a try that changed another group
    # (the watch's own length: test_selftest.py)
    monkeypatch.setattr(monitoring, 'SETTLE', 0.3)
    monkeypatch.setattr(runner, 'IDLE_MAX', 0.05)
    if claim.own_mount:
        emu = mount(case, '--diverge', divergence, *claim.extra)
    else:
        emu = mounts(case, claim.in_use)
        emu.set_faults('diverge ' + divergence)
    try:
        behaviour = [b for b in BEHAVIOURS if b.name == claim.behaviour][0]
        res = run_one(Node(emu.root, emu.sysfs), behaviour)
    finally:
        if claim.own_mount:
            emu.cleanUp()
        else:
            emu.set_faults()
    assert res.result == FAIL and claim.symptom in res.detail, res.detail
