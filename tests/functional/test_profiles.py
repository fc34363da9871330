"""Every feature on every emulated platform (issue 14).

Parametrised over the cases of ``tests/platform_matrix.py`` (every profile
of ``ovs-rdt emulate``, ``-o cdp`` and ``-o mba_MBps`` on the Xeon Gold
6230, io_alloc enabled on the EPYC 9575F where it applies):

* the demo's layout (``ovs-rdt demo --profile P [--mount-option O]
  --keep``, the real demo: KVM guests, ovs-vswitchd and the agent; the
  default profile unmounted with options is ``test_demo.py``'s);
* a VM annotation through the private libvirtd (a dedicated 2-way guest with
  an MB cap in the platform's unit, and a pool guest), io_alloc too;
* the OvS knobs with a real ovs-vswitchd and the agent, io_alloc too;
* ``ovs-rdt provider-config``'s inventory: what Placement counts.

Every check reads the emulator's own files (``schemata``, ``tasks``, the
sysfs tree) and expects what the profile's hardware gives, never ovs-rdt's
own report.
"""
from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
from typing import Iterator
import uuid

import pytest
import yaml

from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.fixtures import host
from tests.functional.fixtures.libvirt import Guest, LibvirtTestbed
from tests.functional.fixtures.ovs import AgentProcess, OvsTestbed, wait_for
from tests.functional.fixtures.ovs import write_agent_config
from tests.platform_matrix import CAPACITY_CASES, CASES, IO_ALLOC_CBM
from tests.platform_matrix import NOISY_WAYS, SYSTEM_MIN_WAYS, Case, ids
from tests import schemata as schemata_text

PMD_GROUP = 'ovsrdt-ovs-pmd'
POOL = 'ovsrdt-pool-noisy'
RDT_NS = 'urn:ovs-rdt:libvirt:1'
#: An MB cap per kind of platform: (annotation / knob suffix, value, the
#: MB value resctrl then holds).  AMD: 1000 MiB/s in 1/8 GB/s units,
#: rounded up (doc/platforms.md).
MB = {'percent': ('percent', 50, 50),
      'mbps': ('mbps', 2500, 2500),
      'amd': ('mbps', 1000, math.ceil(1000 * 2 ** 20 / 125_000_000))}


# -- reading the emulator --------------------------------------------------
def read(emu_root: str, *parts: str) -> str:
    with open(os.path.join(emu_root, *parts)) as fh:
        return fh.read()


def schemata(emu_root: str, group: str = '') -> dict[str, dict[int, str]]:
    return schemata_text.lines(read(emu_root, group, 'schemata'))


def tasks(emu_root: str, group: str) -> set[int]:
    try:
        return {int(t) for t in read(emu_root, group, 'tasks').split()}
    except FileNotFoundError:
        return set()


def groups(emu_root: str) -> list[str]:
    return [g for g in os.listdir(emu_root) if g.startswith('ovsrdt-')]


def l3_kinds(case: Case) -> tuple[str, ...]:
    return ('L3CODE', 'L3DATA') if case.cdp else ('L3',)


def assert_isolated(emu_root: str, case: Case, group: str, ways: int,
                    domains: list[int]) -> None:
    """``ways`` contiguous ways on every domain, shared with no other group
    (the default group included), in every L3 schema of the mount.
    """
    mine = schemata(emu_root, group)
    others = {g: schemata(emu_root, g) for g in ['', *groups(emu_root)]
              if g != group}
    for kind in l3_kinds(case):
        assert len(mine[kind]) == case.domains, (kind, mine)
        for dom in domains:
            mask = int(mine[kind][dom], 16)
            assert bin(mask).count('1') == ways, (group, kind, dom, mine)
            assert '0' not in bin(mask >> (mask & -mask).bit_length() - 1)[2:]
            for name, theirs in others.items():
                assert not mask & int(theirs[kind][dom], 16), \
                    '%s %s overlaps %s on %s domain %d' % (
                        group, mine[kind][dom], name or '/', kind, dom)
            if case.io_alloc:           # I/O's ways count as used
                assert not mask & IO_ALLOC_CBM, (group, kind, dom, mine)
    if case.cdp:
        assert 'L3' not in mine and mine['L3CODE'] == mine['L3DATA']


def enable_io_alloc(emu_root: str, case: Case) -> None:
    """io_alloc on with :data:`IO_ALLOC_CBM` where the case says so (it
    starts with every way; the operator narrows it).
    """
    if not case.io_alloc:
        return
    with open(os.path.join(emu_root, 'info', 'L3', 'io_alloc'), 'w') as fh:
        fh.write('1\n')
    with open(os.path.join(emu_root, 'info', 'L3', 'io_alloc_cbm'), 'w') as fh:
        fh.write(';'.join('%d=%x' % (d, IO_ALLOC_CBM)
                          for d in range(case.domains)) + '\n')


