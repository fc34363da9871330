"""What an operator reads before and after a change, against a real
libvirtd with KVM guests, the hook and the mounted resctrl emulator
(xeon-gold-6230: 2 cache domains of 11 ways, 16 CLOSIDs):
``apply --dry-run`` (each write and whom it touches), ``status`` (what is
left, whether the configuration is applied, its exit status) and
``check-domain`` (what the hook would do with a domain XML).

Every test starts from pool ``noisy`` (2 ways) applied, the default group
keeping 2 ways: 7 ways per domain are left for VMs.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Iterator

import pytest

from ovs_rdt.core.model import ROOT
from ovs_rdt.resctrl import Resctrl
from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.fixtures.libvirt import Guest, LibvirtTestbed
from tests.functional.fixtures.ovs import REPO

PROFILE = 'xeon-gold-6230'
NOISY = 'ovsrdt-pool-noisy'


def rdt(body: str) -> str:
    return '<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">%s</rdt:rdt>' % body


class Node:
    """The testbed and the emulator; the CLI on the hook's config file."""

    def __init__(self, tb: LibvirtTestbed, emu: EmulatorFixture) -> None:
        self.tb = tb
        self.emu = emu
        self.rc = Resctrl(emu.root, emu.sysfs)

    def configure(self, pools: dict[str, int] | None = None,
                  **kwargs: object) -> None:
        self.tb.configure(self.emu.root, self.emu.sysfs, pools=pools,
                          uri=self.tb.libvirtd.ro_uri, **kwargs)

    def cli(self, *args: str, stdin: str | None = None
            ) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                               '--config-file', self.tb.config, *args],
                              capture_output=True, text=True, timeout=120,
                              input=stdin, cwd=REPO,
                              env=dict(os.environ, PYTHONPATH=REPO))

    def state(self) -> dict[str, tuple[dict, list[int]]]:
        """Every group's masks, and its tasks but the default group's
        (every process of the host that comes and goes): what a look must
        not change.
        """
        return {g.name: ({d: str(m) for d, m in g.l3.items()},
                         sorted(g.tasks) if g.name else [])
                for g in self.rc.groups(with_tasks=True)}

    def dumpxml(self, guest: Guest) -> str:
        return self.tb.virsh('dumpxml', guest.name).stdout


@pytest.fixture
def node(libvirt_testbed: LibvirtTestbed,
         testbed_emulator: EmulatorFixture) -> Iterator[Node]:
    node = Node(libvirt_testbed, testbed_emulator)
    node.configure()
    applied = node.cli('apply')
    assert applied.returncode == 0, applied.stderr
    try:
        yield node
    finally:
        libvirt_testbed.remove_guests()
    assert not [g for g in node.rc.group_names()
                if g.startswith('ovsrdt-vm-')]


def test_dry_run_and_status_name_the_vm_a_removed_pool_holds(
        node: Node) -> None:
    """Issue 39 items 3, 4 and 9: pool noisy dropped from ``pools`` while a
    VM runs in it.  The dry run says, under ``rmdir``, which VM (libvirt's
    name) and threads go to the default group; ``status`` says the same
    and exits 3 until ``apply``; an empty plan says so.
    """
    guest = node.tb.define(rdt('<rdt:pool name="noisy"/>'), vcpus=2)
    node.tb.start(guest)
    vcpus = node.tb.vcpu_tids(guest)
    assert vcpus <= set(node.rc.tasks(NOISY))
    others = len(set(node.rc.tasks(NOISY)) - vcpus)
    dry = node.cli('apply', '--dry-run')
    assert dry.returncode == 0 and dry.stdout.splitlines()[0] == \
        'Dry run: nothing to change: %s holds what the configuration asks' \
        % node.emu.root, dry.stdout

    node.configure(pools={})
    before = node.state()
    dry = node.cli('apply', '--dry-run')
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0].startswith('Dry run: 2 writes would make %s what the '
                               'configuration asks' % node.emu.root), lines
    said = ('removes pool noisy (not in [allocation] pools): it holds '
            'running VM %s (2 vCPU threads, %d other QEMU threads); the '
            'kernel moves them to the default group' % (guest.name, others))
    assert lines[lines.index('rmdir %s' % NOISY) + 1] == '    ' + said
    assert lines[-1] == 'VM names: from libvirt at %s' \
        % node.tb.libvirtd.ro_uri
    assert node.state() == before                       # nothing written

    status = node.cli('status')
    assert status.returncode == 3, status.stderr
    assert ('Configuration: not applied: 2 writes would make %s what it '
            'asks ("ovs-rdt apply" makes them):' % node.emu.root) \
        in status.stdout
    assert '      ' + said in status.stdout.splitlines()
    js = node.cli('status', '--json')
    assert js.returncode == 3
    conf = json.loads(js.stdout)['configuration']
    assert conf['state'] == 'differs'
    assert {'write': 'rmdir %s' % NOISY, 'effects': [said]} in conf['writes']
    assert node.state() == before

    assert node.cli('apply').returncode == 0
    assert vcpus <= set(node.rc.tasks(ROOT))
    assert node.cli('status').returncode == 5        # applied; no agent
    assert 'nothing to change' in node.cli('apply', '--dry-run').stdout


