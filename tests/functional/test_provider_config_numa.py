"""``ovs-rdt provider-config`` counts the ways per cache group (the L3 caches
of the NUMA nodes that share one), read from the emulator's sysfs tree
(``--sysfs-dir``: ``cpuN/cache/index3/id``, ``node/nodeN/cpulist``), on
every profile: one L3 per node (Xeon), three nodes per L3 (SNC3), twelve or
eight L3s per node (EPYC, NPS1).  doc/nova.md, doc/platforms.md.
"""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from ovs_rdt.inputs import cpulists
from ovs_rdt.resctrl import Resctrl

EXPECTED = {
    'xeon-gold-6230': 'L3 0 (NUMA node 0); L3 1 (NUMA node 1)',
    'xeon-6-granite-rapids-snc3': 'L3 0 (NUMA node 0-2); L3 1 (NUMA node '
                                  '3-5)',
    'epyc-9654': 'L3 0-11 (NUMA node 0); L3 12-23 (NUMA node 1)',
    'epyc-9575f': 'L3 0-7 (NUMA node 0); L3 8-15 (NUMA node 1)',
}
LINE = re.compile(r'^# CUSTOM_RDT_L3_WAY counts a way on every L3 cache of '
                  r'one cache group: (.+)\.$', re.M)


def provider_config(config: object) -> str:
    result = subprocess.run(
        [sys.executable, '-m', 'ovs_rdt.cmd.main', '--config-file',
         str(config), 'provider-config'],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ''
    return result.stdout


def ways(text: str) -> dict:
    provider = yaml.safe_load(text)['providers'][0]
    return [item['CUSTOM_RDT_L3_WAY'] for item in provider['inventories'][
        'additional'] if 'CUSTOM_RDT_L3_WAY' in item][0]


@pytest.mark.parametrize('profile', sorted(EXPECTED))
def test_provider_config_counts_cache_groups(emulator_factory, tmp_path,
                                             profile: str) -> None:
    emu = emulator_factory(profile)
    config = tmp_path / 'ovs-rdt.conf'
    config.write_text('[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n'
                      % (emu.root, emu.sysfs))
    text = provider_config(config)
    assert LINE.findall(text) == [EXPECTED[profile]], text
    platform = Resctrl(emu.root, emu.sysfs).platform(cpus=True)
    # two sockets: two groups, whatever the L3s per node
    assert ways(text)['total'] == 2 * platform.cbm_len
    # each group is the L3s of its nodes' CPUs, as the hook maps them
    for item in EXPECTED[profile].split('; '):
        l3s, nodes = re.fullmatch(r'L3 (\S+) \(NUMA node (\S+)\)',
                                  item).groups()
        cpus: set[int] = set()
        for node in cpulists.parse(nodes, 'nodes'):
            with open('%s/node/node%d/cpulist' % (emu.sysfs, node)) as fh:
                cpus |= cpulists.parse(fh.read().strip(), 'cpulist')
        assert platform.domains_of_cpus(cpus) == cpulists.parse(l3s, 'l3s')


def test_explicit_node_root(emulator_factory, tmp_path) -> None:
    """``[resctrl] sysfs_node_root`` names the node tree (here: none): each
    L3 domain is then a group of its own.
    """
    emu = emulator_factory('epyc-9654')
    config = tmp_path / 'ovs-rdt.conf'
    config.write_text('[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n'
                      'sysfs_node_root = %s\n'
                      % (emu.root, emu.sysfs, tmp_path / 'nowhere'))
    text = provider_config(config)
    assert 'L3: 24 cache domain(s) x 16 ways' in text
    assert LINE.findall(text) == ['; '.join('L3 %d' % d for d in range(24))]
    assert ways(text)['total'] == 24 * 16