def l3_of_cpu(sysfs: str, cpu: int) -> int:
    """The CPU's L3 id, from the emulator's sysfs tree (the hardware)."""
    with open(os.path.join(sysfs, 'cpu%d' % cpu, 'cache', 'index3',
                           'id')) as fh:
        return int(fh.read())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


# -- 1. the demo's layout ----------------------------------------------------
#: Every profile but the demo's default (tests/functional/test_demo.py),
#: and the default mounted with each option (``--mount-option``).
DEMO_CASES = [c for c in CASES if c.options
              or c.profile != 'xeon-gold-6230']


def process_threads(pid: int) -> dict[int, str]:
    out = {}
    for tid in os.listdir('/proc/%d/task' % pid):
        with open('/proc/%d/task/%s/comm' % (pid, tid)) as fh:
            out[int(tid)] = fh.read().strip()
    return out


@pytest.mark.parametrize('case', DEMO_CASES, ids=ids(DEMO_CASES))
def test_demo_layout(case: Case) -> None:
    from ovs_rdt.sandbox import Sandbox

    workdir = '/run/ovs-rdt-demo-prof-%s' % uuid.uuid4().hex[:6]
    markers = (workdir,)
    before = host.snapshot(markers)

    def demo(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, '-m', 'ovs_rdt.cmd.main', 'demo', '--workdir',
             workdir, '--top-seconds', '1', '--metrics-listen',
             '127.0.0.1:%d' % free_port(), *args],
            capture_output=True, text=True, timeout=400)

    result = demo('--keep', '--profile', case.profile,
                  *[a for o in case.options[1::2]
                    for a in ('--mount-option', o)])
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        box = Sandbox(workdir)
        root = box.emulator.root
        width = case.cbm_len
        # Table 4's way counts from the highest way down: hp 7, OS 2,
        # noisy 1; the dedicated guest takes the next way below.
        hp, system, noisy = (0x7f << width - 7, 0x3 << width - 9,
                             0x1 << width - 10)
        every = set(range(case.domains))
        for group, mask in (('ovsrdt-pool-hp', hp), (POOL, noisy),
                            ('', system)):
            for kind in l3_kinds(case):
                lines = schemata(root, group)[kind]
                assert set(lines) == every
                assert {int(v, 16) for v in lines.values()} == {mask}, \
                    (group, kind, lines)
        assert read(root, 'ovsrdt-pool-hp', 'mode').strip() == 'exclusive'
        dedicated = [g for g in groups(root) if g.startswith('ovsrdt-vm-')]
        assert len(dedicated) == 1
        assert_isolated(root, case, dedicated[0], 1, sorted(every))
        # Who is where: PMDs + ovs-vswitchd + the VM under test in hp.
        with open(box.ovs.vswitchd_pidfile) as fh:
            vswitchd = process_threads(int(fh.read()))
        assert sum(c.startswith('pmd-c') for c in vswitchd.values()) == 2
        assert set(vswitchd) <= tasks(root, 'ovsrdt-pool-hp')

        def vcpus(name: str) -> set[int]:
            with open(os.path.join(box.libvirtd.qemu_run_dir,
                                   name + '.pid')) as fh:
                threads = process_threads(int(fh.read()))
            out = {t for t, c in threads.items()
                   if c.startswith('CPU ') and c.endswith('/KVM')}
            assert len(out) == 2, threads
            return out

        assert vcpus('ovsrdt-demo-sut') <= tasks(root, 'ovsrdt-pool-hp')
        for name in ('ovsrdt-demo-noisy1', 'ovsrdt-demo-noisy2'):
            assert vcpus(name) <= tasks(root, POOL)
        assert vcpus('ovsrdt-demo-dedicated') <= tasks(root, dedicated[0])
        # status says what the platform is
        platform = [ln for ln in result.stdout.splitlines()
                    if ln.startswith('Platform: ')]
        assert platform and ('%d-bit CBM' % width) in platform[0] and (
            '%d L3 cache domain(s)' % case.domains) in platform[0], platform
        assert ('L3 CAT with CDP' in platform[0]) is case.cdp
        assert ('MBA in MiB/s, mba_MBps' in platform[0]) is \
            ('mba_MBps' in case.options)
        assert 'mounting the emulated resctrl (%s%s)' % (
            case.profile, ''.join(' -o ' + o for o in case.options[1::2])) \
            in result.stdout
    finally:
        down = demo('--teardown')
    assert down.returncode == 0, down.stdout + down.stderr
    assert not os.path.exists(workdir)
    host.assert_unchanged(before, markers)