def test_status_shows_what_is_left_and_a_configuration_it_cannot_apply(
        node: Node) -> None:
    """The ways left for VMs by provider-config's reserve, for a pool, the
    CLOSIDs left; ``l3_ways = 12`` on an 11-way cache: the planner's
    reason, exit 4, the same in JSON.
    """
    guest = node.tb.define(rdt('<rdt:l3 ways="3"/>'))
    node.tb.start(guest)
    res = node.cli('status')
    # Applied, but no agent runs here (issue 51 item 1): 5, and why.
    assert res.returncode == 5, res.stdout + res.stderr
    assert 'Agent: no ovs-rdt-agent runs for this resctrl root: nothing ' \
        'follows the OvS knobs' in res.stdout
    assert res.stdout.count(
        '  free: 4 ways for a VM or an isolated pool (11 - 4 reserved '
        '(system_min_ways 2, ovsrdt-pool-noisy 2) - 3 held by VMs)') == 2, \
        res.stdout
    assert 'CLOSIDs left: 13 of 16' in res.stdout
    assert res.stdout.rstrip().endswith(
        'Configuration: applied (%s holds what it asks)' % node.emu.root)
    plan = json.loads(node.cli('status', '--json').stdout)
    assert plan['configuration'] == {'state': 'applied', 'error': None,
                                     'writes': []}
    assert [d['free'] for d in plan['domains']] == [
        {'vm_ways': 4, 'reserved_ways': 4, 'vm_held_ways': 3,
         'reserved_by': [['system_min_ways', 2], [NOISY, 2]],
         'pool_ways': 4, 'shared_pool_ways': 4}] * 2
    assert plan['closids_free'] == 13
    # The reserve is provider-config's (what Placement is told).
    header = node.cli('provider-config').stdout
    assert 'reserved per domain: 0=4 1=4 (each: system_min_ways 2, ' \
        'ovsrdt-pool-noisy 2).' in header
    # And it holds: a VM of 4 ways starts, one of 5 would not.
    assert node.cli('check-domain', '-', stdin=node.dumpxml(
        node.tb.define(rdt('<rdt:l3 ways="4"/>')))).returncode == 0
    assert node.cli('check-domain', '-', stdin=node.dumpxml(
        node.tb.define(rdt('<rdt:l3 ways="5"/>')))).returncode == 3

    node.configure(pools={'noisy': 12})
    before = node.state()
    res = node.cli('status')
    assert res.returncode == 4, res.stdout + res.stderr
    line = next(n for n, ln in enumerate(open(node.tb.config), 1)
                if ln.startswith('l3_ways = 12'))
    why = ('config file %s line %d: [pool:noisy] l3_ways = 12 is more than '
           'the 11 ways of this platform' % (node.tb.config, line))
    assert 'Configuration: cannot be applied: %s' % why in res.stdout
    js = node.cli('status', '--json')
    assert js.returncode == 4
    assert json.loads(js.stdout)['configuration'] == {
        'state': 'invalid', 'error': why, 'writes': []}
    assert 'exit status:' in node.cli('status', '--help').stdout
    assert node.state() == before


