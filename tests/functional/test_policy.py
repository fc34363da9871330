"""The dynamic policy (seed 002) end to end: a real ovs-rdt-agent, a real
ovs-vswitchd whose PMD thread sits in the high-priority pool, and the
mounted emulator with seed 002's platform (xeon-d-1540, 12 ways).  The
PMD thread's footprint is driven through the emulator's footprints file;
the agent must follow it with Table 6's masks."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any, Iterator

import pytest

from ovs_rdt.agent.policy import read_state
from ovs_rdt.resctrl import Resctrl
from tests.functional.fixtures.ovs import AgentProcess, OvsTestbed, REPO
from tests.functional.fixtures.ovs import wait_for, write_agent_config

HP, BE = 'ovsrdt-pool-hp', 'ovsrdt-pool-noisy'
MIB = 1 << 20                      # one way of the xeon-d-1540's 12 MiB L3
POLICY = """
[allocation]
system_l3_cbm = c00

[policy]
enabled = %s
interval = 0.2
high_priority = hp
best_effort = noisy
hp_min_ways = 3
hp_max_ways = 8
be_min_ways = 2
"""
POOLS = {'hp': {'l3_ways': '8', 'isolated': 'true'},
         'noisy': {'l3_ways': '2'}}


class Bed:
    def __init__(self, ovs: OvsTestbed, emu: Any, tmp: str) -> None:
        self.ovs, self.emu, self.tmp = ovs, emu, tmp
        self.rc = Resctrl(emu.root, emu.sysfs)
        self.conf = os.path.join(tmp, 'agent.conf')
        self.log = os.path.join(tmp, 'agent.log')
        self.agent: AgentProcess | None = None

    def configure(self, enabled: bool) -> None:
        write_agent_config(self.conf, self.ovs, self.emu.root, self.emu.sysfs,
                           POOLS, POLICY % ('true' if enabled else 'false'))

    def masks(self) -> tuple[str, str, str]:
        groups = {g.name: g for g in self.rc.groups()}
        return (str(groups[''].l3[0]), str(groups[HP].l3[0]),
                str(groups[BE].l3[0]))

    def wait_masks(self, want: tuple[str, str, str],
                   timeout: float = 15) -> None:
        try:
            wait_for(lambda: self.masks() == want, timeout=timeout, step=0.05,
                     what='masks %s' % (want,))
        except AssertionError:
            raise AssertionError('masks %s, expected %s; agent log:\n%s'
                                 % (self.masks(), want, self.log_text()[-3000:])
                                 ) from None

    def tasks(self, group: str) -> set[int]:
        try:
            return set(self.rc.tasks(group))
        except FileNotFoundError:
            return set()

    def log_text(self) -> str:
        with open(self.log, encoding='utf-8', errors='replace') as fh:
            return fh.read()

    def pmd_footprint(self, ways: float) -> None:
        tids = self.ovs.pmd_threads()
        assert tids, 'no PMD thread'
        self.emu.set_footprints({'default': 0, **{str(t): int(ways * MIB)
                                                  for t in tids}})


@pytest.fixture
def bed(ovs: OvsTestbed, emulator_factory: Any, tmp_path: Any
        ) -> Iterator[Bed]:
    emu = emulator_factory(profile='xeon-d-1540')
    b = Bed(ovs, emu, str(tmp_path))
    try:
        yield b
    finally:
        if b.agent is not None:
            b.agent.stop()


def test_agent_follows_demand_with_table6_masks(bed: Bed) -> None:
    bed.pmd_footprint(4.4)
    bed.configure(enabled=True)
    bed.ovs.other_config(**{'rdt-pmd-pool': 'hp'})
    bed.agent = AgentProcess(bed.conf, bed.log).start()
    pmds = set(bed.ovs.pmd_threads())
    wait_for(lambda: pmds <= bed.tasks(HP), timeout=15,
             what='PMD threads in %s' % HP)
    # Seed 002 Figure 10: 8 ways at first, 5 once the agent measured
    # 12.5% line rate's footprint, 3 after the traffic drop to 8%.
    bed.wait_masks(('c00', '3e0', '1f'))
    bed.pmd_footprint(2.5)
    bed.wait_masks(('c00', '380', '7f'))
    log = bed.log_text()
    assert 'policy decision: domain 0: hp 8 -> 5 ways, be 2 -> 5 ways ' \
        '(fits: ' in log
    assert 'policy decision: domain 0: hp 5 -> 3 ways, be 5 -> 7 ways' in log
    # Demand up: shortage (occupancy pinned, misses) grows HP at once.
    bed.pmd_footprint(6.2)
    bed.wait_masks(('c00', '3f8', '7'))
    assert 'hp 3 -> ' in bed.log_text() and '(pinned: ' in bed.log_text()

    # ovs-rdt status shows the policy's state (published once the tick
    # that wrote the masks ends).
    def hp_ways_shown() -> int | None:
        shown = read_state(bed.emu.root)
        row = shown.domains.get(0) if shown is not None else None
        return row.hp_ways if row is not None else None
    wait_for(lambda: hp_ways_shown() == 7, timeout=10,
             what='the policy state after the grow')
    state = read_state(bed.emu.root)
    assert state is not None and state.budget == 10
    assert state.domains[0].hp_ways == 7
    last = state.domains[0].last
    assert last is not None and last.reason in ('pinned', 'fits')
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                          '--config-file', bed.conf, 'status'],
                         capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert 'Policy: hp follows its demand within 3-8 ways' in out.stdout
    assert 'domain 0: hp 7 ways, noisy 3 ways' in out.stdout
    assert 'last decision: ' in out.stdout
    assert 'Agent: ovs-rdt-agent runs for this resctrl root (pid %d)' \
        % bed.agent.proc.pid in out.stdout
    js = subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                         '--config-file', bed.conf, 'status', '--json'],
                        capture_output=True, text=True, env=env, cwd=REPO,
                        timeout=30)
    assert json.loads(js.stdout)['policy']['high_priority'] == 'hp'

    # SIGHUP with enabled = false: the configured 8 and 2 come back.
    bed.configure(enabled=False)
    bed.agent.signal(signal.SIGHUP)
    bed.wait_masks(('c00', '3fc', '3'))
    wait_for(lambda: read_state(bed.emu.root) is None, timeout=10,
             what='policy state removed')
    # ... and stay: the footprint no longer moves anything.
    bed.pmd_footprint(2.0)
    with pytest.raises(AssertionError):
        bed.wait_masks(('c00', '380', '7f'), timeout=1.5)
    assert bed.agent.stop() == 0
    out = subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                          '--config-file', bed.conf, 'status'],
                         capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=30)
    assert 'Agent: no ovs-rdt-agent runs for this resctrl root' in out.stdout
    assert 'no ovs-rdt-agent runs it' not in out.stdout   # policy now off


def test_bad_policy_refused_in_one_line(bed: Bed) -> None:
    bed.configure(enabled=True)
    with open(bed.conf, 'a') as fh:
        fh.write('\n[pool:noisy]\nl3_ways = 3\n')
    bed.agent = AgentProcess(bed.conf, bed.log).start()
    assert bed.agent.proc is not None
    assert bed.agent.proc.wait(20) == 2
    lines = [ln for ln in bed.log_text().splitlines() if ln.strip()]
    hp_line = [n for n, ln in enumerate(open(bed.conf), 1)
               if ln.startswith('l3_ways = 8')][-1]
    assert lines == ['ovs-rdt-agent: error: config file %s line %d: [pool:hp] '
                     'l3_ways = 8 and [pool:noisy] '
                     'l3_ways = 3 must sum to the budget hp_max_ways + '
                     'be_min_ways = 10 with the high-priority pool within '
                     '[policy] hp_min_ways..hp_max_ways = 3..8 (they are the '
                     'ways the pools return to when the policy is disabled)'
                     % (bed.conf, hp_line)]