# -- 2. a VM annotation ------------------------------------------------------
@pytest.fixture(params=CAPACITY_CASES, ids=ids(CAPACITY_CASES))
def hook_env(request: pytest.FixtureRequest,
             libvirt_testbed: LibvirtTestbed
             ) -> Iterator[tuple[Case, LibvirtTestbed, EmulatorFixture]]:
    """One shared private libvirtd (session), an emulator of the case."""
    case = request.param
    emu = EmulatorFixture(case.profile, list(case.options),
                          rootdir=libvirt_testbed.mount_base)
    emu.setUp()
    try:
        enable_io_alloc(emu.root, case)
        libvirt_testbed.configure(emu.root, emu.sysfs,
                                  pools={'noisy': NOISY_WAYS},
                                  system_min_ways=SYSTEM_MIN_WAYS)
        try:
            yield case, libvirt_testbed, emu
        finally:
            libvirt_testbed.remove_guests()
            libvirt_testbed.configure_raw('')
        assert groups(emu.root) == [POOL]
    finally:
        emu.cleanUp()


def vcpu_tids(tb: LibvirtTestbed, guest: Guest) -> set[int]:
    found = tb.vcpu_tids(guest)
    assert len(found) == 2
    return found


def test_vm_annotation(hook_env: tuple[Case, LibvirtTestbed,
                                       EmulatorFixture]) -> None:
    case, tb, emu = hook_env
    cap = ''
    if case.mb:
        attr, value, written = MB[case.mb]
        cap = '<rdt:mb %s="%d"/>' % (attr, value)
    dedicated = tb.define('<rdt:rdt xmlns:rdt="%s"><rdt:l3 ways="2"/>%s'
                          '</rdt:rdt>' % (RDT_NS, cap))
    pooled = tb.define('<rdt:rdt xmlns:rdt="%s"><rdt:pool name="noisy"/>'
                       '</rdt:rdt>' % RDT_NS)
    tb.start(dedicated)
    tb.start(pooled)
    # Unpinned: its vCPUs may run anywhere, so 2 ways on every domain.
    assert_isolated(emu.root, case, dedicated.group, 2,
                    list(range(case.domains)))
    mine = tasks(emu.root, dedicated.group)
    vcpus = vcpu_tids(tb, dedicated)
    assert vcpus <= mine and not vcpus & tasks(emu.root, '')
    lines = schemata(emu.root, dedicated.group)
    if case.mb:
        assert set(lines['MB'].values()) == {str(written)}, lines['MB']
        assert len(lines['MB']) == case.domains
    else:
        assert 'MB' not in lines
    pool_vcpus = vcpu_tids(tb, pooled)
    assert pool_vcpus <= tasks(emu.root, POOL)
    assert not pool_vcpus & mine
    assert pooled.group not in groups(emu.root)
    tb.destroy(dedicated)
    assert dedicated.group not in groups(emu.root)
    tb.destroy(pooled)
    assert not pool_vcpus & tasks(emu.root, POOL)


# -- 3. the OvS knobs --------------------------------------------------------
@pytest.fixture
def knobs_env(request: pytest.FixtureRequest, ovs: OvsTestbed,
              emulator_factory, tmp_path  # type: ignore[no-untyped-def]
              ) -> Iterator[tuple[Case, EmulatorFixture]]:
    case = request.param
    emu = emulator_factory(case.profile, list(case.options))
    enable_io_alloc(emu.root, case)
    conf = str(tmp_path / 'agent.conf')
    write_agent_config(conf, ovs, emu.root, emu.sysfs, pools={})
    agent = AgentProcess(conf, str(tmp_path / 'agent.log')).start()
    try:
        yield case, emu
    finally:
        agent.stop()


def rdt_status(ovs: OvsTestbed, prefix: str, contains: str = '') -> str:
    def check() -> str | None:
        now = ovs.external_id('rdt-status') or ''
        return now if now.startswith(prefix) and contains in now else None
    return wait_for(check, timeout=15, step=0.05,
                    what='rdt-status %r ... %r (now %r)'
                    % (prefix, contains, ovs.external_id('rdt-status')))


@pytest.mark.parametrize('knobs_env', CAPACITY_CASES, ids=ids(CAPACITY_CASES),
                         indirect=True)