def test_one_free_count_for_status_provider_config_and_the_hook(
        node: Node) -> None:
    """Issue 51 item 6: a VM's way freed in the middle of the mask, the PMD
    group below the VMs: 4 ways are free in all, in no run of 4.  status
    says 4 (no longer 1 with 8 reserved, the PMD group counted where it
    is), provider-config reserves what status does, a 4-way VM starts (the
    allocator moves groups to make its run), a 5-way one is refused with
    the same count, and the reserve stays as it was.
    """
    from ovs_rdt.conf import load
    from ovs_rdt.core.model import PMD_GROUP, Request
    from ovs_rdt.manager import CacheManager

    def counts() -> tuple[list[dict], str]:
        res = node.cli('status', '--json')
        assert res.returncode in (0, 5), res.stdout + res.stderr
        header = node.cli('provider-config').stdout
        return ([d['free'] for d in json.loads(res.stdout)['domains']],
                header)

    hole = node.tb.define(rdt('<rdt:l3 ways="1"/>'))
    vm1 = node.tb.define(rdt('<rdt:l3 ways="2"/>'))
    node.tb.start(hole)
    node.tb.start(vm1)
    # What the agent does for other_config:rdt-pmd-l3-ways=1.
    manager = CacheManager(node.rc, load(node.tb.config))
    manager.allocate(Request(PMD_GROUP, ways={0: 1, 1: 1}))
    try:
        node.tb.destroy(hole)       # its way stays free where it was
        free, header = counts()
        # noisy 2 + the floor 2 + the PMD group 1 reserved, vm1 holds 2
        by = [['system_min_ways', 2], [NOISY, 2], [PMD_GROUP, 1]]
        assert free == [{'vm_ways': 4, 'vm_held_ways': 2,
                         'reserved_ways': 5, 'reserved_by': by,
                         'pool_ways': 4, 'shared_pool_ways': 4}] * 2, free
        assert 'reserved per domain: 0=5 1=5 (each: system_min_ways 2, ' \
            'ovsrdt-pool-noisy 2, ovsrdt-ovs-pmd 1).' in header, header
        text = node.cli('status').stdout
        assert text.count('  free: 4 ways for a VM or an isolated pool (11 - '
                          '5 reserved (system_min_ways 2, ovsrdt-pool-noisy '
                          '2, ovsrdt-ovs-pmd 1) - 2 held by VMs)') == 2, text

        big = node.tb.define(rdt('<rdt:l3 ways="5"/>'))
        refused = node.tb.start(big, check=False)
        assert refused.returncode != 0
        assert ('%s needs 5 ways on cache domain 0, but only 4 of 11 are '
                'free for it (11 - 5 reserved for the default group, pools, '
                'OvS and other tools - 2 held by VMs)' % big.group) \
            in refused.stderr, refused.stderr
        fits = node.tb.define(rdt('<rdt:l3 ways="4"/>'))
        node.tb.start(fits)
        assert ('to make room for %s' % fits.group) in node.tb.hook_log()
        free, header = counts()
        assert [(f['vm_ways'], f['reserved_ways'], f['vm_held_ways'])
                for f in free] == [(0, 5, 6)] * 2, free
        assert 'reserved per domain: 0=5 1=5 (each: ' in header, header
    finally:
        node.tb.remove_guests()
        manager.release(PMD_GROUP)


