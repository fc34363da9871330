"""ovs-rdt-agent against a real ovsdb-server + ovs-vswitchd (dummy-pmd ports,
real PMD threads) and the mounted resctrl emulator (xeon-gold-6230: 11-bit
CBM, CPUs 0 and 1 on cache domain 0).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any
import uuid

from ovs_rdt.core.model import PMD_GROUP, ROOT
from ovs_rdt.resctrl import Resctrl
from tests.functional.fixtures.ovs import OvsTestbed, wait_for

HP = 'ovsrdt-pool-hp'
TIMEOUT = 10.0


def tasks(rc: Resctrl, group: str) -> set[int]:
    try:
        return set(rc.tasks(group))
    except FileNotFoundError:
        return set()


def exists(rc: Resctrl, group: str) -> bool:
    return os.path.isdir(rc.path(group))


def status(ovs: OvsTestbed) -> str:
    return ovs.external_id('rdt-status') or ''


def wait_status(ovs: OvsTestbed, prefix: str, contains: str = '',
                timeout: float = TIMEOUT) -> str:
    return wait_for(lambda: (lambda s: s if s.startswith(prefix) and
                             contains in s else None)(status(ovs)),
                    timeout=timeout, step=0.05,
                    what='rdt-status %r ... %r (now %r)'
                    % (prefix, contains, status(ovs)))


def wait_members(rc: Resctrl, group: str, want: Any,
                 timeout: float = TIMEOUT) -> set[int]:
    """Wait until ``group`` holds exactly ``want()`` (re-evaluated)."""
    def check() -> Any:
        expected = set(want())
        got = tasks(rc, group)
        return got if expected and got == expected else None
    try:
        return wait_for(check, timeout=timeout, what=group)
    except AssertionError:
        raise AssertionError('%s holds %s, expected %s'
                             % (group, sorted(tasks(rc, group)),
                                sorted(set(want())))) from None


def isolated_ways(rc: Resctrl, group: str, domain: int) -> int:
    """Ways of ``group`` on ``domain``; -1 if another group overlaps them."""
    groups = rc.groups()
    mine = next(g for g in groups if g.name == group).l3[domain]
    for other in groups:
        if other.name != group and mine.overlaps(other.l3[domain]):
            return -1
    return mine.count


def setup(ovs: OvsTestbed, emulated_resctrl: Any, rdt_agent: Any,
          **kw: Any) -> tuple[Resctrl, Any]:
    rc = Resctrl(emulated_resctrl.root, emulated_resctrl.sysfs)
    agent = rdt_agent(**kw)
    wait_status(ovs, 'ok: no rdt-* keys set')
    return rc, agent


def test_l3_ways_mask_change_and_removal(ovs, emulated_resctrl,
                                         rdt_agent) -> None:
    rc, _agent = setup(ovs, emulated_resctrl, rdt_agent)
    # Dedicated group, PMD threads only.
    ovs.other_config(rdt_pmd_l3_ways='4', rdt_vswitchd='default')
    wait_members(rc, PMD_GROUP, lambda: ovs.pmd_threads())
    assert isolated_ways(rc, PMD_GROUP, 0) == 4
    text = wait_status(ovs, 'ok: PMD cores 0 (1 thread) in ovsrdt-ovs-pmd',
                       '(4 ways)')
    assert 'other ovs-vswitchd threads in the default group' in text
    # Default rdt-vswitchd=pmd: every thread of ovs-vswitchd joins.
    ovs.other_config(rdt_vswitchd=None)
    wait_members(rc, PMD_GROUP, lambda: ovs.threads())
    # pmd-cpu-mask 0x1 -> 0x3: the new PMD thread is placed, no manual step.
    before = set(ovs.pmd_threads())
    ovs.other_config(pmd_cpu_mask='0x3')
    pmds = ovs.wait_pmds({0, 1})
    assert set(pmds) - before
    wait_members(rc, PMD_GROUP, lambda: ovs.threads())
    wait_status(ovs, 'ok: PMD cores 0,1 (2 threads) in ovsrdt-ovs-pmd')
    # Same, with vswitchd's threads left in the default group: the new PMD
    # thread is born in the default group and must be moved explicitly.
    ovs.other_config(rdt_vswitchd='default')
    wait_members(rc, PMD_GROUP, lambda: ovs.pmd_threads())
    ovs.other_config(pmd_cpu_mask='0x1')
    ovs.wait_pmds({0})
    ovs.other_config(pmd_cpu_mask='0x3')
    ovs.wait_pmds({0, 1})
    wait_members(rc, PMD_GROUP, lambda: ovs.pmd_threads())
    # Removing the keys restores: group gone, ways back to the default group.
    ovs.other_config(rdt_pmd_l3_ways=None, rdt_vswitchd=None)
    wait_for(lambda: not exists(rc, PMD_GROUP), what='PMD group removed')
    assert set(ovs.threads()) <= tasks(rc, ROOT)
    wait_status(ovs, 'ok: no rdt-* keys set')


def test_pool_and_back(ovs, emulated_resctrl, rdt_agent) -> None:
    rc, _agent = setup(ovs, emulated_resctrl, rdt_agent)
    ovs.other_config(rdt_pmd_l3_ways='4')
    wait_members(rc, PMD_GROUP, lambda: ovs.threads())
    ovs.other_config(rdt_pmd_l3_ways=None, rdt_pmd_pool='hp')
    wait_members(rc, HP, lambda: ovs.threads())
    wait_for(lambda: not exists(rc, PMD_GROUP), what='PMD group removed')
    wait_status(ovs, 'ok: PMD cores 0 (1 thread) in ovsrdt-pool-hp',
                '(3 ways)')
    # vswitchd's other threads into the default group, PMDs stay.
    ovs.other_config(rdt_vswitchd='default')
    wait_members(rc, HP, lambda: ovs.pmd_threads())
    ovs.other_config(rdt_pmd_pool=None, rdt_vswitchd=None)
    wait_for(lambda: not tasks(rc, HP), what='pool emptied')
    assert set(ovs.threads()) <= tasks(rc, ROOT)
    assert exists(rc, HP)  # the pool itself is configuration, it stays
    wait_status(ovs, 'ok: no rdt-* keys set')


def test_bad_values_keep_last_good_state(ovs, emulated_resctrl,
                                         rdt_agent) -> None:
    rc, _agent = setup(ovs, emulated_resctrl, rdt_agent)
    ovs.other_config(rdt_pmd_l3_ways='4', rdt_vswitchd='default')
    wait_members(rc, PMD_GROUP, lambda: ovs.pmd_threads())
    good = wait_status(ovs, 'ok: PMD cores 0')
    schemata = rc.read(rc.path(PMD_GROUP, 'schemata'))
    members = tasks(rc, PMD_GROUP)
    bad = [
        ({'rdt_pmd_l3_ways': 'abc'},
         "other_config:rdt-pmd-l3-ways: 'abc' is not a whole number"),
        ({'rdt_pmd_l3_ways': '\u0663'},    # as rdt:l3_ways=\u0663 is
         "other_config:rdt-pmd-l3-ways: '\u0663' is not a whole number"),
        ({'rdt_pmd_l3_ways': '9'},     # 11 - 3 (pool hp) - 2 (system) = 6
         'rdt-pmd-l3-ways=9: ovsrdt-ovs-pmd needs 9 ways on cache domain 0'),
        ({'rdt_pmd_l3_ways': '12'}, 'more than the 11 ways'),
        ({'rdt_pmd_l3_ways': '4', 'rdt_pmd_pool': 'hp'},
         'exclude each other'),
        ({'rdt_pmd_l3_ways': None, 'rdt_pmd_pool': 'gold'},
         "other_config:rdt-pmd-pool: 'gold' names no pool configured on this "
         'host (configured: hp'),
        ({'rdt_pmd_l3_ways': '4', 'rdt_pmd_pool': None,
          'rdt_vswitchd': 'somewhere'},
         "other_config:rdt-vswitchd: 'somewhere' is not one of"),
        ({'rdt_vswitchd': 'default', 'rdt_pmd_mb_percent': '0'},
         "other_config:rdt-pmd-mb-percent: '0' must be from 1 to 100"),
    ]
    for keys, words in bad:
        ovs.other_config(**keys)
        text = wait_status(ovs, 'error: ', words)
        assert 'Traceback' not in text
        assert rc.read(rc.path(PMD_GROUP, 'schemata')) == schemata, keys
        assert tasks(rc, PMD_GROUP) == members, keys
    ovs.other_config(rdt_pmd_mb_percent=None)
    assert wait_status(ovs, 'ok: ') == good
    _agent.proc.poll()
    assert _agent.proc.returncode is None


KNOWN_KEYS = ('rdt-pmd-l3-ways, rdt-pmd-pool, rdt-vswitchd, '
              'rdt-pmd-mb-percent, rdt-pmd-mb-mbps')


def test_mistyped_key_is_an_error_and_moves_nothing(ovs, emulated_resctrl,
                                                    rdt_agent) -> None:
    """``rdt-pmd-pools=hp`` (one letter too many) with ``rdt-vswitchd=pmd``.

    Before: ``ok: no rdt-* keys set; ...`` and the PMD threads were moved
    out of pool hp.  Now an error naming the key and the known ones, and
    the threads stay where the last good keys put them, as for a bad value.
    """
    rc, agent = setup(ovs, emulated_resctrl, rdt_agent)
    ovs.other_config(rdt_pmd_pool='hp', rdt_vswitchd='pmd')
    members = wait_members(rc, HP, lambda: ovs.threads())
    wait_status(ovs, 'ok: PMD cores 0 (1 thread) in ovsrdt-pool-hp')
    ovs.other_config(rdt_pmd_pool=None, rdt_pmd_pools='hp')
    text = wait_status(ovs, 'error: ', 'rdt-pmd-pools')
    assert text == ('error: other_config:rdt-pmd-pools: unknown ovs-rdt key '
                    '(known: %s)' % KNOWN_KEYS)
    assert tasks(rc, HP) == members
    # New PMD threads still follow the last good keys.
    ovs.other_config(pmd_cpu_mask='0x3')
    ovs.wait_pmds({0, 1})
    wait_members(rc, HP, lambda: ovs.threads())
    assert status(ovs) == text
    log = agent.log()
    assert ('keeping the previous placement: PMD threads -> ovsrdt-pool-hp, '
            'other ovs-vswitchd threads -> ovsrdt-pool-hp') in log, log[-3000:]
    assert 'Placement(' not in log
    # An agent that starts with the typo there says so, and moves nothing.
    agent.stop()
    ovs.vsctl('remove', 'Open_vSwitch', '.', 'external_ids', 'rdt-status')
    rdt_agent()
    assert wait_status(ovs, 'error: ') == text
    assert tasks(rc, HP) == set(ovs.threads())
    ovs.other_config(rdt_pmd_pools=None)
    wait_status(ovs, 'ok: no rdt-* keys set')
    wait_for(lambda: not tasks(rc, HP), what='pool emptied')


def test_vswitchd_and_ovsdb_restarts_followed(ovs, emulated_resctrl,
                                              rdt_agent) -> None:
    rc, _agent = setup(ovs, emulated_resctrl, rdt_agent)
    ovs.other_config(rdt_pmd_l3_ways='4', rdt_vswitchd='default')
    wait_members(rc, PMD_GROUP, lambda: ovs.pmd_threads())
    old = ovs.vswitchd_pid
    ovs.kill_vswitchd()
    wait_status(ovs, 'ok: PMD threads -> ovsrdt-ovs-pmd', 'not running')
    started = time.monotonic()
    ovs.start_vswitchd()
    assert ovs.vswitchd_pid != old
    ovs.wait_pmds({0})
    wait_members(rc, PMD_GROUP, lambda: ovs.pmd_threads())
    assert time.monotonic() - started < 5
    wait_status(ovs, 'ok: PMD cores 0 (1 thread)')
    # ovsdb-server restart: the agent reconnects, follows new values.
    ovs.kill_ovsdb()
    ovs.start_ovsdb()
    ovs.other_config(rdt_vswitchd=None)
    wait_members(rc, PMD_GROUP, lambda: ovs.threads(), timeout=20)
    ovs.vsctl('remove', 'Open_vSwitch', '.', 'external_ids', 'rdt-status')
    wait_status(ovs, 'ok: PMD cores 0', 'same group')


def test_sigterm_keeps_allocations_restart_adopts(ovs, emulated_resctrl,
                                                  rdt_agent) -> None:
    rc, agent = setup(ovs, emulated_resctrl, rdt_agent)
    ovs.other_config(rdt_pmd_l3_ways='4')
    wait_members(rc, PMD_GROUP, lambda: ovs.threads())
    schemata = rc.read(rc.path(PMD_GROUP, 'schemata'))
    started = time.monotonic()
    assert agent.stop() == 0
    assert time.monotonic() - started < 5
    assert 'allocations are kept' in agent.log()
    assert rc.read(rc.path(PMD_GROUP, 'schemata')) == schemata
    assert tasks(rc, PMD_GROUP) == set(ovs.threads())
    # While it is down the mask changes; a new agent adopts and catches up.
    ovs.other_config(pmd_cpu_mask='0x3')
    ovs.wait_pmds({0, 1})
    rdt_agent()
    wait_members(rc, PMD_GROUP, lambda: ovs.threads())
    assert rc.read(rc.path(PMD_GROUP, 'schemata')) == schemata
    wait_status(ovs, 'ok: PMD cores 0,1 (2 threads)')


def test_mb_percent_and_safety_rescan_repairs_drift(
        ovs, emulated_resctrl, rdt_agent) -> None:
    rc, _agent = setup(ovs, emulated_resctrl, rdt_agent, rescan_interval=1)
    ovs.other_config(rdt_pmd_l3_ways='3', rdt_pmd_mb_percent='50')
    wait_members(rc, PMD_GROUP, lambda: ovs.threads())
    assert rc.group(PMD_GROUP).mb == {0: 50, 1: 50}
    # Someone moves a PMD thread and rewrites the mask behind our back.
    pmd = next(iter(ovs.pmd_threads()))
    rc.write(rc.path(ROOT, 'tasks'), '%d\n' % pmd)
    rc.write(rc.path(PMD_GROUP, 'schemata'), 'L3:0=3;1=3\n')
    assert pmd not in tasks(rc, PMD_GROUP)
    wait_members(rc, PMD_GROUP, lambda: ovs.threads(), timeout=5)
    wait_for(lambda: isolated_ways(rc, PMD_GROUP, 0) == 3, timeout=5,
             what='mask repaired')


def test_safety_rescan_finishes_a_plan_killed_half_way(
        ovs, emulated_resctrl, rdt_agent) -> None:
    """An ``apply``, hook or agent killed between two writes of a move
    leaves a running VM's group ``shareable`` (its ways its own: the
    write order keeps that true after every write), a selftest killed
    with SIGKILL its groups.  With no event, the agent's safety re-scan
    applies again: the group is isolated again, the selftest's gone.
    """
    from ovs_rdt import conf, vm_group
    from ovs_rdt.core.model import Request
    from ovs_rdt.manager import CacheManager
    rc, agent = setup(ovs, emulated_resctrl, rdt_agent, rescan_interval=1)
    mgr = CacheManager(rc, conf.load(agent.config_file))
    vm = vm_group(str(uuid.uuid4()))
    mgr.allocate(Request(vm, ways={0: 2, 1: 2}))
    assert rc.group(vm).mode == 'exclusive'
    rc.write(rc.path(vm, 'mode'), 'shareable\n')
    dead = 'ovsrdt-selftest-%d-probe' % (2 ** 22 + 1)     # no such PID
    os.mkdir(rc.path(dead))
    held = rc.group(vm).l3
    wait_for(lambda: rc.group(vm).mode == 'exclusive' and
             not exists(rc, dead), timeout=TIMEOUT,
             what='the group isolated again, the leftovers gone')
    assert rc.group(vm).l3 == held
    assert "removing what a selftest that is gone left: %s" % dead in \
        agent.log()
    # Then resctrl holds the plan: three more re-scans apply nothing.
    applied = agent.log().count('ovsrdt- groups found')
    time.sleep(3.5)
    assert agent.log().count('ovsrdt- groups found') == applied


def test_sighup_rereads_config(ovs, emulated_resctrl, rdt_agent) -> None:
    rc, agent = setup(ovs, emulated_resctrl, rdt_agent)
    ovs.other_config(rdt_pmd_pool='noisy')
    wait_status(ovs, "error: other_config:rdt-pmd-pool: 'noisy' names no "
                'pool configured')
    with open(agent.config_file) as fh:
        text = fh.read()
    text = text.replace('pools = hp', 'pools = hp,noisy')
    with open(agent.config_file, 'w') as fh:
        fh.write(text + '[pool:noisy]\nl3_ways = 2\n')
    agent.signal(signal.SIGHUP)
    wait_members(rc, 'ovsrdt-pool-noisy', lambda: ovs.threads())
    wait_status(ovs, 'ok: PMD cores 0 (1 thread) in ovsrdt-pool-noisy')


UNLISTED = ('[pool:noisy] is ignored: noisy is not in [allocation] pools '
            '(hp), so there is no group ovsrdt-pool-noisy (one left from '
            'before is removed, its tasks moved to the default group); add '
            'noisy to pools to use the pool, or remove or comment out the '
            'section')


def test_unlisted_pool_section_warned_at_start_and_sighup(
        ovs, emulated_resctrl, rdt_agent) -> None:
    """A [pool:X] section that ``pools =`` does not list: ignored (a pool
    kept disabled on purpose), with a warning in the log at start and at
    every SIGHUP.  Before: without a word.
    """
    rc, agent = setup(ovs, emulated_resctrl, rdt_agent,
                      extra='[pool:noisy]\nl3_ways = 2\n')
    text = 'config file %s: %s' % (agent.config_file, UNLISTED)

    def warnings() -> int:
        lines = [ln for ln in agent.log().splitlines() if text in ln]
        assert all(' WARNING ' in ln for ln in lines), lines
        return len(lines)
    assert warnings() == 1, agent.log()[-3000:]
    assert not exists(rc, 'ovsrdt-pool-noisy')
    agent.signal(signal.SIGHUP)
    wait_for(lambda: warnings() == 2, what='warned again')
    with open(agent.config_file) as fh:
        config = fh.read()
    with open(agent.config_file, 'w') as fh:
        fh.write(config.replace('pools = hp', 'pools = hp,noisy'))
    agent.signal(signal.SIGHUP)
    wait_for(lambda: exists(rc, 'ovsrdt-pool-noisy'), what='pool noisy')
    assert warnings() == 2


def test_cli_warns_of_an_unlisted_pool(emulated_resctrl, tmp_path) -> None:
    config = tmp_path / 'ovs-rdt.conf'
    config.write_text('[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n'
                      '[allocation]\npools = hp\n[pool:hp]\nl3_ways = 3\n'
                      '[pool:noisy]\nl3_ways = 2\n'
                      % (emulated_resctrl.root, emulated_resctrl.sysfs))
    rc = Resctrl(emulated_resctrl.root, emulated_resctrl.sysfs)
    for command in ('apply', 'status'):
        res = subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                              '--config-file', str(config), command],
                             capture_output=True, text=True, timeout=60)
        # (status: 5, no agent runs for this root)
        assert res.returncode == (5 if command == 'status' else 0), \
            res.stderr
        assert res.stderr == 'ovs-rdt %s: warning: config file %s: %s\n' % (
            command, config, UNLISTED)
    assert exists(rc, HP) and not exists(rc, 'ovsrdt-pool-noisy')


FAKE_QEMU = 'import time; time.sleep(60)'


def test_reconciler_removes_groups_of_dead_vms(ovs, emulated_resctrl,
                                               rdt_agent, tmp_path) -> None:
    from ovs_rdt.conf import Settings
    from ovs_rdt.core.model import Request
    from ovs_rdt.manager import CacheManager
    from ovs_rdt import vm_group
    rc = Resctrl(emulated_resctrl.root, emulated_resctrl.sysfs)
    mgr = CacheManager(rc, Settings.defaults(pools={'hp': {'l3_ways': 3}}))
    live, dead, kvm = (str(uuid.uuid4()) for _ in range(3))
    qemu = tmp_path / 'qemu-system-x86_64'
    os.symlink(sys.executable, qemu)
    proc = subprocess.Popen([str(qemu), '-c', FAKE_QEMU, '-name',
                             'guest=vm1,debug-threads=on', '-uuid', live])
    # An emulator reached through a symlink named otherwise (Debian's
    # /usr/bin/kvm), between QEMU's start and the "started" hook: its
    # group holds no task yet.
    os.symlink(sys.executable, tmp_path / 'kvm')
    starting = subprocess.Popen([str(tmp_path / 'kvm'), '-c', FAKE_QEMU,
                                 '-name', 'guest=vm2', '-uuid', kvm])
    try:
        for vm in (live, dead, kvm):
            mgr.allocate(Request(vm_group(vm), ways={0: 1}))
        mgr.assign(vm_group(live), [proc.pid])
        rdt_agent(reconcile_interval=1,
                  patches={'ovs_rdt.agent.orphans.ORPHAN_GRACE': '1.5'})
        wait_for(lambda: not exists(rc, vm_group(dead)), timeout=TIMEOUT,
                 what='dead VM group removed')
        time.sleep(1.5)  # a few more passes
        assert exists(rc, vm_group(live)) and exists(rc, vm_group(kvm))
        assert exists(rc, HP)
        assert tasks(rc, vm_group(live)) == {proc.pid}
    finally:
        for child in (proc, starting):
            child.kill()
            child.wait()


def test_agent_beside_a_group_another_tool_just_made(
        ovs, emulated_resctrl, rdt_agent) -> None:
    """Issue 27: a bare ``mkdir`` (the kernel's default mask: every
    shareable way, ovs-rdt's noisy pool's included) while a VM's group is
    left behind.  The agent starts (it applies the pools), reports ok, and
    its reconciliation frees the dead VM's group; the other tool's group
    is never touched.
    """
    from ovs_rdt.conf import Settings
    from ovs_rdt.core.model import Request
    from ovs_rdt.manager import CacheManager
    from ovs_rdt import vm_group
    pools = {'hp': {'l3_ways': '7', 'isolated': 'true'},
             'noisy': {'l3_ways': '1', 'isolated': 'false'}}
    rc = Resctrl(emulated_resctrl.root, emulated_resctrl.sysfs)
    mgr = CacheManager(rc, Settings.defaults(
        allocation={'system_min_ways': 2},
        pools={'hp': {'l3_ways': 7, 'isolated': True},
               'noisy': {'l3_ways': 1, 'isolated': False}}))
    mgr.apply()
    dead = vm_group(str(uuid.uuid4()))
    mgr.allocate(Request(dead, ways={0: 1, 1: 1}))
    os.mkdir(rc.path('handmade'))
    theirs = rc.group('handmade')
    assert {d: m.value for d, m in theirs.l3.items()} == {0: 0x3, 1: 0x3}
    rdt_agent(pools=pools, reconcile_interval=1,
              patches={'ovs_rdt.agent.orphans.ORPHAN_GRACE': '1'})
    wait_status(ovs, 'ok: no rdt-* keys set')
    wait_for(lambda: not exists(rc, dead), timeout=TIMEOUT,
             what='the dead VM group removed')
    assert {d: m.value for d, m in rc.group(ROOT).l3.items()} == \
        {0: 0x7, 1: 0x7}
    assert rc.group('handmade').l3 == theirs.l3
    assert rc.group(HP).mode == 'exclusive'
    os.rmdir(rc.path('handmade'))


def test_the_node_says_what_the_agent_runs(
        ovs, emulated_resctrl, rdt_agent, tmp_path) -> None:
    """Issue 51 items 1, 2, 3 and 7 through a real agent, OVSDB and
    ovs-vswitchd: ``status`` exits 5 and says why (no agent; the OvS knobs
    in error; files changed without SIGHUP, with what to do), 0 once all is
    well; the agent logs the drift once and ``ovs_rdt_config_outdated``
    says it; ``ovs-rdt config`` and the agent's log name a pool's ways set
    in three files; the PMD group's allocation is logged once, not at every
    re-scan; another tool's group and the default group's mask are logged.
    """
    from tests.functional.test_metrics import Scrape, free_port

    confd = tmp_path / 'conf.d'
    confd.mkdir()
    for name, ways in (('10-a', 4), ('20-b', 3), ('30-c', 5)):
        text = '[pool:hp]\nl3_ways = %d\n' % ways
        (confd / ('%s.conf' % name)).write_text(text)
    port = free_port()
    rc = Resctrl(emulated_resctrl.root, emulated_resctrl.sysfs)
    agent_args = ['--config-dir', str(confd)]
    config = str(tmp_path / 'agent0.conf')

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                               '--config-file', config, *agent_args, *args],
                              capture_output=True, text=True, timeout=60)

    agent = rdt_agent(extra='[metrics]\nlisten = 127.0.0.1:%d\n' % port,
                      args=agent_args, rescan_interval=1)
    wait_status(ovs, 'ok: no rdt-* keys set')
    # (the agent writes OVSDB first, then what status reads)
    shown = '  OvS: %s' % status(ovs)
    res = wait_for(lambda: (lambda r: r if shown in r.stdout.splitlines()
                            else None)(cli('status')),
                   what='status showing %r' % shown)
    assert res.returncode == 0, res.stdout + res.stderr
    agent_line = [ln for ln in res.stdout.splitlines()
                  if ln.startswith('Agent:')]
    assert agent_line == ['Agent: ovs-rdt-agent runs for this resctrl root '
                          '(pid %d), with the configuration files as they '
                          'are' % agent.proc.pid], res.stdout
    # Item 3: 5 wins, said by the agent's log and by "ovs-rdt config".
    override = ('%s line 2: [pool:hp] l3_ways = 5 overrides 3 in %s line '
                % (confd / '30-c.conf', config))
    assert override in agent.log(), agent.log()[-2000:]
    assert ', 4 in %s line 2, 3 in %s line 2: the last file read wins' % (
        confd / '10-a.conf', confd / '20-b.conf') in agent.log()
    shown = [ln for ln in cli('config').stdout.splitlines()
             if ln.startswith('l3_ways = 5')]
    assert [ln.split('  # ')[1] for ln in shown] == [
        '%s:2 (overrides 3 at %s:2, 4 at %s:2, 3 at %s:%d)' % (
            confd / '30-c.conf', confd / '20-b.conf', confd / '10-a.conf',
            config, next(n for n, ln in enumerate(open(config), 1)
                         if ln.startswith('l3_ways')))]
    assert rc.group(HP, with_tasks=False).l3[0].count == 5

    # Item 7: the PMD group allocated once, not at every re-scan.
    ovs.other_config(rdt_pmd_l3_ways='2')
    wait_status(ovs, 'ok: PMD cores 0 (1 thread) in ovsrdt-ovs-pmd')
    time.sleep(3.5)                 # three forced re-scans
    said = [ln for ln in agent.log().splitlines()
            if ' INFO ' in ln and 'allocated %s' % PMD_GROUP in ln]
    assert len(said) == 1, said

    # Item 1: the OvS knobs in error.
    ovs.other_config(rdt_pmd_l3_ways='20')
    wait_status(ovs, 'error:')
    wait_for(lambda: cli('status').returncode == 5, what='status 5')
    res = cli('status')
    assert ('  - OvS knobs (Open_vSwitch external_ids:rdt-status): %s'
            % status(ovs)) in res.stdout.splitlines(), res.stdout
    ovs.other_config(rdt_pmd_l3_ways=None)
    wait_status(ovs, 'ok: no rdt-* keys set')

    # Item 2: the files change, no SIGHUP.
    (confd / '30-c.conf').write_text('[pool:hp]\nl3_ways = 4\n')
    res = cli('status')
    # 3: resctrl differs from the files; what to do is the agent's reload
    # ("ovs-rdt apply" alone, the agent would write its pools back).
    assert res.returncode == 3, res.stdout + res.stderr
    assert 'the agent runs an older configuration, which it writes back: ' \
        'reloading it makes them (see "Agent" above)' in res.stdout
    [line] = [ln for ln in res.stdout.splitlines()
              if ln.startswith('  - it runs an older configuration')]
    assert line.startswith('  - it runs an older configuration than the '
                           'files (%s changed; it read them at '
                           % (confd / '30-c.conf')), line
    # (no systemd here: no systemctl in the hint)
    assert line.endswith('): apply them with kill -HUP %d' % agent.proc.pid), \
        line
    drift = 'the configuration changed since this agent read it (%s changed)' \
        % (confd / '30-c.conf')
    wait_for(lambda: drift in agent.log(), what='the drift logged')
    assert Scrape(port).get('ovs_rdt_config_outdated') == 1
    time.sleep(2.5)
    assert agent.log().count(drift) == 1
    agent.signal(signal.SIGHUP)
    wait_for(lambda: cli('status').returncode == 0, what='status 0')
    assert Scrape(port).get('ovs_rdt_config_outdated') == 0
    assert rc.group(HP, with_tasks=False).l3[0].count == 4

    # Item 7: another tool's group, the default group's mask.
    os.mkdir(rc.path('COS1'))
    wait_for(lambda: "another tool's group COS1 appeared" in agent.log(),
             what='COS1 logged')
    os.rmdir(rc.path('COS1'))
    wait_for(lambda: "another tool's group COS1 is gone" in agent.log(),
             what='COS1 gone logged')
    root = rc.group(ROOT, with_tasks=False).l3
    with open(rc.path(ROOT, 'schemata'), 'w') as fh:
        fh.write('L3:0=%x;1=%x\n' % (root[0].value >> 1, root[1].value >> 1))
    wait_for(lambda: "the default group's L3 mask is now 0=%x;1=%x (was "
             "0=%s;1=%s)" % (root[0].value >> 1, root[1].value >> 1, root[0],
                             root[1]) in agent.log(),
             what='the default group logged')

    # Item 1: no agent.
    agent.stop()
    assert cli('apply').returncode == 0     # (the mask written by hand)
    res = cli('status')
    assert res.returncode == 5, res.stdout + res.stderr
    [line] = [ln for ln in res.stdout.splitlines() if ln.startswith('Agent:')]
    assert line.startswith('Agent: no ovs-rdt-agent runs for this resctrl '
                           'root: nothing follows the OvS knobs'), line
    assert json.loads(cli('status', '--json').stdout)['agent_problems'] == [
        line[len('Agent: '):]]


def test_status_says_what_the_agent_runs_after_a_rejected_reload(
        ovs, emulated_resctrl, rdt_agent, tmp_path) -> None:
    """Issue 51 trial 4 through a real agent: the files enable a valid
    policy, no SIGHUP yet: ``status`` names the running agent (not "no
    agent runs"); a SIGHUP the agent rejects (a web config file it cannot
    read: a check only it makes) is said by ``status`` as rejected, with
    why, not as "apply them with a reload".
    """
    confd = tmp_path / 'conf.d'
    confd.mkdir()
    (confd / '10-base.conf').write_text('[DEFAULT]\n')
    agent = rdt_agent(pools={'hp': {'l3_ways': '3'}, 'be': {'l3_ways': '2'}},
                      args=['--config-dir', str(confd)])
    config = agent.config_file
    wait_status(ovs, 'ok: no rdt-* keys set')

    def status_of() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, '-m', 'ovs_rdt.cmd.main', '--config-file',
             config, '--config-dir', str(confd), 'status'],
            capture_output=True, text=True, timeout=60)

    wait_for(lambda: status_of().returncode == 0, what='status 0')
    # Trial 8: status on another file set than the agent's says so.
    res = subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                          '--config-file', config, 'status'],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 5, res.stdout + res.stderr
    assert ('  - it runs other files than this command read (it read %s, '
            '%s; this command read %s): ' % (config, confd / '10-base.conf',
                                             config)) in res.stdout, \
        res.stdout
    (confd / '50-policy.conf').write_text(
        '[policy]\nenabled = true\nhigh_priority = hp\nbest_effort = be\n'
        'hp_min_ways = 2\nhp_max_ways = 4\nbe_min_ways = 1\n')
    res = status_of()
    assert res.returncode == 5, res.stdout + res.stderr
    assert ('Policy: [policy] enabled in the files, but the agent (pid %d) '
            'does not run it: it runs the configuration it read before (see '
            '"Agent" above)' % agent.proc.pid) in res.stdout, res.stdout
    assert 'no ovs-rdt-agent runs' not in res.stdout

    (confd / '60-web.conf').write_text(
        '[metrics]\nlisten = 127.0.0.1:1\nweb_config_file = %s\n'
        % (tmp_path / 'no-web.yml'))
    agent.signal(signal.SIGHUP)
    wait_for(lambda: 'keeping the previous configuration' in agent.log(),
             what='the reload rejected')
    res = wait_for(lambda: (lambda r: r if 'rejected' in r.stdout else None)(
        status_of()), what='status saying the reload was rejected')
    assert res.returncode == 5, res.stdout + res.stderr
    [line] = [ln for ln in res.stdout.splitlines()
              if ln.startswith('  - it runs an older configuration')]
    assert (': its last reload was rejected: [metrics] web_config_file %s: '
            % (tmp_path / 'no-web.yml')) in line, line
    assert line.endswith('; fix that, then reload it again: kill -HUP %d'
                         % agent.proc.pid), line