def test_ovs_knobs(ovs: OvsTestbed, knobs_env: tuple[Case, EmulatorFixture]
                   ) -> None:
    case, emu = knobs_env
    rdt_status(ovs, 'ok: no rdt-* keys set')
    knobs = {'rdt_pmd_l3_ways': '3', 'rdt_vswitchd': 'default'}
    if case.mb:
        attr, value, written = MB[case.mb]
        knobs['rdt_pmd_mb_' + attr] = str(value)
    ovs.other_config(**knobs)
    rdt_status(ovs, 'ok: PMD cores 0 (1 thread) in %s' % PMD_GROUP)
    pmds = set(ovs.pmd_threads())
    assert pmds and tasks(emu.root, PMD_GROUP) == pmds
    # 3 isolated ways where the PMD core's L3 is (sysfs: cache/index3/id).
    assert_isolated(emu.root, case, PMD_GROUP, 3,
                    [l3_of_cpu(emu.sysfs, 0)])
    lines = schemata(emu.root, PMD_GROUP)
    if case.mb:
        assert lines['MB'][l3_of_cpu(emu.sysfs, 0)] == str(written), lines
        # the other kind of cap: refused, naming the key, nothing changed
        other = 'percent' if attr == 'mbps' else 'mbps'
        ovs.other_config(**{'rdt_pmd_mb_' + attr: None,
                            'rdt_pmd_mb_' + other: '50'})
        err = rdt_status(ovs, 'error: ', 'other_config:rdt-pmd-mb-%s: '
                         "'50' cannot be met on this host" % other)
        assert 'Traceback' not in err
        assert schemata(emu.root, PMD_GROUP) == lines
        assert tasks(emu.root, PMD_GROUP) == pmds
    else:
        assert 'MB' not in lines
        ovs.other_config(rdt_pmd_mb_percent='50')
        rdt_status(ovs, 'error: ', "other_config:rdt-pmd-mb-percent: '50' "
                   'cannot be met: this host has no memory bandwidth')
        assert schemata(emu.root, PMD_GROUP) == lines
    # Removing the keys undoes it all.
    ovs.other_config(rdt_pmd_l3_ways=None, rdt_vswitchd=None,
                     rdt_pmd_mb_percent=None, rdt_pmd_mb_mbps=None)
    rdt_status(ovs, 'ok: no rdt-* keys set')
    assert PMD_GROUP not in groups(emu.root)
    assert pmds <= tasks(emu.root, '')


# -- 4. the capacity Nova gets ----------------------------------------------
PC_CONFIG = """
[resctrl]
root = {root}
sysfs_cpu_root = {sysfs}
[allocation]
pools = noisy
system_min_ways = {system}
[pool:noisy]
l3_ways = {noisy}
"""


@pytest.mark.parametrize('case', CAPACITY_CASES, ids=ids(CAPACITY_CASES))
def test_provider_config_inventory(emulator_factory, tmp_path,  # type: ignore
                                   case: Case) -> None:
    emu = emulator_factory(case.profile, list(case.options))
    enable_io_alloc(emu.root, case)
    config = tmp_path / 'ovs-rdt.conf'
    config.write_text(PC_CONFIG.format(root=emu.root, sysfs=emu.sysfs,
                                       system=SYSTEM_MIN_WAYS,
                                       noisy=NOISY_WAYS))
    res = subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                          '--config-file', str(config), 'provider-config'],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = yaml.safe_load(res.stdout)
    inv = {}
    for item in doc['providers'][0]['inventories']['additional']:
        inv.update(item)
    ways, closids = inv['CUSTOM_RDT_L3_WAY'], inv['CUSTOM_RDT_CLOSID']
    # a way on every L3 of a cache group (a socket here; its CCDs on EPYC)
    total = case.cbm_len * case.groups
    assert ways['total'] == total
    assert ways['reserved'] == case.system_ways * case.groups, res.stdout
    assert ways['max_unit'] == total - ways['reserved']
    assert ways['min_unit'] >= 1      # Placement refuses 0
    assert closids['total'] == case.closids
    assert closids['reserved'] == 2   # the default group and pool noisy
    traits = doc['providers'][0]['traits']['additional']
    assert ('CUSTOM_RDT_MBA' in traits) is (case.mb is not None)
    # The kind of cap the host takes, for flavors to require.
    kind = {None: None, 'percent': 'CUSTOM_RDT_MB_PERCENT',
            'mbps': 'CUSTOM_RDT_MB_MBPS', 'amd': 'CUSTOM_RDT_MB_MBPS'}
    assert [t for t in traits if t.startswith('CUSTOM_RDT_MB_')] == \
        ([kind[case.mb]] if case.mb else [])
    assert 'CUSTOM_RDT_POOL_NOISY' in traits
    # provider-config only reads: no group was made
    assert groups(emu.root) == []