def test_check_domain_says_what_the_hook_would_do(node: Node) -> None:
    """``virsh dumpxml NAME | ovs-rdt check-domain -``: the group and masks
    the hook then gives the VM, its refusals word for word, nothing
    written.
    """
    before = node.state()
    guest = node.tb.define(rdt('<rdt:l3 ways="3"/>'), vcpus=2)
    res = node.cli('check-domain', '-', stdin=node.dumpxml(guest))
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == ("domain '%s' (uuid %s) asks for 3 L3 ways (from the "
                        "<rdt:rdt> annotation)" % (guest.name, guest.uuid))
    assert lines[1] == (
        'the hook would create %s and put its 2 vCPU threads and its other '
        'QEMU threads ([libvirt] include_emulator_threads = true) in it'
        % guest.group)
    said = {int(ln.split()[2].rstrip(':')): ln.split()[3] for ln in lines
            if ln.startswith('  cache domain ')}
    assert node.state() == before
    node.tb.start(guest)
    group = {g.name: g for g in node.rc.groups()}[guest.group]
    assert {d: str(m) for d, m in group.l3.items()} == said
    # The same, from a file, for the running VM: its group exists.
    path = os.path.join(node.tb.workdir, 'check-domain.xml')
    with open(path, 'w', encoding='utf-8') as fh:
        fh.write(node.dumpxml(guest))
    assert 'the hook would resize %s' % guest.group in node.cli(
        'check-domain', path).stdout
    # The MB value written beside the one asked (issue 51 trial 11): 33%
    # is written 40 (10% steps); one way is "1 way".
    capped = node.tb.define(rdt('<rdt:l3 ways="1"/><rdt:mb percent="33"/>'))
    lines = node.cli('check-domain', '-',
                     stdin=node.dumpxml(capped)).stdout.splitlines()
    assert "  memory bandwidth: MB:0=40;1=40 written (what it asks, rounded " \
        "up to the hardware's granularity)" in lines, lines
    assert any(ln.endswith(' (1 way, 2560 KiB)') for ln in lines), lines

    # Refusals: the hook's own message, word for word.
    for body in ('<rdt:l3 ways="9"/>', '<rdt:l3 way="3"/>',
                 '<rdt:pool name="nope"/>'):
        other = node.tb.define(rdt(body))
        before = node.state()
        res = node.cli('check-domain', '-', stdin=node.dumpxml(other))
        assert res.returncode == 3, res.stdout + res.stderr
        prefix = "domain '%s': the hook would refuse to start it: " \
            % other.name
        assert res.stdout.startswith(prefix), res.stdout
        why = res.stdout[len(prefix):].strip()
        assert node.state() == before
        started = node.tb.start(other, check=False)
        assert started.returncode != 0
        assert started.stderr.rstrip().endswith(
            "ovs-rdt: refusing to start domain '%s': %s"
            % (other.name, why)), (started.stderr, why)

    # With [libvirt] on_failure = warn the hook starts it unmanaged.
    node.configure(on_failure='warn')
    res = node.cli('check-domain', '-', stdin=node.dumpxml(other))
    assert res.returncode == 3
    assert ("domain '%s': the hook would start it without a cache "
            "allocation, its threads in the default group ([libvirt] "
            "on_failure = warn): " % other.name) in res.stdout

    # A VM that asks for nothing; a bad file.
    plain = node.tb.define()
    res = node.cli('check-domain', '-', stdin=node.dumpxml(plain))
    assert res.returncode == 0
    assert res.stdout.startswith("domain '%s' asks ovs-rdt for nothing"
                                 % plain.name)
    assert 'its threads run in the default group' in res.stdout
    res = node.cli('check-domain', '/nonexistent.xml')
    assert res.returncode == 1
    assert 'cannot read /nonexistent.xml' in res.stderr


