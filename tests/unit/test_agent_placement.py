"""ovs_rdt.agent.placement with an in-memory CacheManager and resctrl."""
from __future__ import annotations

import contextlib

import pytest

from ovs_rdt.agent.pmd import PmdThread, Scan
from ovs_rdt.agent.placement import PmdPlacer
from ovs_rdt.conf import Settings
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import PMD_GROUP, ROOT, Group, MBInfo, Platform, Request
from ovs_rdt.core.plan import Plan, Step
from ovs_rdt.exceptions import InsufficientWays, ResctrlUnavailable

HP = 'ovsrdt-pool-hp'


class FakeResctrl:
    root = '/fake/resctrl'

    def __init__(self) -> None:
        self.members: dict[str, set[int]] = {ROOT: set(), HP: set()}
        self.masks: dict[str, dict[int, CBM]] = {
            ROOT: {0: CBM(0x7ff, 11), 1: CBM(0x7ff, 11)},
            HP: {0: CBM(0x7, 11), 1: CBM(0x7, 11)}}
        self.unavailable = False

    def platform(self, cpus: bool = False) -> Platform:
        if self.unavailable:
            raise ResctrlUnavailable('resctrl is not mounted at /fake')
        return Platform(11, 16, (0, 1), cpu_domains={0: 0, 1: 0, 2: 1, 3: 1},
                        mb=MBInfo(10, 10, True, (0, 1)))

    def tasks(self, name: str) -> list[int]:
        if name not in self.members:
            raise FileNotFoundError(name)
        return sorted(self.members[name])

    def group_names(self) -> list[str]:
        return sorted(self.members)

    def group(self, name: str, with_tasks: bool = True) -> Group:
        return Group(name, self.masks[name])

    def where(self, tid: int) -> str:
        return next((g for g, m in self.members.items() if tid in m), ROOT)

    def lock(self, exclusive: bool = True) -> contextlib.nullcontext:
        return contextlib.nullcontext()


class FakeManager:
    def __init__(self, pools: tuple[str, ...] = ('hp',)) -> None:
        self.resctrl = FakeResctrl()
        self.settings = Settings.defaults(
            pools={p: {'l3_ways': 3} for p in pools})
        self.calls: list[tuple] = []
        self.free = 9

    def allocate(self, req: Request) -> Plan:
        self.calls.append(('allocate', req.name, dict(req.ways),
                           req.mb_percent))
        ways = max(req.ways.values())
        if ways > self.free:
            raise InsufficientWays('%s asks for %d ways on domain 0 but only '
                                   '%d are free' % (req.name, ways, self.free))
        self.resctrl.members.setdefault(req.name, set())
        masks = {d: CBM(((1 << ways) - 1) << (11 - ways), 11)
                 for d in req.ways}
        done = Plan()
        if self.resctrl.masks.get(req.name) != masks:
            done.steps = [Step.schemata(req.name, masks)]
        self.resctrl.masks[req.name] = masks
        return done

    def release(self, name: str) -> None:
        self.calls.append(('release', name))
        self.resctrl.members[ROOT] |= self.resctrl.members.pop(name, set())
        self.resctrl.masks.pop(name, None)

    def assign(self, group: str, tids: list[int]) -> list[int]:
        self.calls.append(('assign', group, list(tids)))
        for members in self.resctrl.members.values():
            members.difference_update(tids)
        self.resctrl.members[group].update(tids)
        return []


def scan(pmds: dict[int, int], others: tuple = (100, 101), pid: int = 100
         ) -> Scan:
    return Scan(pid, [PmdThread(t, 'pmd-c%02d/id:%d' % (c, t), frozenset({c}))
                      for t, c in pmds.items()], list(others))


@pytest.fixture
def mgr() -> FakeManager:
    return FakeManager()


def test_nothing_known_does_nothing(mgr: FakeManager) -> None:
    placer = PmdPlacer(mgr)
    assert placer.sync(None, scan({200: 0})) == ''
    assert mgr.calls == []


