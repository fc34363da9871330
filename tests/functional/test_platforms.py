"""``ovs-rdt apply`` and ``status`` on every platform of issue 14, through the
mounted emulator: CDP, mba_MBps, AMD EPYC (MB in 1/8 GB/s, SMBA, 16-24 L3
domains), io_alloc and assignable counters (epyc-9575f), Sub-NUMA
Clustering (xeon-6-granite-rapids-snc3).  doc/platforms.md.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import NamedTuple

import pytest
from tests import schemata as schemata_text

GNR = 'xeon-6-granite-rapids-snc3'


class Case(NamedTuple):
    profile: str
    options: tuple[str, ...]
    cap: str            # the kind of cap this platform takes
    cap_value: int
    written: int        # the MB value it becomes
    no_cap: int         # an uncapped group's MB value
    cat: str
    domains: int
    io_alloc: bool = False

    def __repr__(self) -> str:
        return self.profile + ''.join(self.options)


CASES = [
    Case('xeon-gold-6230', ('-o', 'cdp'), 'mb_percent', 45, 50, 100,
         'L3 CAT with CDP', 2),
    Case('xeon-gold-6230', ('-o', 'mba_MBps'), 'mb_mbps', 2500, 2500,
         4294967295, 'L3 CAT', 2),
    Case('epyc-9654', (), 'mb_mbps', 1000, 9, 2048, 'L3 CAT', 24),
    Case('epyc-9575f', (), 'mb_mbps', 1000, 9, 2048, 'L3 CAT', 16,
         io_alloc=True),
    Case(GNR, (), 'mb_percent', 50, 50, 100, 'L3 CAT', 2),
]

CONFIG = """
[resctrl]
root = {root}
sysfs_cpu_root = {sysfs}
[allocation]
pools = hp,noisy
system_min_ways = 2
[pool:hp]
l3_ways = 3
isolated = true
{cap} = {value}
[pool:noisy]
l3_ways = 1
"""


def cli(config: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                           '--config-file', config, *args],
                          capture_output=True, text=True, timeout=120)


def read(emu, *parts: str) -> str:
    with open(emu.path(*parts)) as fh:
        return fh.read()


def write(emu, rel: str, text: str) -> None:
    with open(emu.path(rel), 'w') as fh:
        fh.write(text)


def lines_of(text: str) -> dict[str, dict[int, str]]:
    return schemata_text.lines(text)


def configure(emu, tmp_path, cap: str, value: int) -> str:
    path = tmp_path / 'ovs-rdt.conf'
    path.write_text(CONFIG.format(root=emu.root, sysfs=emu.sysfs, cap=cap,
                                  value=value))
    return str(path)


@pytest.mark.parametrize('case', CASES, ids=repr)
def test_apply_and_status(emulator_factory, tmp_path, case: Case) -> None:
    emu = emulator_factory(case.profile, list(case.options))
    if case.io_alloc:
        write(emu, 'info/L3/io_alloc', '1\n')
        # Enabled, io_alloc holds every way (rdtgroup_init_cat()): no
        # isolated group fits until the operator narrows it.
        config = configure(emu, tmp_path, case.cap, case.cap_value)
        refused = cli(config, 'apply')
        assert refused.returncode == 1
        assert 'shared with I/O (io_alloc_cbm ffff)' in refused.stderr
        write(emu, 'info/L3/io_alloc_cbm',
              ';'.join('%d=e000' % d for d in range(case.domains)) + '\n')
    config = configure(emu, tmp_path, case.cap, case.cap_value)
    result = cli(config, 'apply')
    assert result.returncode == 0, result.stderr
    hp = lines_of(read(emu, 'ovsrdt-pool-hp', 'schemata'))
    noisy = lines_of(read(emu, 'ovsrdt-pool-noisy', 'schemata'))
    root = lines_of(read(emu, 'schemata'))
    kinds = ('L3CODE', 'L3DATA') if 'cdp' in case.options else ('L3',)
    for kind in kinds:
        assert len(hp[kind]) == case.domains
        for dom, mask in hp[kind].items():
            value = int(mask, 16)
            assert bin(value).count('1') == 3
            assert not value & int(root[kind][dom], 16)
            assert not value & int(noisy[kind][dom], 16)
            if case.io_alloc:
                assert not value & 0xe000          # I/O's ways
    if 'cdp' in case.options:
        assert hp['L3CODE'] == hp['L3DATA'] and 'L3' not in hp
    assert set(hp['MB'].values()) == {str(case.written)}
    assert set(noisy['MB'].values()) == {str(case.no_cap)}
    if case.profile.startswith('epyc'):
        assert set(hp['SMBA'].values()) == {'2048'}    # left alone
    assert read(emu, 'ovsrdt-pool-hp', 'mode').strip() == 'exclusive'
    # A second apply changes nothing (no MB:100 on a MiB/s mount).
    again = cli(config, 'apply', '--dry-run')
    assert again.returncode == 0, again.stderr
    assert 'nothing to change' in again.stdout, again.stdout

    status = cli(config, 'status')
    assert status.returncode == 5, status.stderr     # (no agent runs here)
    first = status.stdout.splitlines()[0]
    assert first.startswith('Platform: %s,' % case.cat), first
    assert '%d L3 cache domain(s)' % case.domains in first
    plan = json.loads(cli(config, 'status', '--json').stdout)
    plat = plan['platform']
    assert plat['cat'] == case.cat and plat['l3_domains'] == case.domains
    assert plat['mb_field'] == case.cap and plat['mb_max'] == case.no_cap
    assert plat['smba'] is case.profile.startswith('epyc')
    # What the platform is, from the topology: SNC shares an L3 between
    # NUMA nodes, EPYC has many L3s per node.
    assert plat['snc'] is (case.profile == GNR)
    assert 'NUMA to L3: ' in status.stdout
    if case.profile == GNR:
        assert 'Sub-NUMA Clustering, 3 NUMA nodes per L3: nodes 0-2 -> L3 0' \
            in status.stdout
        assert plat['numa_l3']['4'] == [1]
    if case.profile.startswith('epyc'):
        assert len(plat['numa_l3']['0']) > 1
    rows = {r['group']: r for r in plan['domains'][0]['groups']}
    assert rows['ovsrdt-pool-hp']['mb'] == case.written
    if 'cdp' in case.options:
        assert 'CODE/DATA' in status.stdout
        assert rows['ovsrdt-pool-hp']['cbm_code'] == \
            rows['ovsrdt-pool-hp']['cbm_data'] == hp['L3CODE'][0]
    if case.io_alloc:
        assert plat['io_alloc'] == 'enabled'
        assert plat['io_alloc_ways']['0'] == 3
        assert plat['num_closids'] == 15
        assert 'io_alloc enabled' in status.stdout
        assert plat['mbm_assign_mode'] == 'mbm_event'


REFUSALS = [
    ('xeon-gold-6230', ('-o', 'mba_MBps'), 'mb_percent', 50, 'mb_mbps',
     'MB values are MiB/s (resctrl is mounted with mba_MBps)'),
    ('epyc-9654', (), 'mb_percent', 50, 'mb_mbps',
     'MB values are AMD bandwidth limits in 1/8 GB/s (info/MB/delay_linear '
     'is 0)'),
    ('xeon-gold-6230', ('-o', 'cdp'), 'mb_mbps', 800, 'mb_percent',
     'MB values are percentages (resctrl is mounted without mba_MBps)'),
]


@pytest.mark.parametrize('profile, options, cap, value, hint, kind', REFUSALS,
                         ids=[r[0] + ''.join(r[1]) for r in REFUSALS])
def test_the_other_kind_of_cap_is_refused(emulator_factory, tmp_path,
                                          profile, options, cap, value, hint,
                                          kind) -> None:
    emu = emulator_factory(profile, list(options))
    config = configure(emu, tmp_path, cap, value)
    result = cli(config, 'apply')
    assert result.returncode != 0
    assert ("[pool:hp] %s: '%d' cannot be met on this host: %s; give "
            '[pool:hp] %s instead' % (cap, value, kind, hint)) in result.stderr
    assert not any(e.startswith('ovsrdt-') for e in os.listdir(emu.root))


# -- mba_MBps_event -------------------------------------------------------------
def test_pool_mb_event_through_the_kernel_files(emulator_factory,
                                                tmp_path) -> None:
    """``[pool:NAME] mb_event``: written to the group's ``mba_MBps_event``
    on an mba_MBps mount, kept, shown by ``status``; refused on a
    percent mount, nothing created.
    """
    emu = emulator_factory('xeon-gold-6230', ['-o', 'mba_MBps'])
    path = tmp_path / 'ovs-rdt.conf'
    path.write_text(CONFIG.format(root=emu.root, sysfs=emu.sysfs,
                                  cap='mb_mbps', value=2500)
                    + '[pool:hp]\nmb_event = mbm_total_bytes\n')
    result = cli(str(path), 'apply')
    assert result.returncode == 0, result.stderr
    assert read(emu, 'ovsrdt-pool-hp', 'mba_MBps_event') == 'mbm_total_bytes\n'
    # The pool that does not ask keeps the kernel's default.
    assert read(emu, 'ovsrdt-pool-noisy', 'mba_MBps_event') == \
        'mbm_local_bytes\n'
    again = cli(str(path), 'apply', '--dry-run')
    assert again.returncode == 0 and 'nothing to change' in again.stdout, \
        again.stdout
    # Changed behind our back: the next apply writes it back.
    write(emu, 'ovsrdt-pool-hp/mba_MBps_event', 'mbm_local_bytes\n')
    fix = cli(str(path), 'apply', '--dry-run')
    assert fix.stdout.splitlines()[1:3] == [
        'event ovsrdt-pool-hp mbm_total_bytes',
        '    the memory-bandwidth controller of pool hp follows '
        'mbm_total_bytes'], fix.stdout
    assert cli(str(path), 'apply').returncode == 0
    assert read(emu, 'ovsrdt-pool-hp', 'mba_MBps_event') == 'mbm_total_bytes\n'

    status = cli(str(path), 'status')
    assert 'MB 2500 MiB/s of mbm_total_bytes' in status.stdout
    assert "software controller" in status.stdout
    plan = json.loads(cli(str(path), 'status', '--json').stdout)
    rows = {r['group']: r for r in plan['domains'][0]['groups']}
    assert rows['ovsrdt-pool-hp']['mb_event'] == 'mbm_total_bytes'
    assert rows['ovsrdt-pool-noisy']['mb_event'] == 'mbm_local_bytes'

    other = emulator_factory('xeon-gold-6230', ['-o', 'cdp'])
    path.write_text(CONFIG.format(root=other.root, sysfs=other.sysfs,
                                  cap='mb_percent', value=50)
                    + '[pool:hp]\nmb_event = mbm_total_bytes\n')
    refused = cli(str(path), 'apply')
    assert refused.returncode != 0
    assert ("[pool:hp] mb_event: 'mbm_total_bytes' cannot be met on this "
            'host: MB values are percentages (resctrl is mounted without '
            'mba_MBps); the event only applies where resctrl is mounted with '
            '"-o mba_MBps"') in refused.stderr
    assert 'Traceback' not in refused.stderr
    assert not any(e.startswith('ovsrdt-') for e in os.listdir(other.root))


# -- assignable MBM counters and the policy ------------------------------------
def test_policy_pools_get_an_mbm_counter_when_one_is_free(emulator_factory
                                                          ) -> None:
    """epyc-9575f (``mbm_event`` mode, 32 counters per L3): with every
    counter taken by other groups the policy's pools read Unassigned; the
    policy says why, once, and assigns a counter as soon as one is free.
    """
    from ovs_rdt.agent.policy import Reader
    from ovs_rdt.conf import Settings
    from ovs_rdt.core.policy import bounds_from
    from ovs_rdt.manager import CacheManager
    from ovs_rdt.resctrl import Resctrl

    emu = emulator_factory('epyc-9575f')
    settings = Settings.defaults(
        resctrl={'root': emu.root, 'sysfs_cpu_root': emu.sysfs},
        allocation={'system_min_ways': 2},
        policy={'enabled': True, 'high_priority': 'hp', 'best_effort': 'be',
                'hp_max_ways': 4, 'be_min_ways': 2},
        pools={'hp': {'l3_ways': 4}, 'be': {'l3_ways': 2}})
    # Other tools' monitoring groups hold every counter (2 each).
    for i in range(15):
        os.mkdir(emu.path('mon_groups', 'other%d' % i))
    assert read(emu, 'info/L3_MON/available_mbm_cntrs').startswith('0=0;')
    manager = CacheManager(Resctrl(emu.root, emu.sysfs), settings)
    manager.apply()
    hp = 'ovsrdt-pool-hp'
    assert read(emu, hp, 'mbm_L3_assignments').startswith(
        'mbm_total_bytes:0=_;1=_;')
    assert read(emu, hp, 'mon_data', 'mon_L3_00', 'mbm_total_bytes') == \
        'Unassigned\n'
    reader = Reader(manager)
    bounds = bounds_from(settings)
    reader.read(bounds, None, frozenset())
    assert (hp, 0) in reader.uncounted
    assert 'Failed to allocate counter for mbm_total_bytes in domain 0' in \
        reader.uncounted[(hp, 0)]
    # One group gone frees its two counters per domain: hp and be get one.
    os.rmdir(emu.path('mon_groups', 'other0'))
    reader.read(bounds, None, frozenset())
    assert reader.uncounted == {}
    for name in (hp, 'ovsrdt-pool-be'):
        assert read(emu, name, 'mbm_L3_assignments').startswith(
            'mbm_total_bytes:0=e;1=e;'), name
    assert read(emu, hp, 'mon_data', 'mon_L3_00',
                'mbm_total_bytes').strip().isdigit()


# -- CDP: a pool's own code and data masks -----------------------------------
def test_cdp_pool_code_and_data_masks_through_the_kernel_files(
        emulator_factory, tmp_path) -> None:
    emu = emulator_factory('xeon-gold-6230', ['-o', 'cdp'])
    path = tmp_path / 'ovs-rdt.conf'
    path.write_text(
        '[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n[allocation]\n'
        'pools = hp,noisy\nsystem_min_ways = 2\n[pool:hp]\n'
        'l3_code_cbm = 300\nl3_data_cbm = 7f0\nisolated = true\n'
        '[pool:noisy]\nl3_ways = 1\n' % (emu.root, emu.sysfs))
    result = cli(str(path), 'apply')
    assert result.returncode == 0, result.stderr
    # apply prints the two masks it wrote, not their union (trial 11).
    assert [ln.split() for ln in result.stdout.splitlines()
            if ln.startswith('ovsrdt-pool-hp ')] == [
        ['ovsrdt-pool-hp', 'L3CODE:0=300;1=300', 'L3DATA:0=7f0;1=7f0']], \
        result.stdout
    hp = lines_of(read(emu, 'ovsrdt-pool-hp', 'schemata'))
    assert set(hp['L3CODE'].values()) == {'300'}
    assert set(hp['L3DATA'].values()) == {'7f0'}
    # The kernel took it as exclusive: no group of anyone's overlaps 7f0.
    assert read(emu, 'ovsrdt-pool-hp', 'mode').strip() == 'exclusive'
    noisy = lines_of(read(emu, 'ovsrdt-pool-noisy', 'schemata'))
    root = lines_of(read(emu, 'schemata'))
    for lines in (noisy, root):
        for kind in ('L3CODE', 'L3DATA'):
            assert not any(int(m, 16) & 0x7f0 for m in lines[kind].values())
    again = cli(str(path), 'apply', '--dry-run')
    assert again.returncode == 0 and 'nothing to change' in again.stdout, \
        again.stdout
    status = cli(str(path), 'status')
    assert '300/7f0' in status.stdout, status.stdout


# -- a running agent's platform follows the mount ------------------------------
def test_a_long_lived_manager_sees_io_alloc_switched_on(emulator_factory
                                                        ) -> None:
    """One Resctrl object, as the agent keeps: io_alloc enabled after it
    read the platform; the next plan keeps isolated groups off I/O's ways
    and counts the CLOSID io_alloc takes (Resctrl.platform_stale).
    """
    from ovs_rdt.conf import Settings
    from ovs_rdt.core.model import Request
    from ovs_rdt.manager import CacheManager
    from ovs_rdt.resctrl import Resctrl

    emu = emulator_factory('epyc-9575f')
    rc = Resctrl(emu.root, emu.sysfs)
    manager = CacheManager(rc, Settings.defaults(
        allocation={'system_min_ways': 2}))
    ways = {d: 2 for d in range(16)}
    manager.allocate(Request('ovsrdt-vm-a', ways=ways))
    assert rc.platform().io_alloc == 'disabled'
    # vm-a holds the top two ways (exclusive); I/O gets the next two, the
    # ones a stale plan would give vm-b.
    assert set(lines_of(read(emu, 'ovsrdt-vm-a', 'schemata'))['L3']
               .values()) == {'c000'}
    write(emu, 'info/L3/io_alloc', '1\n')
    write(emu, 'info/L3/io_alloc_cbm',
          ';'.join('%d=3000' % d for d in range(16)) + '\n')
    manager.allocate(Request('ovsrdt-vm-b', ways=ways))
    plat = rc.platform()
    assert plat.io_alloc == 'enabled' and plat.num_closids == 15
    for name in ('ovsrdt-vm-a', 'ovsrdt-vm-b'):
        for mask in lines_of(read(emu, name, 'schemata'))['L3'].values():
            assert not int(mask, 16) & 0x3000, (name, mask)