def test_check_domain_takes_the_docs_vm1_xml(node: Node) -> None:
    """Issue 51 item 5: doc/try-it.md's vm1.xml has no ``<uuid>`` (libvirt
    gives it one at define); check-domain refused it ("the domain XML has
    no <uuid>").  Now it says what the hook will do, and the guest, once
    defined and started, gets just that.
    """
    from tests.functional.fixtures.libvirt import GUEST_PREFIX, VIRT_TYPE

    with open(os.path.join(REPO, 'doc', 'try-it.md'), encoding='utf-8') as fh:
        doc = fh.read()
    xml = re.search(r"cat > vm1.xml <<'EOF'\n(.*?)\nEOF", doc, re.S).group(1)
    assert '<uuid>' not in xml and '<rdt:l3 ways="2"/>' in xml
    name = '%s%s-doc-vm1' % (GUEST_PREFIX, node.tb.run_id)
    xml = xml.replace('<name>vm1</name>', '<name>%s</name>' % name).replace(
        "type='kvm'", "type='%s'" % VIRT_TYPE)
    path = os.path.join(node.tb.workdir, 'vm1.xml')
    with open(path, 'w', encoding='utf-8') as fh:
        fh.write(xml)
    before = node.state()
    res = node.cli('check-domain', path)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == ("domain '%s' (no <uuid> in the XML: libvirt gives it "
                        "one when it is defined) asks for 2 L3 ways (from the "
                        "<rdt:rdt> annotation)" % name), lines
    assert lines[1].startswith('the hook would create ovsrdt-vm-<its uuid> '
                               'and put its 2 vCPU threads'), lines
    said = {int(ln.split()[2].rstrip(':')): ln.split()[3] for ln in lines
            if ln.startswith('  cache domain ')}
    assert node.state() == before
    node.tb.virsh('define', path)
    node.tb.virsh('start', '--domain', name)
    uuid = node.tb.virsh('domuuid', name).stdout.strip()
    group = {g.name: g for g in node.rc.groups()}['ovsrdt-vm-' + uuid]
    assert {d: str(m) for d, m in group.l3.items()} == said


def test_lines_that_no_longer_mislead(node: Node) -> None:
    """Issue 51 item 4: ``system_min_ways = 40`` on an 11-way node is the
    setting's fault (not "stop a VM"); metadata meant for ovs-rdt in
    another namespace, and a vCPU pinned to a CPU the node does not have,
    get a warning from check-domain and the hook.
    """
    lookalike = node.tb.define(
        '<x:rdt xmlns:x="urn:ovsrdt:libvirt:1"><x:l3 ways="2"/></x:rdt>')
    res = node.cli('check-domain', '-', stdin=node.dumpxml(lookalike))
    assert res.returncode == 0, res.stdout + res.stderr
    warning = ('the hook would log: warning: <x:rdt> in namespace '
               '"urn:ovsrdt:libvirt:1" looks like an ovs-rdt annotation, but '
               'ovs-rdt reads only <rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1"> '
               'in <metadata>: this VM asks ovs-rdt for nothing and runs in '
               'the default group')
    assert warning in res.stdout.splitlines(), res.stdout
    other = node.tb.define('<a:cfg xmlns:a="http://example.com/libvirt/1">'
                           '<a:l3 ways="2"/></a:cfg>')
    assert 'looks like an ovs-rdt annotation' in node.cli(
        'check-domain', '-', stdin=node.dumpxml(other)).stdout
    node.tb.start(lookalike)
    assert 'looks like an ovs-rdt annotation' in node.tb.hook_log()

    pinned = node.tb.define(rdt('<rdt:l3 ways="2"/>'), vcpus=1,
                            cputune='<cputune><vcpupin vcpu="0" '
                            'cpuset="45"/></cputune>')
    res = node.cli('check-domain', '-', stdin=node.dumpxml(pinned))
    assert res.returncode == 0, res.stdout + res.stderr
    assert ('the hook would log: warning: its vCPUs are pinned to CPU 45, '
            'which this node does not have (no L3 cache domain; its CPUs are '
            '0-39): its ways are reserved on every cache domain; check '
            '<vcpupin> and <vcpu cpuset>') in res.stdout.splitlines(), \
        res.stdout

    node.configure(system_min_ways=40)
    line = next(n for n, ln in enumerate(open(node.tb.config), 1)
                if ln.startswith('system_min_ways'))
    why = ('config file %s line %d: [allocation] system_min_ways = 40 is more '
           'than the 11 ways of this platform\'s cache domains: the default '
           'group cannot keep them' % (node.tb.config, line))
    res = node.cli('status')
    assert res.returncode == 4, res.stdout + res.stderr
    assert 'Configuration: cannot be applied: %s' % why in res.stdout
    guest = node.tb.define(rdt('<rdt:l3 ways="3"/>'))
    started = node.tb.start(guest, check=False)
    assert started.returncode != 0
    assert started.stderr.rstrip().endswith(
        "ovs-rdt: refusing to start domain '%s': fix the ovs-rdt "
        "configuration: %s" % (guest.name, why)), started.stderr


