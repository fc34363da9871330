"""ovs-rdt-agent: what a production node does to it over months.

Same bed as ``test_agent.py`` (real ovsdb-server + ovs-vswitchd with
dummy-pmd ports, the mounted emulator).  Here the agent's after-event
re-scan burst is cut to 0.3 s (``QUIET``) and its periodic re-scan and
reconciliation are 30 s and 60 s away: whatever a test sees placed within a
second or two was placed because an event woke the agent up.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

from ovs_rdt.core.model import PMD_GROUP, ROOT
from ovs_rdt.resctrl import Resctrl
from tests.functional.fixtures.ovs import OvsTestbed, wait_for
from tests.functional.test_agent import HP, exists, isolated_ways, status
from tests.functional.test_agent import tasks, wait_members, wait_status

QUIET = {'ovs_rdt.agent.service.BURST': '((0.3, 0.005),)'}
#: An event must be followed within this (the periodic re-scan is 30 s off).
PROMPT = 3.0


def start(ovs: OvsTestbed, emulated_resctrl: Any, rdt_agent: Any,
          **kw: Any) -> tuple[Resctrl, Any]:
    rc = Resctrl(emulated_resctrl.root, emulated_resctrl.sysfs)
    agent = rdt_agent(patches=QUIET, **kw)
    wait_status(ovs, 'ok: no rdt-* keys set')
    return rc, agent


def others(ovs: OvsTestbed) -> set[int]:
    pmds = ovs.pmd_threads()
    return {t for t in ovs.threads() if t not in pmds}


def test_port_added_without_next_cfg_bump(ovs, emulated_resctrl,
                                          rdt_agent) -> None:
    """``ovs-vsctl --no-wait`` (or ovn-controller) adds the first PMD port:
    ovs-vswitchd creates its PMD threads, nothing changes in the
    Open_vSwitch row.
    """
    rc, _agent = start(ovs, emulated_resctrl, rdt_agent)
    ovs.other_config(rdt_pmd_l3_ways='4', rdt_vswitchd='default')
    wait_members(rc, PMD_GROUP, ovs.pmd_threads)
    ovs.vsctl('del-port', 'br0', 'p0')
    wait_for(lambda: not ovs.pmd_threads(), what='PMD threads gone')
    wait_status(ovs, 'ok: PMD cores - (0 threads)')
    time.sleep(1)    # the burst that followed is over
    cur_cfg = ovs.vsctl('get', 'Open_vSwitch', '.', 'cur_cfg')
    ovs.vsctl('--no-wait', 'add-port', 'br0', 'p1', '--', 'set', 'Interface',
              'p1', 'type=dummy-pmd')
    ovs.wait_pmds({0})
    wait_members(rc, PMD_GROUP, ovs.pmd_threads, timeout=PROMPT)
    assert ovs.vsctl('get', 'Open_vSwitch', '.', 'cur_cfg') == cur_cfg
    assert others(ovs) <= tasks(rc, ROOT)


def test_new_vswitchd_threads_follow_rdt_vswitchd(ovs, emulated_resctrl,
                                                  rdt_agent) -> None:
    rc, _agent = start(ovs, emulated_resctrl, rdt_agent)
    ovs.other_config(rdt_pmd_l3_ways='4', rdt_vswitchd='pool:hp')
    wait_members(rc, PMD_GROUP, ovs.pmd_threads)
    wait_members(rc, HP, lambda: others(ovs))
    # New handler/revalidator threads (new TIDs) are born in their
    # creator's group: the main thread's, in the pool.
    before = others(ovs)
    ovs.vsctl('set', 'Open_vSwitch', '.', 'other_config:n-handler-threads=2',
              'other_config:n-revalidator-threads=1')
    wait_for(lambda: others(ovs) - before, what='new handler threads')
    wait_members(rc, HP, lambda: others(ovs), timeout=PROMPT)
    assert tasks(rc, PMD_GROUP) == set(ovs.pmd_threads())
    # rdt-vswitchd=default: they all leave the pool; new ones stay out.
    ovs.other_config(rdt_vswitchd='default')
    wait_for(lambda: not tasks(rc, HP), timeout=PROMPT, what='pool emptied')
    before = others(ovs)
    ovs.vsctl('set', 'Open_vSwitch', '.', 'other_config:n-handler-threads=3')
    wait_for(lambda: others(ovs) - before, what='new handler threads')
    time.sleep(0.5)
    assert others(ovs) <= tasks(rc, ROOT)
    assert tasks(rc, PMD_GROUP) == set(ovs.pmd_threads())
    # PMD keys gone, vswitchd in the pool: new PMD threads are born in the
    # pool (the main thread's group) and must be taken out of it.
    ovs.other_config(rdt_pmd_l3_ways=None, rdt_vswitchd='pool:hp')
    wait_for(lambda: not exists(rc, PMD_GROUP), what='PMD group removed')
    wait_members(rc, HP, lambda: others(ovs), timeout=PROMPT)
    ovs.other_config(pmd_cpu_mask='0x3')
    ovs.wait_pmds({0, 1})
    wait_members(rc, HP, lambda: others(ovs), timeout=PROMPT)
    assert set(ovs.pmd_threads()) <= tasks(rc, ROOT)
    # No pmd-cpu-mask at all: ovs-vswitchd picks a core per NUMA node
    # itself; the status names the core it picked.
    ovs.vsctl('remove', 'Open_vSwitch', '.', 'other_config', 'pmd-cpu-mask')
    pmds = wait_for(lambda: (lambda p: p if len(p) == 1 else None)(
        ovs.pmd_threads()), what='one PMD thread')
    wait_status(ovs, 'ok: PMD cores %d (1 thread) in the default group'
                % next(iter(pmds.values())))
    wait_members(rc, HP, lambda: others(ovs), timeout=PROMPT)


def test_ways_resized_in_place_and_switching_leaves_nothing(
        ovs, emulated_resctrl, rdt_agent) -> None:
    rc, _agent = start(ovs, emulated_resctrl, rdt_agent)
    ovs.other_config(rdt_pmd_l3_ways='4')
    wait_members(rc, PMD_GROUP, ovs.threads, timeout=PROMPT)
    for ways in (4, 2, 6, 4):
        ovs.other_config(rdt_pmd_l3_ways=str(ways))
        wait_for(lambda: isolated_ways(rc, PMD_GROUP, 0) == ways,
                 timeout=PROMPT, what='%d isolated ways' % ways)
        # Resized in place: the threads never left the group.
        assert tasks(rc, PMD_GROUP) == set(ovs.threads())
        wait_status(ovs, 'ok: PMD cores 0', '(%d ways)' % ways)
    for _ in range(2):
        ovs.other_config(rdt_pmd_l3_ways=None, rdt_pmd_pool='hp')
        wait_members(rc, HP, ovs.threads, timeout=PROMPT)
        wait_for(lambda: not exists(rc, PMD_GROUP), what='PMD group removed')
        ovs.other_config(rdt_pmd_l3_ways='3', rdt_pmd_pool=None)
        wait_members(rc, PMD_GROUP, ovs.threads, timeout=PROMPT)
        assert not tasks(rc, HP)
    ovs.other_config(rdt_pmd_l3_ways=None)
    wait_status(ovs, 'ok: no rdt-* keys set')
    assert sorted(rc.group_names()) == ['', HP]
    assert set(ovs.threads()) <= tasks(rc, ROOT)


def test_pmd_pool_shared_with_a_vm(ovs, emulated_resctrl, rdt_agent,
                                   tmp_path) -> None:
    """Seed 000 Table 4: PMDs, vswitchd and the VM under test in one pool.
    Removing the PMD keys takes only ovs-vswitchd's threads out.
    """
    rc, _agent = start(ovs, emulated_resctrl, rdt_agent)
    vm = subprocess.Popen([sys.executable, '-c', 'import time; '
                           'time.sleep(60)'])
    try:
        with rc.lock():
            rc.add_tasks(HP, [vm.pid])
        schemata = rc.read(rc.path(HP, 'schemata'))
        ovs.other_config(rdt_pmd_pool='hp')
        wait_members(rc, HP, lambda: set(ovs.threads()) | {vm.pid},
                     timeout=PROMPT)
        ovs.other_config(rdt_pmd_pool=None)
        wait_members(rc, HP, lambda: {vm.pid}, timeout=PROMPT)
        wait_status(ovs, 'ok: no rdt-* keys set')
        assert rc.read(rc.path(HP, 'schemata')) == schemata
        assert set(ovs.threads()) <= tasks(rc, ROOT)
    finally:
        vm.kill()
        vm.wait()


def test_agent_started_before_open_vswitch(ovs, emulated_resctrl,
                                           rdt_agent) -> None:
    """Boot order: the agent is up before ovsdb-server and ovs-vswitchd."""
    rc = Resctrl(emulated_resctrl.root, emulated_resctrl.sysfs)
    ovs.other_config(rdt_pmd_l3_ways='4', rdt_vswitchd='default')
    ovs.kill_vswitchd()
    ovs.kill_ovsdb()
    os.unlink(ovs.db_sock)     # as after a reboot
    agent = rdt_agent(patches=QUIET)
    time.sleep(3)              # retrying quietly
    assert agent.proc.poll() is None
    ovs.start_ovsdb()
    ovs.start_vswitchd()
    ovs.wait_pmds({0})
    wait_members(rc, PMD_GROUP, ovs.pmd_threads, timeout=PROMPT + 2)
    wait_status(ovs, 'ok: PMD cores 0 (1 thread) in ovsrdt-ovs-pmd')
    assert others(ovs) <= tasks(rc, ROOT)
    warned = [line for line in agent.log().splitlines()
              if 'is not answering yet' in line and ' DEBUG ' not in line]
    assert len(warned) == 1


def test_resources_stay_flat_under_churn(ovs, emulated_resctrl,
                                         rdt_agent) -> None:
    rc, agent = start(ovs, emulated_resctrl, rdt_agent)
    pid = agent.proc.pid

    def usage() -> tuple[int, int]:
        # The fewest seen over 0.3 s: a scan holds a file open a moment.
        seen = []
        for _ in range(30):
            seen.append((len(os.listdir('/proc/%d/fd' % pid)),
                         len(os.listdir('/proc/%d/task' % pid))))
            time.sleep(0.01)
        return min(f for f, _ in seen), min(t for _, t in seen)

    ovs.other_config(rdt_pmd_l3_ways='4', rdt_vswitchd='default')
    wait_members(rc, PMD_GROUP, ovs.pmd_threads)
    first = usage()
    for i in range(6):
        ovs.other_config(pmd_cpu_mask='0x3' if i % 2 == 0 else '0x1')
        if i in (1, 4):     # systemctl reload while threads are re-created
            agent.signal(signal.SIGHUP)
        ovs.wait_pmds({0, 1} if i % 2 == 0 else {0})
        wait_members(rc, PMD_GROUP, ovs.pmd_threads, timeout=PROMPT)
        if i == 2:
            ovs.kill_ovsdb()
            ovs.start_ovsdb()
        if i == 3:
            ovs.kill_vswitchd()
            ovs.start_vswitchd()
            ovs.wait_pmds({0})
            wait_members(rc, PMD_GROUP, ovs.pmd_threads, timeout=PROMPT)
    wait_status(ovs, 'ok: PMD cores 0 (1 thread)')
    assert usage() == first
    assert agent.stop() == 0
    log = agent.log()
    assert log.count('SIGHUP: re-reading') == 2
    assert log.count(' ERROR ') == 0 and 'Traceback' not in log
    assert status(ovs).startswith('ok: ')


def test_status_written_only_when_it_changes(ovs, emulated_resctrl,
                                             rdt_agent) -> None:
    rc, agent = start(ovs, emulated_resctrl, rdt_agent, rescan_interval=1)

    def writes() -> int:
        return agent.log().count("DbSetCommand(")  # debug = true

    ovs.other_config(rdt_pmd_l3_ways='4')
    wait_members(rc, PMD_GROUP, ovs.threads, timeout=PROMPT)
    text = wait_status(ovs, 'ok: PMD cores 0 (1 thread)')
    time.sleep(0.5)
    before = writes()
    # Forced re-scans every second, an unrelated key, ovs-vswitchd's own
    # reconfiguration: the truth is the same, nothing is written.
    ovs.vsctl('set', 'Open_vSwitch', '.', 'other_config:foo=bar')
    time.sleep(2.5)
    assert writes() == before
    assert status(ovs) == text
    # Someone else's write over ours is repaired.
    ovs.vsctl('remove', 'Open_vSwitch', '.', 'external_ids', 'rdt-status')
    assert wait_status(ovs, 'ok: ') == text
    assert writes() == before + 1