def test_ways_places_pmds_and_vswitchd(mgr: FakeManager) -> None:
    placer = PmdPlacer(mgr)
    status = placer.sync({'rdt-pmd-l3-ways': '4'}, scan({200: 0, 201: 1}))
    assert ('allocate', PMD_GROUP, {0: 4}, None) in mgr.calls
    assert mgr.resctrl.members[PMD_GROUP] == {200, 201, 100, 101}
    assert status.startswith('ok: PMD cores 0,1 (2 threads) in ovsrdt-ovs-pmd')
    assert 'L3 0=780 (4 ways)' in status and 'same group' in status
    # Nothing changed: no resctrl call at all.
    mgr.calls.clear()
    assert placer.sync({'rdt-pmd-l3-ways': '4'}, scan({200: 0, 201: 1})) \
        == status
    assert mgr.calls == []


def test_forced_rescans_that_write_nothing_log_nothing(
        mgr: FakeManager, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 51 item 7: "allocating ovsrdt-ovs-pmd: 2 ways ..." at every
    re-scan (78 lines in 2.5 minutes).  Said at INFO when it wrote.
    """
    import logging
    caplog.set_level(logging.INFO, 'ovs_rdt.agent.placement')
    placer = PmdPlacer(mgr)
    knobs = {'rdt-pmd-l3-ways': '2'}
    placer.sync(knobs, scan({200: 0}))
    said = [r.getMessage() for r in caplog.records
            if r.getMessage().startswith('allocated ')]
    assert said == ['allocated %s: 2 ways on cache domains 0 for PMD cores '
                    '0 (1 resctrl write)' % PMD_GROUP]
    caplog.clear()
    for _ in range(5):
        placer.sync(knobs, scan({200: 0}), force=True)
    assert [c[0] for c in mgr.calls].count('allocate') == 6
    assert not [r for r in caplog.records if r.levelno >= logging.INFO and
                r.getMessage().startswith('allocated ')]
    placer.sync({'rdt-pmd-l3-ways': '3'}, scan({200: 0}))
    assert [r.getMessage() for r in caplog.records
            if r.getMessage().startswith('allocated ')] == [
        'allocated %s: 3 ways on cache domains 0 for PMD cores 0 (1 resctrl '
        'write)' % PMD_GROUP]


def test_threads_in_default_group_left_alone(mgr: FakeManager) -> None:
    mgr.resctrl.members[ROOT] = {100, 101, 200}
    PmdPlacer(mgr).sync({'pmd-cpu-mask': '0x1'}, scan({200: 0}), force=True)
    assert mgr.calls == []


def test_vswitchd_default_keeps_others_out(mgr: FakeManager) -> None:
    mgr.resctrl.members[ROOT] = {100, 101, 200}
    placer = PmdPlacer(mgr)
    placer.sync({'rdt-pmd-l3-ways': '4', 'rdt-vswitchd': 'default'},
                scan({200: 0}))
    assert mgr.resctrl.members[PMD_GROUP] == {200}
    assert [c[0] for c in mgr.calls] == ['allocate', 'assign']
    assert 'other ovs-vswitchd threads in the default group' in placer.status


def test_pmd_cores_pick_domains(mgr: FakeManager) -> None:
    PmdPlacer(mgr).sync({'rdt-pmd-l3-ways': '2'}, scan({200: 0, 201: 3}))
    assert ('allocate', PMD_GROUP, {0: 2, 1: 2}, None) in mgr.calls


def test_pmd_on_a_cpu_of_unknown_domain_takes_every_domain(
        mgr: FakeManager) -> None:
    """The hook's rule for vCPUs holds for PMD threads too
    (Platform.domains_of_cpus): CPU 9 has no known cache domain (offline),
    so the PMD group holds ways on every domain, not only CPU 0's.
    """
    PmdPlacer(mgr).sync({'rdt-pmd-l3-ways': '2'}, scan({200: 0, 201: 9}))
    assert ('allocate', PMD_GROUP, {0: 2, 1: 2}, None) in mgr.calls


def test_cpu_mask_counts_before_threads_exist(mgr: FakeManager) -> None:
    PmdPlacer(mgr).sync({'rdt-pmd-l3-ways': '2', 'pmd-cpu-mask': '0x4'},
                        scan({}))
    assert ('allocate', PMD_GROUP, {1: 2}, None) in mgr.calls


def test_new_pmd_threads_follow(mgr: FakeManager) -> None:
    placer = PmdPlacer(mgr)
    knobs = {'rdt-pmd-l3-ways': '4', 'pmd-cpu-mask': '0x1'}
    placer.sync(knobs, scan({200: 0}))
    mgr.calls.clear()
    knobs = dict(knobs, **{'pmd-cpu-mask': '0x3'})
    placer.sync(knobs, scan({200: 0, 300: 1}))
    # Same domains: no re-allocation, only the new TID moved.
    assert mgr.calls == [('assign', PMD_GROUP, [300])]


def test_vswitchd_restart_followed(mgr: FakeManager) -> None:
    placer = PmdPlacer(mgr)
    knobs = {'rdt-pmd-l3-ways': '4', 'rdt-vswitchd': 'default'}
    placer.sync(knobs, scan({200: 0}))
    down = Scan(None, why='ovs-vswitchd is not running (no live pid in x)')
    assert 'not running' in placer.sync(knobs, down)
    placer.sync(knobs, scan({900: 0}, others=(890,), pid=890))
    assert mgr.resctrl.members[PMD_GROUP] == {200, 900}  # 200: gone really


def test_pool_then_remove_restores(mgr: FakeManager) -> None:
    placer = PmdPlacer(mgr)
    placer.sync({'rdt-pmd-l3-ways': '4'}, scan({200: 0}))
    placer.sync({'rdt-pmd-pool': 'hp'}, scan({200: 0}))
    assert mgr.resctrl.members[HP] == {200, 100, 101}
    assert PMD_GROUP not in mgr.resctrl.members
    assert placer.status.startswith('ok: PMD cores 0 (1 thread) in '
                                    'ovsrdt-pool-hp L3 0=7;1=7 (3 ways)')
    placer.sync({}, scan({200: 0}))
    assert mgr.resctrl.members[HP] == set()
    assert {200, 100, 101} <= mgr.resctrl.members[ROOT]
    assert placer.status == ('ok: no rdt-* keys set; ovs-vswitchd runs in '
                             'the default group')


def test_removing_ways_releases_group(mgr: FakeManager) -> None:
    placer = PmdPlacer(mgr)
    placer.sync({'rdt-pmd-l3-ways': '4'}, scan({200: 0}))
    placer.sync({'pmd-cpu-mask': '1'}, scan({200: 0}))
    assert mgr.calls[-1] == ('release', PMD_GROUP)
    assert mgr.resctrl.where(200) == ROOT


def test_leftover_group_released_on_start(mgr: FakeManager) -> None:
    mgr.resctrl.members[PMD_GROUP] = {200}
    mgr.resctrl.masks[PMD_GROUP] = {0: CBM(0x780, 11)}
    PmdPlacer(mgr).sync({}, scan({200: 0}))
    assert PMD_GROUP not in mgr.resctrl.members


@pytest.mark.parametrize('bad, words', [
    ({'rdt-pmd-l3-ways': 'abc'}, "other_config:rdt-pmd-l3-ways: 'abc' is not "
     'a whole number'),
    ({'rdt-pmd-l3-ways': '4', 'rdt-pmd-pool': 'hp'}, 'exclude each other'),
    ({'rdt-pmd-pool': 'gold'}, 'names no pool configured'),
    ({'rdt-pmd-l3-ways': '10'}, 'only 9 are free'),
    # A typo'd key is an error too, never "no keys set" (which moved the
    # PMD threads back to the default group).
    ({'rdt-pmd-l3-ways': '4', 'rdt-pmd-pools': 'hp'},
     'other_config:rdt-pmd-pools: unknown ovs-rdt key (known: '
     'rdt-pmd-l3-ways, rdt-pmd-pool, rdt-vswitchd, rdt-pmd-mb-percent, '
     'rdt-pmd-mb-mbps)'),
    ({'rdt-pmd-pools': 'hp'}, 'other_config:rdt-pmd-pools: unknown'),
])
def test_bad_value_keeps_last_good_state(mgr: FakeManager, bad: dict,
                                         words: str) -> None:
    placer = PmdPlacer(mgr)
    placer.sync({'rdt-pmd-l3-ways': '4'}, scan({200: 0}))
    good_masks = dict(mgr.resctrl.masks[PMD_GROUP])
    status = placer.sync(bad, scan({200: 0}))
    assert status.startswith('error: ') and words in status
    assert mgr.resctrl.members[PMD_GROUP] == {200, 100, 101}
    assert mgr.resctrl.masks[PMD_GROUP] == good_masks
    # New PMD threads still follow the last good placement...
    assert placer.sync(bad, scan({200: 0, 201: 1})) == status
    assert 201 in mgr.resctrl.members[PMD_GROUP]
    # ...and a good value clears the error.
    assert placer.sync({'rdt-pmd-l3-ways': '3'}, scan({200: 0, 201: 1})
                       ).startswith('ok: ')


def test_unknown_key_keeps_the_pool_and_logs_the_placement_plainly(
        mgr: FakeManager, caplog: pytest.LogCaptureFixture) -> None:
    placer = PmdPlacer(mgr)
    assert placer.sync({'rdt-pmd-pool': 'hp'}, scan({200: 0})).startswith(
        'ok: PMD cores 0 (1 thread) in ovsrdt-pool-hp L3 0=7;1=7 (3 ways)')
    caplog.set_level('INFO')
    status = placer.sync({'rdt-pmd-pools': 'hp'}, scan({200: 0}))
    assert status.startswith('error: other_config:rdt-pmd-pools: unknown '
                             'ovs-rdt key (known: rdt-pmd-l3-ways, ')
    assert mgr.resctrl.members[HP] == {200, 100, 101}
    assert 'keeping the previous placement: PMD threads -> ovsrdt-pool-hp, '\
        'other ovs-vswitchd threads -> ovsrdt-pool-hp' in caplog.text
    assert 'Placement(' not in caplog.text
    # Removing the typo is a change the agent notices.
    assert placer.sync({'rdt-pmd-pool': 'hp'}, scan({200: 0})).startswith(
        'ok: ')


def test_first_value_bad(mgr: FakeManager) -> None:
    placer = PmdPlacer(mgr)
    assert placer.sync({'rdt-vswitchd': 'x'}, scan({200: 0})).startswith(
        "error: other_config:rdt-vswitchd: 'x' is not one of")
    assert mgr.calls == []


def test_force_reallocates_and_repairs(mgr: FakeManager) -> None:
    placer = PmdPlacer(mgr)
    knobs = {'rdt-pmd-l3-ways': '4'}
    placer.sync(knobs, scan({200: 0}))
    mgr.resctrl.members[ROOT].add(200)  # someone moved it
    mgr.resctrl.members[PMD_GROUP].discard(200)
    mgr.calls.clear()
    placer.sync(knobs, scan({200: 0}), force=True)
    assert mgr.calls[0][0] == 'allocate'
    assert mgr.resctrl.where(200) == PMD_GROUP


def test_missing_pool_group_is_an_error(mgr: FakeManager) -> None:
    del mgr.resctrl.members[HP]
    status = PmdPlacer(mgr).sync({'rdt-pmd-pool': 'hp'}, scan({200: 0}))
    assert status.startswith('error: ovsrdt-pool-hp does not exist')


def test_resctrl_unavailable_raises_for_the_loop(mgr: FakeManager) -> None:
    mgr.resctrl.unavailable = True
    with pytest.raises(ResctrlUnavailable):
        PmdPlacer(mgr).sync({'rdt-pmd-l3-ways': '4'}, scan({200: 0}))


def test_mb_percent_passed(mgr: FakeManager) -> None:
    PmdPlacer(mgr).sync({'rdt-pmd-l3-ways': '4', 'rdt-pmd-mb-percent': '40'},
                        scan({200: 0}))
    assert ('allocate', PMD_GROUP, {0: 4}, 40) in mgr.calls


def test_fast_path_reads_no_tasks_file(mgr: FakeManager) -> None:
    placer = PmdPlacer(mgr)
    knobs = {'rdt-pmd-l3-ways': '4', 'rdt-vswitchd': 'default'}
    placer.sync(knobs, scan({200: 0}))
    reads: list[str] = []
    real = mgr.resctrl.tasks
    mgr.resctrl.tasks = lambda g: reads.append(g) or real(g)  # type: ignore
    mgr.calls.clear()
    # A thread is born (not yet named: an "other", born in the default
    # group like its creator), then becomes a PMD thread.
    placer.sync(knobs, scan({200: 0}, others=(100, 101, 300)))
    assert mgr.calls == [] and reads == []
    placer.sync(knobs, scan({200: 0, 300: 1}))
    assert mgr.calls == [('assign', PMD_GROUP, [300])] and reads == []


def test_newborn_pmd_leaves_vswitchd_pool(mgr: FakeManager) -> None:
    placer = PmdPlacer(mgr)
    knobs = {'rdt-vswitchd': 'pool:hp'}
    placer.sync(knobs, scan({200: 0}))
    assert mgr.resctrl.members[HP] == {100, 101}
    mgr.resctrl.members[HP].add(300)   # inherited from the main thread
    placer.sync(knobs, scan({200: 0, 300: 1}))
    assert mgr.resctrl.where(300) == ROOT
    assert mgr.resctrl.members[HP] == {100, 101}


def test_reused_tid_in_a_restarted_vswitchd_is_placed(mgr) -> None:
    placer = PmdPlacer(mgr)
    knobs = {'rdt-pmd-l3-ways': '4', 'rdt-vswitchd': 'default'}
    placer.sync(knobs, scan({200: 0}))
    assert mgr.resctrl.where(200) == PMD_GROUP
    # ovs-vswitchd restarts (pid 500); the kernel hands TID 200 out again,
    # to the new process's PMD thread, born in the default group.
    mgr.resctrl.members[PMD_GROUP].discard(200)
    mgr.resctrl.members[ROOT] |= {200, 500}
    placer.sync(knobs, scan({200: 0}, others=(500,), pid=500))
    assert mgr.resctrl.where(200) == PMD_GROUP


def test_transient_failure_clears_with_the_next_success(mgr) -> None:
    from ovs_rdt.exceptions import ResctrlUnavailable
    placer = PmdPlacer(mgr)
    knobs = {'rdt-pmd-l3-ways': '4', 'rdt-vswitchd': 'default'}
    assert placer.sync(knobs, scan({200: 0})).startswith('ok: ')
    real = mgr.assign
    calls = []

    def flaky(group: str, tids: list[int]) -> list[int]:
        calls.append(tids)
        if len(calls) == 1:
            raise ResctrlUnavailable('timed out after 30s waiting for the '
                                     'lock on /fake')
        return real(group, tids)

    mgr.assign = flaky  # type: ignore[method-assign]
    status = placer.sync(knobs, scan({200: 0, 201: 1}))
    assert status.startswith('error: timed out')
    # The very next scan (no OVSDB change, no forced re-scan) succeeds.
    status = placer.sync(knobs, scan({200: 0, 201: 1}))
    assert status.startswith('ok: PMD cores 0,1 (2 threads)')
    assert mgr.resctrl.where(201) == PMD_GROUP
    # A bad key stays an error while good placements go on.
    status = placer.sync({'rdt-pmd-l3-ways': 'x'}, scan({200: 0, 201: 1}))
    assert status.startswith("error: other_config:rdt-pmd-l3-ways: 'x' is not")
    assert placer.sync({'rdt-pmd-l3-ways': 'x'},
                       scan({200: 0, 201: 1, 202: 1})) == status
    assert mgr.resctrl.where(202) == PMD_GROUP


def test_pmd_label_follows_placement_and_holds_through_restart(
        mgr: FakeManager) -> None:
    placer = PmdPlacer(mgr)
    assert placer.pmd_groups() == {}
    knobs = {'rdt-pmd-l3-ways': '4', 'rdt-vswitchd': 'default'}
    placer.sync(knobs, scan({200: 0, 201: 1}))
    assert placer.pmd_groups() == {PMD_GROUP: '0,1'}
    # ovs-vswitchd down: its PMD threads are gone, the label is not.
    placer.sync(knobs, Scan(None, why='ovs-vswitchd is not running'))
    assert placer.pmd_groups() == {PMD_GROUP: '0,1'}
    # pmd-cpu-mask changed: new cores; another group: the label moves.
    placer.sync(dict(knobs, **{'pmd-cpu-mask': '0x1'}), scan({300: 0}))
    assert placer.pmd_groups() == {PMD_GROUP: '0'}
    placer.sync({'rdt-pmd-pool': 'hp'}, scan({300: 0}))
    assert placer.pmd_groups() == {HP: '0'}
    placer.sync({}, scan({300: 0}))
    assert placer.pmd_groups() == {}


def test_each_failed_placement_is_counted(mgr: FakeManager) -> None:
    from ovs_rdt.agent.counters import Counters
    counters = Counters()
    placer = PmdPlacer(mgr, counters)
    placer.sync({'rdt-pmd-l3-ways': '4'}, scan({200: 0}))
    assert counters.snapshot('errors') == {}
    placer.sync({'rdt-pmd-l3-ways': '40'}, scan({200: 0}))   # bad value
    mgr.free = 0                                  # and the platform is full
    placer.sync({'rdt-pmd-l3-ways': '5'}, scan({200: 0}))
    assert counters.snapshot('errors') == {(('source', 'placement'),): 2.0}