def test_top_sets_occupancy_against_the_ways_a_group_has(node: Node) -> None:
    """``top``: a timestamp per refresh, MiB/s, and each group's LLC
    occupancy against the bytes its ways give it (3 ways of 2560 KiB).
    """
    guest = node.tb.define(rdt('<rdt:l3 ways="3"/>'))
    node.tb.start(guest)
    res = node.cli('top', '--once', '--interval', '0.3')
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert re.fullmatch(r'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d', lines[0]), lines
    head = lines[1].split()
    assert head[:7] == ['GROUP', 'L3', 'LLC[KiB]', 'OF[KiB]', 'OCC%',
                        'MBL[MiB/s]', 'MBT[MiB/s]']
    rows = [dict(zip(head, ln.split())) for ln in lines
            if ln.startswith(guest.group)]
    assert [r['L3'] for r in rows] == ['0', '1']
    for row in rows:
        assert row['OF[KiB]'] == '7680'
        assert row['OCC%'] == '%.0f' % (float(row['LLC[KiB]']) / 7680 * 100)


def test_one_verdict_on_the_files_everywhere(node: Node) -> None:
    """Issue 51 trial 4, 5, 6: a ``[policy]`` the agent would refuse and a
    value that is no boolean are refused by ``config``, ``apply
    --dry-run``, ``apply`` and ``status`` alike (exit 2: a configuration
    error), naming the file and line; a value this node cannot take
    (a mask wider than its cache) names them too: ``apply`` exits 2,
    ``status`` 4 (its contract: cannot be applied here); a usage error is 2.
    """
    base = open(node.tb.config).read()
    for extra, why in (
            ('[policy]\nenabled = true\nhigh_priority = noisy\n'
             'best_effort = be\nhp_max_ways = 3\n',
             "[policy] best_effort = 'be' is not a pool of [allocation] "
             "pools (noisy)"),
            ('[policy]\nenabled = yes please\n',
             "[policy] enabled: 'yes please' is not a boolean")):
        with open(node.tb.config, 'w') as fh:
            fh.write(base + extra)
        option = why.split('] ', 1)[1].split(' ')[0].rstrip(':')
        line = next(n for n, ln in enumerate(open(node.tb.config), 1)
                    if ln.startswith(option + ' ='))
        for args in (['config'], ['apply', '--dry-run'], ['apply'],
                     ['status']):
            res = node.cli(*args)
            assert (res.returncode, res.stderr) == (
                2, 'ovs-rdt %s: error: config file %s line %d: %s\n'
                % (args[0], node.tb.config, line, why)), (args, res.stderr)
    with open(node.tb.config, 'w') as fh:
        fh.write(base.replace('[pool:noisy]\nl3_ways = 2\n',
                              '[pool:noisy]\nl3_cbm = fff\n'))
    line = next(n for n, ln in enumerate(open(node.tb.config), 1)
                if ln.startswith('l3_cbm'))
    where = 'config file %s line %d: [pool:noisy] l3_cbm' % (
        node.tb.config, line)
    res = node.cli('apply')
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith('ovs-rdt apply: error: %s' % where)
    res = node.cli('status')
    assert res.returncode == 4, res.stdout + res.stderr
    assert 'Configuration: cannot be applied: %s' % where in res.stdout
    res = node.cli('profile', '--group', 'nosuch', '--seconds', '0.1')
    assert res.returncode == 2, res.stdout + res.stderr
    assert "ovs-rdt profile: error: --group 'nosuch': no such resctrl " \
        "group" in res.stderr
