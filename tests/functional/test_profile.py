"""``ovs-rdt profile`` on the mounted emulator with a real ovs-vswitchd:
seed 000's Table 3 footprints injected, the ways of Table 4 recommended
(the path doc/metrics.md walks through)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Iterator

import pytest

from ovs_rdt.resctrl import Resctrl
from tests.functional.fixtures.ovs import OvsTestbed

KIB = 1024                  # seed 000's "KB": 2560 KB per way of 2621440 B
GROUPS = ('prof-vswitchd', 'prof-pmd', 'prof-sut')


def profile(config: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main', 'profile',
                           '--config-file', config, '--interval', '0.25',
                           '--seconds', '1', *args], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def sut() -> Iterator[subprocess.Popen]:
    """The VM under test's stand-in: one process, one footprint."""
    proc = subprocess.Popen(['sleep', '120'])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_table3_to_table4(ovs: OvsTestbed, emulated_resctrl: Any,
                          sut: subprocess.Popen, tmp_path: Any) -> None:
    rc = Resctrl(emulated_resctrl.root, emulated_resctrl.sysfs)
    ovs.other_config(pmd_cpu_mask='0x3')
    pmds = ovs.wait_pmds({0, 1})
    vswitchd = ovs.vswitchd_pid
    # Profiling without CAT, as the application note did: every component
    # in a group of its own, each with every way (no allocation yet).
    members = {'prof-pmd': list(pmds),
               'prof-vswitchd': [t for t in ovs.threads() if t not in pmds],
               'prof-sut': [sut.pid]}
    for group in GROUPS:
        os.mkdir(rc.path(group))
        for tid in members[group]:
            with open(rc.path(group, 'tasks'), 'w') as fh:
                fh.write('%d\n' % tid)
        assert rc.group(group).l3[0].count == 11
    # Table 3, on socket 0: vswitchd 720 KB, the PMDs 15000 KB, the VM 5000.
    emulated_resctrl.set_footprints({
        'default': 0, str(vswitchd): {'0': 720 * KIB},
        **{str(t): {'0': 7500 * KIB} for t in pmds},
        str(sut.pid): {'0': 5000 * KIB}})
    config = str(tmp_path / 'ovs-rdt.conf')
    with open(config, 'w') as fh:
        fh.write('[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n'
                 % (emulated_resctrl.root, emulated_resctrl.sysfs))
    try:
        out = profile(config, '--json', *[a for g in GROUPS
                                          for a in ('--group', g)])
        assert out.returncode == 0, out.stderr
        plan = json.loads(out.stdout)
        got = {g['group']: g for g in plan['groups']}
        assert {g: got[g]['ways'] for g in GROUPS} == {
            'prof-vswitchd': 1, 'prof-pmd': 6, 'prof-sut': 2}
        peaks = {g: got[g]['domains'][0]['peak_bytes'] for g in GROUPS}
        assert peaks == {'prof-vswitchd': 720 * KIB,
                         'prof-pmd': 15000 * KIB, 'prof-sut': 5000 * KIB}
        assert 'pmd=0,1' in got['prof-pmd']['members']
        assert plan['together']['ways'] == 9          # all three: 20720 KB
        assert plan['samples'] == 5
        # Table 4's CLOS 0 (0x7f0): PMDs and ovs-vswitchd, 15720 KB.
        out = profile(config, '--group', 'prof-pmd', '--group',
                      'prof-vswitchd')
        assert out.returncode == 0, out.stderr
        assert 'prof-pmd, prof-vswitchd sharing one pool: 7 ways\n' \
            '[pool:NAME]\nl3_ways = 7' in out.stdout
        # Measured inside an allocation too small for it: flagged.
        for group, mask in (('prof-vswitchd', '7f8'), ('prof-sut', '7f8'),
                            ('prof-pmd', '7')):
            with open(rc.path(group, 'schemata'), 'w') as fh:
                fh.write('L3:0=%s;1=%s\n' % (mask, mask))
        out = profile(config, '--group', 'prof-pmd')
        assert out.returncode == 0, out.stderr
        assert '(filled its 3 ways: may need more)' in out.stdout
        bad = profile(config, '--group', 'nope')
        assert bad.returncode == 2      # a usage error (issue 51 trial 6)
        assert bad.stderr.startswith("ovs-rdt profile: error: --group 'nope'")
    finally:
        for group in GROUPS:
            os.rmdir(rc.path(group))
