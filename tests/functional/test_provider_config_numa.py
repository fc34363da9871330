"""``ovs-rdt provider-config`` prints the NUMA node to L3 map the Nova filter
takes (``rdt_numa_l3``), read from the emulator's sysfs tree (``--sysfs-dir``:
``cpuN/cache/index3/id``, ``node/nodeN/cpulist``), on every profile: one L3
per node (Xeon), three nodes per L3 (SNC3), twelve or eight L3s per node
(EPYC, NPS1).  doc/nova.md, doc/platforms.md.
"""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from ovs_rdt.core import topology
from ovs_rdt.inputs import cpulists, numa_l3
from ovs_rdt.resctrl import Resctrl

EXPECTED = {
    'xeon-gold-6230': '0:0;1:1',
    'xeon-6-granite-rapids-snc3': '0:0;1:0;2:0;3:1;4:1;5:1',
    'epyc-9654': '0:0-11;1:12-23',
    'epyc-9575f': '0:0-7;1:8-15',
}
LINE = re.compile(r'^# Nova filter: aggregate metadata rdt_numa_l3=(\S+) '
                  r'\(NUMA node:L3 cache domains\)\.$', re.M)


@pytest.mark.parametrize('profile', sorted(EXPECTED))
def test_provider_config_prints_the_numa_l3_map(emulator_factory, tmp_path,
                                                profile: str) -> None:
    emu = emulator_factory(profile)
    config = tmp_path / 'ovs-rdt.conf'
    config.write_text('[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n'
                      % (emu.root, emu.sysfs))
    result = subprocess.run(
        [sys.executable, '-m', 'ovs_rdt.cmd.main', '--config-file',
         str(config), 'provider-config'],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = LINE.findall(result.stdout)
    assert found == [EXPECTED[profile]], result.stdout
    # Where node N is not L3 N the operator is told what to set.
    mapping = numa_l3.parse(found[0], 'rdt_numa_l3')
    if any(l3s != {node} for node, l3s in mapping.items()):
        assert ('set aggregate metadata rdt_numa_l3=%s' % found[0]) in \
            result.stderr
    else:
        assert result.stderr == ''
    # what the filter reads back is what the hook maps each node's CPUs to
    mapping = numa_l3.parse(found[0], 'rdt_numa_l3')
    rc = Resctrl(emu.root, emu.sysfs)
    platform = rc.platform()
    assert topology.domains(mapping) == set(platform.domains)
    for node, l3s in mapping.items():
        with open('%s/node/node%d/cpulist' % (emu.sysfs, node)) as fh:
            cpus = cpulists.parse(fh.read().strip(), 'cpulist')
        assert platform.domains_of_cpus(cpus) == l3s, node


def test_explicit_node_root(emulator_factory, tmp_path) -> None:
    """``[resctrl] sysfs_node_root`` names the node tree (here: none)."""
    emu = emulator_factory('epyc-9654')
    config = tmp_path / 'ovs-rdt.conf'
    config.write_text('[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n'
                      'sysfs_node_root = %s\n'
                      % (emu.root, emu.sysfs, tmp_path / 'nowhere'))
    result = subprocess.run(
        [sys.executable, '-m', 'ovs_rdt.cmd.main', '--config-file',
         str(config), 'provider-config'],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert 'rdt_numa_l3' not in result.stdout
    assert 'L3: 24 cache domain(s) x 16 ways' in result.stdout
