"""libvirt_hooks.hook and .install with a plain-directory resctrl tree.

The resctrl side is the fake tree of tests.unit.fakes (no kernel rules);
the QEMU is a real process that looks like one in /proc (``-name``,
``-uuid``, threads named ``CPU n/KVM``).  Functional tests do the same
through a real libvirtd, KVM guests and the mounted emulator.
"""
import argparse
import io
import os
import subprocess
import sys
import threading

import pytest

from libvirt_hooks import hook
from ovs_rdt.cmd import install_hook as install
from ovs_rdt import conf
from ovs_rdt import guest
from ovs_rdt.guest import GuestCache
from tests.unit.fakes import FakeKernelTree
from tests.unit.fakes import make_tree
from tests.unit.test_domain import UUID, nova, rdt, xml

UUID2 = '11111111-2222-3333-4444-555555555555'

FAKE_QEMU = r'''
import os, sys, threading, time
ready = threading.Semaphore(0)
def vcpu(i):
    tid = threading.get_native_id()
    try:
        with open('/proc/self/task/%d/comm' % tid, 'w') as fh:
            fh.write('CPU %d/KVM' % i)
    except OSError as exc:      # a read-only /proc (some build chroots)
        print('cannot name a vCPU thread: %s' % exc, flush=True)
        os._exit(1)
    ready.release()
    time.sleep(600)
def worker():
    ready.release()
    time.sleep(600)
for target, args in ((vcpu, (0,)), (vcpu, (1,)), (worker, ())):
    threading.Thread(target=target, args=args, daemon=True).start()
for _ in range(3):
    ready.acquire()
print('ready', flush=True)
time.sleep(600)
'''


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A config file, a fake resctrl tree and sysfs; run(...) runs the hook.

    The hook, run in this process, routes the ``ovs_rdt`` logger to its own
    log (handlers, level, no propagation): put back afterwards, for the
    tests that read records with caplog.
    """
    import logging

    core = logging.getLogger('ovs_rdt')
    monkeypatch.setattr(core, 'handlers', list(core.handlers))
    monkeypatch.setattr(core, 'propagate', core.propagate)
    monkeypatch.setattr(core, 'level', core.level)
    root = tmp_path / 'resctrl'
    sysfs = tmp_path / 'cpu'
    make_tree(str(root), sysfs=str(sysfs))
    run_dir = tmp_path / 'run'
    run_dir.mkdir()

    class Node:
        config = tmp_path / 'ovs-rdt.conf'
        log = tmp_path / 'hook.log'

        def __init__(self):
            self.root = str(root)
            self.run_dir = str(run_dir)
            self.configure()

        def configure(self, extra='', **sections):
            text = ('[DEFAULT]\nlog_file = %s\n[resctrl]\nroot = %s\n'
                    'sysfs_cpu_root = %s\nlock_timeout = 5\n'
                    '[allocation]\npools = noisy\nsystem_min_ways = 2\n'
                    '[pool:noisy]\nl3_ways = 2\n[libvirt]\nqemu_run_dir = %s\n'
                    % (self.log, root, sysfs, run_dir))
            for name, values in sections.items():
                text += '[%s]\n' % name + ''.join(
                    '%s = %s\n' % kv for kv in values.items())
            self.config.write_text(text + extra)

        def run(self, data, op='prepare', subop='begin', name='vm1'):
            return hook.run(['--config-file', str(self.config), name, op,
                             subop, '-'], data)

        def rc(self):
            return FakeKernelTree(self.root, str(sysfs))

        def masks(self, group):
            return {d: str(m) for d, m in self.rc().group(group).l3.items()}

        def groups(self):
            return self.rc().group_names()

        def tasks(self, group):
            return sorted(self.rc().tasks(group))

    monkeypatch.setattr(hook.Log, 'use_syslog', False)
    monkeypatch.setattr(GuestCache, 'make_resctrl',
                        lambda self: FakeKernelTree(
                            self.settings.resctrl.root,
                            self.settings.resctrl.sysfs_cpu_root, 5))
    return Node()


@pytest.fixture
def qemu(node):
    """A process that looks like libvirt's QEMU for vm1, and its pidfile."""
    proc = subprocess.Popen(
        ['qemu-system-x86_64', '-c', FAKE_QEMU, '-name',
         'guest=vm1,debug-threads=on', '-uuid', UUID],
        executable=sys.executable, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == 'ready\n'
    with open(os.path.join(node.run_dir, 'vm1.pid'), 'w') as fh:
        fh.write('%d' % proc.pid)
    tids = {}
    for tid in os.listdir('/proc/%d/task' % proc.pid):
        with open('/proc/%d/task/%s/comm' % (proc.pid, tid)) as fh:
            tids[int(tid)] = fh.read().strip()
    proc.tids = tids
    proc.vcpus = sorted(t for t, c in tids.items() if c.startswith('CPU '))
    yield proc
    proc.kill()
    proc.wait()


GROUP = 'ovsrdt-vm-' + UUID
L3_3 = xml(rdt('<rdt:l3 ways="3"/>'))


def isolated(node, group, ways, domains=(0, 1)):
    """``group`` holds ``ways`` contiguous ways nobody else has on domains."""
    rc = node.rc()
    mine = rc.group(group).l3
    for dom in domains:
        mask = mine[dom]
        assert mask.count == ways and mask.is_contiguous(), (dom, mask)
        for other in rc.groups():
            if other.name != group:
                assert not mask.overlaps(other.l3[dom]), (other, mask)
    return True


def one_line(captured):
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert captured.out == ''
    return lines[0]


# -- prepare ----------------------------------------------------------------
def test_prepare_reserves_ways_on_every_domain(node, capsys):
    assert node.run(L3_3) == 0
    assert isolated(node, GROUP, 3)
    assert node.rc().group(GROUP).mode == 'exclusive'
    assert capsys.readouterr().out == ''
    masks = node.masks(GROUP)
    assert 'reserved 3 L3 ways (from the <rdt:rdt> annotation): group ' \
        '%s L3:0=%s;1=%s' % (GROUP, masks[0], masks[1]) in node.log.read_text()


def test_prepare_names_the_groups_it_moves(node):
    """Running VMs keep their ways; when a start fits only once one moves
    (free ways split), the hook's line names the move and why.
    """
    two = xml(rdt('<rdt:l3 ways="2"/>'))
    uuids = ['%08d-0000-4000-8000-000000000000' % i for i in range(4)]
    for i in range(3):
        assert node.run(two.replace(UUID.encode(), uuids[i].encode())) == 0
    masks = {u: node.masks('ovsrdt-vm-' + u) for u in uuids[:3]}
    assert node.masks('')[0] == '7'      # the floor of 2, and 1 free way
    assert node.run(two.replace(UUID.encode(), uuids[1].encode()),
                    'release', 'end') == 0
    for u in (uuids[0], uuids[2]):
        assert node.masks('ovsrdt-vm-' + u) == masks[u]
    assert 'moves ' not in node.log.read_text()
    # 3 ways free (2 where b was, 1 beside the floor), in no run of 3.
    assert node.run(xml(rdt('<rdt:l3 ways="3"/>')).replace(
        UUID.encode(), uuids[3].encode())) == 0
    log = node.log.read_text().splitlines()
    assert 'reserved 3 L3 ways' in log[-1]
    moved = [line for line in log if ' moves ovsrdt-vm-' in line]
    assert moved and all('to make room for ovsrdt-vm-%s' % uuids[3] in line
                         for line in moved), moved
    assert sum(node.masks('ovsrdt-vm-' + u) != masks[u]
               for u in (uuids[0], uuids[2])) == 1


def test_prepare_uses_pinned_cpus_domains(node):
    pins = "<cputune><vcpupin vcpu='0' cpuset='20'/>" \
           "<vcpupin vcpu='1' cpuset='25'/></cputune>"
    assert node.run(xml(rdt('<rdt:l3 ways="3"/>'), cputune=pins)) == 0
    assert isolated(node, GROUP, 3, domains=(1,))
    assert node.masks(GROUP)[0] == node.masks('')[0]   # follows the default
    assert node.rc().group(GROUP).mode == 'shareable'


def test_prepare_pinned_to_a_cpu_of_unknown_domain_takes_every_domain(node):
    # CPU 45 has no cache/index3 in sysfs (offline, say): it may come online
    # in either domain, so the VM gets ways in both.
    pins = "<cputune><vcpupin vcpu='0' cpuset='20'/>" \
           "<vcpupin vcpu='1' cpuset='21,45'/></cputune>"
    assert node.run(xml(rdt('<rdt:l3 ways="3"/>'), cputune=pins)) == 0
    assert isolated(node, GROUP, 3, domains=(0, 1))


def test_prepare_vcpu_cpuset_domain(node):
    data = xml(rdt('<rdt:l3 ways="2"/>'), vcpu="<vcpu cpuset='0-3'>2</vcpu>")
    assert node.run(data) == 0
    assert isolated(node, GROUP, 2, domains=(0,))
    assert node.masks(GROUP)[1] == node.masks('')[1]


def test_prepare_is_idempotent_and_resizes(node):
    assert node.run(L3_3) == 0
    assert node.run(L3_3) == 0
    assert node.run(xml(rdt('<rdt:l3 ways="1"/>'))) == 0
    assert isolated(node, GROUP, 1)


def test_prepare_by_size_takes_the_ways_that_hold_it(node):
    """<rdt:l3 kib>: the fewest of this node's ways (2560 KiB) holding it."""
    assert node.run(xml(rdt('<rdt:l3 kib="7680"/>'))) == 0
    assert isolated(node, GROUP, 3)
    assert 'reserved 7680 KiB of L3 (from the <rdt:rdt> annotation): group ' \
        '%s L3:0=' % GROUP in node.log.read_text()
    assert node.run(xml(rdt('<rdt:l3 kib="7681"/>'))) == 0
    assert isolated(node, GROUP, 4)


@pytest.mark.parametrize('body, message', [
    ('<rdt:l3 ways="0"/>', "<rdt:l3 ways>: '0' must be from 1 to 64"),
    ('<rdt:l3 kib="28161"/>', "<rdt:l3 kib>: '28161' is more than this "
     "host's L3 cache: 11 ways of 2560 KiB (28160 KiB)"),
    ('<rdt:l3 kib="20481"/>', 'needs 9 ways on cache domain 0, but only 7'),
    ('<rdt:l3 ways="2" kib="5120"/>', '<rdt:l3 ways> and <rdt:l3 kib> '
     'exclude each other: ask for a number of ways or for a size, not both'),
    ('<rdt:l3 ways="abc"/>', "<rdt:l3 ways>: 'abc' is not a whole number"),
    ('<rdt:l3 ways="1"/><rdt:pool name="noisy"/>', 'exclude each other'),
    ('<rdt:pool name="bogus"/>', "<rdt:pool name>: 'bogus' names no pool "
     'configured on this host'),
    ('<rdt:l3 ways="1" foo="bar"/>', 'unknown attribute "foo"'),
    ('<rdt:l3 ways="12"/>', "<rdt:l3 ways>: '12' is more than the 11 ways of "
     "this host's L3 cache"),
    ('<rdt:l3 ways="8"/>', 'needs 8 ways on cache domain 0, but only 7'),
])
def test_prepare_refusals(node, capsys, body, message):
    assert node.run(xml(rdt(body))) == 1
    line = one_line(capsys.readouterr())
    # What to fix first (libvirt puts ~400 characters before the line).
    fix = ('free cache ways on this host (stop a VM), or ask for fewer'
           if 'needs' in message else 'fix the domain XML')
    assert line.startswith("ovs-rdt: refusing to start domain 'vm1': %s: "
                           % fix), line
    assert message in line
    assert GROUP not in node.groups()
    assert message in node.log.read_text()


REMEDIES = [
    # (xml, extra config, what leads the line after the domain)
    (xml('<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:2"><rdt:l3 ways="2"/>'
         '</rdt:rdt>'), '', 'fix the domain XML: <rdt:rdt> is in the '
     'namespace "urn:ovs-rdt:libvirt:2", which ovs-rdt does not know'),
    (xml(nova({'rdt:l3_ways': '0'})), '', "fix the extra specs of "
     "flavor 'm1.nfv': flavor m1.nfv extra spec rdt:l3_ways: '0' must be"),
    (xml(nova({'rdt:l3_ways': '0'}) + rdt('<rdt:l3 ways="x"/>')), '',
     "fix the domain XML: <rdt:l3 ways>: 'x'"),
    (xml(nova()), '[flavors]\nm1.nfv = rdt:l3_ways\n',
     'fix the ovs-rdt configuration: [flavors] m1.nfv = rdt:l3_ways: '),
    (xml(rdt('<rdt:l3 ways="8"/>')), '', 'free cache ways on this host '
     '(stop a VM), or ask for fewer: ovsrdt-vm-%s needs 8 ways' % UUID),
]


@pytest.mark.parametrize('data, extra, lead', REMEDIES)
def test_refusal_leads_with_what_to_fix(node, capsys, data, extra, lead):
    """libvirt shows the line after ~400 characters of its own (the
    hook's whole environment): what to fix comes first.
    """
    node.configure(extra)
    assert node.run(data) == 1
    line = one_line(capsys.readouterr())
    assert line.startswith("ovs-rdt: refusing to start domain 'vm1': "
                           + lead), line
    # The log has it too, after the event.
    assert "domain 'vm1' prepare begin: " + lead in node.log.read_text()
    assert GROUP not in node.groups()


@pytest.mark.parametrize('op, what', sorted(hook.REFUSING.items()))
def test_mistyped_namespace_refused_at_every_strict_event(node, capsys, op,
                                                          what):
    data = xml('<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt"><rdt:l3 ways="2"/>'
               '</rdt:rdt>')
    assert node.run(data, op) == 1
    assert one_line(capsys.readouterr()).startswith(
        "ovs-rdt: %s domain 'vm1': fix the domain XML: <rdt:rdt> is in the "
        'namespace "urn:ovs-rdt:libvirt"' % what)
    assert node.run(data, 'reconnect') == 0     # never kills a running VM


def test_wrapper_fallback_words_refusals_as_the_hook_does():
    text = install.shipped_wrapper()
    for op, what in hook.REFUSING.items():
        assert "%s) what='%s' ;;" % (op, what) in text


def test_bad_uuid_refused_when_it_is_used(node, capsys):
    assert node.run(xml(rdt('<rdt:l3 ways="1"/>'), uuid='../x')) == 1
    assert "<uuid>: '../x' is not a UUID" in one_line(capsys.readouterr())
    assert node.run(xml(uuid='../x')) == 0      # asks for nothing


def test_refusal_names_the_domain_safely(node, capsys):
    assert node.run(xml(rdt('<rdt:l3 ways="0"/>')), name='a\nb') == 1
    assert "domain 'a\\x0ab'" in one_line(capsys.readouterr())


def test_on_failure_warn_starts_unmanaged(node, capsys):
    node.configure(libvirt={'on_failure': 'warn'})
    assert node.run(xml(rdt('<rdt:l3 ways="8"/>'))) == 0
    err = capsys.readouterr().err
    assert 'runs without a cache allocation' in err
    assert GROUP not in node.groups()
    assert '[libvirt] on_failure = warn' in node.log.read_text()


def test_mb_percent(node):
    data = xml(rdt('<rdt:l3 ways="2"/><rdt:mb percent="45"/>'))
    assert node.run(data) == 0
    assert node.rc().group(GROUP).mb == {0: 50, 1: 50}


def test_mb_below_platform_minimum_refused(node, capsys):
    data = xml(rdt('<rdt:l3 ways="2"/><rdt:mb percent="5"/>'))
    assert node.run(data) == 1
    assert "<rdt:mb percent>: '5' is below this host's minimum memory " \
        'bandwidth, 10%' in one_line(capsys.readouterr())


def test_nova_extra_specs_and_flavors(node):
    assert node.run(xml(nova({'rdt:l3_ways': '2'}))) == 0
    assert isolated(node, GROUP, 2)
    node.configure('[flavors]\nm1.big = rdt:l3_ways=4\n')
    assert node.run(xml(nova(flavor='m1.big'), uuid=UUID2)) == 0
    assert isolated(node, 'ovsrdt-vm-' + UUID2, 4)


def test_vm_asking_nothing_never_reads_config(node):
    node.config.write_text('[resctrl\nbroken')
    for op, subop in hook.EVENTS:
        assert node.run(xml(), op, subop) == 0


def test_empty_annotation_never_reads_config(node):
    # <rdt:rdt/> says "nothing", even over the flavor's extra specs.
    node.config.write_text('[resctrl\nbroken')
    data = xml(rdt('') + nova({'rdt:l3_ways': '2'}))
    for op, subop in hook.EVENTS:
        assert node.run(data, op, subop) == 0


def test_flavor_lookup_with_broken_config_does_not_refuse(node, capsys):
    node.config.write_text('[resctrl\nbroken')
    assert node.run(xml(nova())) == 0
    node.config.write_text('[libvirt]\non_failure = sometimes\n')
    assert node.run(xml(nova({'rdt:l3_ways': '2'}))) == 1
    assert "[libvirt] on_failure: 'sometimes'" in capsys.readouterr().err


def test_refusal_for_a_broken_config_reaches_its_log_file(node, capsys):
    """Issue 51 item 7: without syslog, a refusal the configuration caused
    reached no log file: the log file it names (as far as it reads) gets it.
    """
    node.configure(extra='[pool:noisy]\nl3_way = 2\n')
    assert node.run(xml(rdt('<rdt:l3 ways="2"/>'))) == 1
    err = one_line(capsys.readouterr())
    log = node.log.read_text()
    assert "unknown option 'l3_way' in [pool:noisy]" in err
    assert 'ERROR' in log and "unknown option 'l3_way' in [pool:noisy]" in log
    assert 'fix the ovs-rdt configuration' in log


# -- pools --------------------------------------------------------------------
def test_pool_vm_creates_pool_and_removes_stale_group(node):
    assert node.run(L3_3) == 0
    assert node.run(xml(rdt('<rdt:pool name="noisy"/>'))) == 0
    assert 'ovsrdt-pool-noisy' in node.groups()
    assert GROUP not in node.groups()
    assert node.rc().group('ovsrdt-pool-noisy').l3[0].count == 2


def test_pool_vm_release_leaves_pool(node):
    pool = xml(rdt('<rdt:pool name="noisy"/>'))
    assert node.run(pool) == 0
    assert node.run(pool, 'release', 'end') == 0
    assert 'ovsrdt-pool-noisy' in node.groups()


# -- release ------------------------------------------------------------------
def test_release_removes_group_and_frees_ways(node):
    assert node.run(L3_3) == 0
    assert node.rc().group('').l3[0].count == 11 - 2 - 3     # pool noisy: 2
    # `stopped end` is not an event of ours (the wrapper ends it in the
    # shell); `release end` follows it in the same libvirt call.
    assert node.run(L3_3, 'stopped', 'end') == 0
    assert GROUP in node.groups()
    assert node.run(L3_3, 'release', 'end') == 0
    assert GROUP not in node.groups()
    assert node.rc().group('').l3[0].count == 11 - 2
    assert node.run(L3_3, 'release', 'end') == 0        # idempotent
    assert node.rc().group('').l3[0].count == 11 - 2


def test_release_even_with_a_now_invalid_annotation(node):
    assert node.run(L3_3) == 0
    assert node.run(xml(rdt('<rdt:l3 ways="0"/>')), 'release', 'end') == 0
    assert GROUP not in node.groups()


def test_release_after_the_annotation_was_dropped_live(node):
    # `virsh metadata --live --remove`: the XML of stopped/release no longer
    # asks for anything, but the VM still holds its group.
    assert node.run(L3_3) == 0
    assert node.run(xml(), 'release', 'end') == 0
    assert GROUP not in node.groups()
    assert node.rc().group('').l3[0].count == 11 - 2
    assert 'release end: removed group %s' % GROUP in node.log.read_text()


def test_release_never_fails(node, capsys):
    assert node.run(b'<domain>', 'release', 'end') == 0
    node.configure(resctrl={'root': '/nonexistent'})
    assert node.run(L3_3, 'release', 'end') == 0
    assert capsys.readouterr().out == ''


# -- started / reconnect ---------------------------------------------------
def test_started_moves_vcpu_and_emulator_threads(node, qemu):
    assert node.run(L3_3) == 0
    assert node.run(L3_3, 'started') == 0
    assert node.tasks(GROUP) == sorted(qemu.tids)
    log = node.log.read_text()
    assert 'moved vCPU threads %s and %d other threads of QEMU %d' % (
        ','.join(map(str, qemu.vcpus)), len(qemu.tids) - 2, qemu.pid) in log


def test_started_vcpus_only(node, qemu):
    node.configure(libvirt={'include_emulator_threads': 'false',
                            'qemu_run_dir': node.run_dir})
    assert node.run(L3_3) == 0
    assert node.run(L3_3, 'started') == 0
    assert node.tasks(GROUP) == qemu.vcpus
    assert len(qemu.vcpus) == 2


def test_started_pool(node, qemu):
    pool = xml(rdt('<rdt:pool name="noisy"/>'))
    assert node.run(pool) == 0
    assert node.run(pool, 'started') == 0
    assert set(qemu.vcpus) <= set(node.tasks('ovsrdt-pool-noisy'))


def test_started_recreates_a_missing_group(node, qemu):
    assert node.run(L3_3, 'started') == 0
    assert node.tasks(GROUP) == sorted(qemu.tids)


@pytest.mark.parametrize('name, pidfile', [
    # libvirt keeps the name as written (" vm 1 ") and escapes it for XML
    # in its pidfile's name (virPidFileBuildPath, libvirt 9.0 here).
    (' vm 1 ', ' vm 1 .pid'),
    ("vm '1' \u00e9 <&>\"", 'vm &apos;1&apos; \u00e9 &lt;&amp;&gt;&quot;.pid'),
    ("vm '1'", "vm '1'.pid"),                         # older libvirt
])
def test_started_finds_the_pidfile_of_an_odd_name(
        node, qemu, name, pidfile):
    os.rename(os.path.join(node.run_dir, 'vm1.pid'),
              os.path.join(node.run_dir, pidfile))
    data = xml(rdt('<rdt:l3 ways="3"/>'),
               name=name.replace('&', '&amp;').replace('<', '&lt;'))
    assert node.run(data, 'started', name=name) == 0
    assert node.tasks(GROUP) == sorted(qemu.tids)


def test_pidfile_names():
    assert guest.pidfiles('/r', 'a\'b\x01\tc') == [
        '/r/a&apos;b\tc.pid', "/r/a'b\x01\tc.pid"]
    assert guest.pidfiles('/r', 'vm1') == ['/r/vm1.pid']


def test_started_failure_with_warn_gives_the_ways_back(node, capsys):
    # The VM runs unmanaged: what prepare reserved must not stay held.
    node.configure(libvirt={'on_failure': 'warn',
                            'qemu_run_dir': '/nonexistent'})
    assert node.run(L3_3) == 0
    assert node.run(L3_3, 'started') == 0
    assert GROUP not in node.groups()
    assert node.rc().group('').l3[0].count == 11 - 2      # pool noisy: 2
    assert 'runs without a cache allocation' in capsys.readouterr().err
    assert 'removed group %s: the VM runs unmanaged' % GROUP in \
        node.log.read_text()


def test_started_refuses_wrong_process(node, qemu, capsys):
    with open(os.path.join(node.run_dir, 'vm1.pid'), 'w') as fh:
        fh.write('%d' % os.getpid())
    assert node.run(L3_3, 'started') == 1
    assert 'is not the QEMU of domain uuid %s' % UUID in \
        one_line(capsys.readouterr())
    assert node.tasks(GROUP) == []


def test_started_refuses_other_uuid(node, qemu, capsys):
    assert node.run(xml(rdt('<rdt:l3 ways="1"/>'), uuid=UUID2),
                    'started') == 1
    assert 'is not the QEMU' in one_line(capsys.readouterr())


def test_reconnect_readopts_and_never_fails(node, qemu, capsys):
    assert node.run(L3_3, 'reconnect') == 0
    assert node.tasks(GROUP) == sorted(qemu.tids)
    os.unlink(os.path.join(node.run_dir, 'vm1.pid'))
    assert node.run(L3_3, 'reconnect') == 0
    assert node.run(xml(rdt('<rdt:l3 ways="0"/>')), 'reconnect') == 0
    assert node.run(xml(rdt('<rdt:l3 ways="30"/>')), 'reconnect') == 0
    assert capsys.readouterr().out == ''
    assert 'no running QEMU for the domain' in node.log.read_text()


# -- migrate / restore ---------------------------------------------------------
@pytest.mark.parametrize('op', ['migrate', 'restore'])
def test_capacity_check_only(node, capsys, op):
    assert node.run(L3_3, op) == 0
    assert GROUP not in node.groups()
    assert node.run(xml(rdt('<rdt:l3 ways="8"/>')), op) == 1
    line = one_line(capsys.readouterr())
    assert 'needs 8 ways on cache domain 0' in line
    assert node.run(xml(rdt('<rdt:pool name="noisy"/>')), op) == 0
    assert 'ovsrdt-pool-noisy' not in node.groups()


def test_check_of_a_pool_vm_is_prepares(node, capsys):
    """One rule for a pool guest (GuestCache._join_pool): when the pool's
    group cannot be made, an incoming migration is refused with the words
    of prepare; a dedicated group left over is planned away, not written.
    """
    node.config.write_text(node.config.read_text().replace(
        'l3_ways = 2', 'l3_ways = 10'))           # 2 + 10 > 11 ways
    pool = xml(rdt('<rdt:pool name="noisy"/>'))
    said = []
    for op in ('migrate', 'prepare'):
        assert node.run(pool, op) == 1
        said.append(one_line(capsys.readouterr()).split("'vm1': ", 1)[1])
    assert said[0] == said[1]
    assert 'the group ovsrdt-pool-noisy of pool noisy was not created: ' \
        'ovsrdt-pool-noisy needs 10 ways' in said[0]
    node.configure()
    assert node.run(L3_3) == 0
    assert node.run(pool, 'migrate') == 0
    assert GROUP in node.groups()


# -- the command line and robustness ---------------------------------------
def test_unknown_events_ignored(node):
    for op, subop in (('start', 'begin'), ('attach', 'begin'), ('x', 'y')):
        assert node.run(b'garbage', op, subop) == 0


def test_usage(capsys):
    assert hook.run([], b'') == 2
    assert hook.run(['d', 'prepare', 'begin'], b'') == 2
    assert 'usage: ovs-rdt-hook' in capsys.readouterr().err
    assert hook.run(['--config-file', 'd', 'prepare', 'begin', '-'],
                    b'') == 2
    assert hook.run(['--config-other=/x', 'd', 'prepare', 'begin', '-'],
                    b'') == 2
    assert 'usage: ovs-rdt-hook' in capsys.readouterr().err
    assert hook.parse_args(['--config-file=/x', '--config-dir', '/d',
                            '--config-file', '/y', 'd', 'prepare',
                            'begin', '-']) == \
        (['/x', '/y'], ['/d'], ['d', 'prepare', 'begin', '-'])


@pytest.mark.parametrize('name', ['-db', '--config-file=x', '--config-dir',
                                  '--', 'prepare'])
def test_libvirt_arguments_are_the_last_four(node, name):
    """A domain named like an option is a domain (its events are not a
    usage error, nor shifted into options and ignored).
    """
    assert hook.parse_args(['--config-file', '/c', name, 'prepare', 'begin',
                            '-']) == (['/c'], [], [name, 'prepare', 'begin',
                                                   '-'])
    assert node.run(xml(rdt('<rdt:l3 ways="2"/>'), name=name)) == 0
    assert node.masks(GROUP) == {0: '180', 1: '180'}
    assert node.run(xml(name=name), 'release', 'end') == 0
    assert GROUP not in node.groups()


def test_internal_error_is_one_line_without_traceback(node, capsys,
                                                      monkeypatch):
    def boom(self, dom):
        raise KeyError('surprise')
    monkeypatch.setattr(hook.Hook, 'prepare', boom)
    assert node.run(L3_3) == 1
    line = one_line(capsys.readouterr())
    assert "internal error: KeyError: 'surprise'" in line
    assert 'Traceback' in node.log.read_text()


def test_main_reads_stdin_and_keeps_stdout_clean(node, monkeypatch, capsys):
    class Stdin:
        buffer = io.BytesIO(L3_3)
    monkeypatch.setattr(sys, 'stdin', Stdin)
    assert hook.main(['--config-file', str(node.config), 'vm1', 'prepare',
                      'begin', '-']) == 0
    assert GROUP in node.groups()
    assert capsys.readouterr().out == ''


def test_read_stdin_drains_but_bounds(node, capsys):
    stream = io.BytesIO(b'x' * (hook.MAX_STDIN + 200000))
    assert hook.read_stdin(stream) is None
    assert stream.read() == b''          # drained: libvirt sees no EPIPE
    assert hook.read_stdin(io.BytesIO(L3_3)) == L3_3
    assert node.run(None) == 1
    assert one_line(capsys.readouterr()).endswith(
        'the domain XML on standard input is larger than 4 MiB')
    assert node.run(None, 'release', 'end') == 0


def test_concurrent_prepares_share_nothing(node, capsys):
    # 11 ways: 2 for the system, 2 for pool noisy, 3 x 2 for the VMs.
    uuids = ['%08d-0000-0000-0000-000000000000' % i for i in range(3)]
    results = []

    def start(uuid):
        results.append(node.run(xml(rdt('<rdt:l3 ways="2"/>'), uuid=uuid)))
    threads = [threading.Thread(target=start, args=(u,)) for u in uuids]
    for thr in threads:
        thr.start()
    for thr in threads:
        thr.join()
    assert results == [0] * 3, capsys.readouterr().err
    held = [int(node.masks('ovsrdt-vm-' + u)[0], 16) for u in uuids]
    assert sum(bin(m).count('1') for m in held) == 6
    combined = 0
    for mask in held:
        assert not mask & combined
        combined |= mask


# -- install -------------------------------------------------------------------
def test_hook_path():
    assert install.hook_path(None) == '/etc/libvirt/hooks/qemu.d/50-ovs-rdt'
    assert install.hook_path('/x/hooks') == '/x/hooks/qemu.d/50-ovs-rdt'
    assert install.hook_path('/x/qemu.d/') == '/x/qemu.d/50-ovs-rdt'


def test_wrapper_runs_the_hook(node, tmp_path):
    path = str(tmp_path / 'hooks' / 'qemu.d' / '50-ovs-rdt')
    install.install(path, str(node.config))
    assert os.stat(path).st_mode & 0o777 == 0o755
    text = open(path).read()
    assert text.startswith('#!/bin/sh\n' + install.MARKER)
    assert 'python=%s\n' % os.path.abspath(sys.executable) in text
    assert str(node.config) in text
    # No resctrl needed: the VM asks for nothing.
    res = subprocess.run([path, 'vm1', 'prepare', 'begin', '-'], input=xml(),
                         capture_output=True, env={})
    assert (res.returncode, res.stdout, res.stderr) == (0, b'', b'')
    res = subprocess.run([path, 'vm1', 'prepare', 'begin', '-'],
                         input=xml(rdt('<rdt:l3 ways="0"/>')),
                         capture_output=True, env={})
    assert res.returncode == 1 and res.stdout == b''
    assert res.stderr.decode() == ("ovs-rdt: refusing to start domain 'vm1': "
                                   'fix the domain XML: '
                                   "<rdt:l3 ways>: '0' must be from 1 to 64"
                                   '\n')


def test_wrapper_quotes_odd_paths(node, tmp_path):
    odd = tmp_path / "it's a \"dir\" $HOME `x`\nnext"
    odd.mkdir()
    config = odd / 'ovs-rdt.conf'
    config.write_text(node.config.read_text())
    os.symlink(sys.executable, str(odd / 'py thon'))
    text = install.wrapper_text(str(config), python=str(odd / 'py thon'))
    assert text.startswith('#!/bin/sh\n')
    path = tmp_path / 'w'
    path.write_text(text)
    path.chmod(0o755)
    res = subprocess.run([str(path), 'vm1', 'prepare', 'begin', '-'],
                         input=xml(rdt('<rdt:l3 ways="0"/>')),
                         capture_output=True, env={})
    assert res.returncode == 1, res.stderr
    assert b"<rdt:l3 ways>: '0' must be from 1 to 64" in res.stderr
    assert "'0' must be from 1 to 64" in node.log.read_text()


def test_install_refuses_foreign_files_and_uninstalls(tmp_path):
    path = str(tmp_path / 'qemu.d' / '50-ovs-rdt')
    os.makedirs(os.path.dirname(path))
    with open(path, 'w') as fh:
        fh.write('#!/bin/sh\nexit 0\n')
    with pytest.raises(Exception, match='not an ovs-rdt hook wrapper'):
        install.install(path, '/etc/ovs-rdt/ovs-rdt.conf')
    with pytest.raises(Exception, match='not an ovs-rdt hook wrapper'):
        install.uninstall(path)
    os.unlink(path)
    install.install(path, '/etc/ovs-rdt/ovs-rdt.conf')
    install.install(path, '/etc/ovs-rdt/other.conf')     # replaces ours
    assert 'other.conf' in open(path).read()
    assert install.uninstall(path) is True
    assert install.uninstall(path) is False


def test_install_leaves_a_packages_link_alone(tmp_path):
    """The Debian package's hook is a link it owns (and removes with
    itself): install-hook neither replaces it with a file of its own,
    which the package would overwrite at its next upgrade, nor removes it.
    """
    program = tmp_path / 'libexec' / 'qemu-hook'
    program.parent.mkdir()
    program.write_text(install.wrapper_text('/etc/ovs-rdt/ovs-rdt.conf'))
    path = tmp_path / 'qemu.d' / '50-ovs-rdt'
    path.parent.mkdir()
    path.symlink_to(program)
    for action in (lambda: install.install(str(path), '/etc/other.conf'),
                   lambda: install.uninstall(str(path))):
        with pytest.raises(Exception, match='is a symbolic link to %s, a '
                           'package.s hook' % program):
            action()
        assert os.readlink(path) == str(program)
    assert '/etc/other.conf' not in program.read_text()


def test_run_prints_restart_hint(node, tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    install.add_arguments(parser)
    args = parser.parse_args(['--hooks-dir', str(tmp_path / 'hooks')])

    settings = conf.load(str(node.config))
    assert install.run(settings, args) == 0
    out = capsys.readouterr().out
    assert 'installed %s' % (tmp_path / 'hooks' / 'qemu.d' / '50-ovs-rdt') in out
    assert 'restart libvirtd' in out
    # Replaced in place: no restart (issue 51 trial 11).
    assert install.run(settings, args) == 0
    out = capsys.readouterr().out
    assert 'replaced %s' % (tmp_path / 'hooks' / 'qemu.d' / '50-ovs-rdt') in out
    assert 'restart libvirtd' not in out
    assert 'libvirtd runs it from the next guest event' in out
    args = parser.parse_args(['--hooks-dir', str(tmp_path / 'hooks'),
                              '--uninstall'])
    assert install.run(settings, args) == 0
    assert 'removed' in capsys.readouterr().out
    assert not os.path.exists(tmp_path / 'hooks' / 'qemu.d' / '50-ovs-rdt')


def test_uninstall_warns_about_guests_still_managed(node, qemu, tmp_path,
                                                    capsys):
    assert node.run(L3_3) == 0
    assert node.run(L3_3, 'started') == 0
    hooks = tmp_path / 'hooks'
    settings = conf.load(str(node.config))
    args = argparse.Namespace(hooks_dir=str(hooks), uninstall=False)
    assert install.run(settings, args) == 0
    args.uninstall = True
    assert install.run(settings, args) == 0
    err = capsys.readouterr().err
    assert "warning: 1 guest(s) still run in ovs-rdt groups (vm1)" in err
    assert not (hooks / 'qemu.d' / '50-ovs-rdt').exists()


_FAILING_PLAN = '''
import sys
from libvirt_hooks import hook
hook.Log.use_syslog = False
sys.exit(hook.run(['--config-file', sys.argv[1], 'vm1', 'prepare', 'begin',
                   '-'], sys.stdin.buffer.read()))
'''


def test_core_warnings_reach_the_log_not_stderr(tmp_path):
    # Found by tests/stress: when a plan failed half-way, the manager's
    # "undoing N applied steps" warning imported logging after the hook had
    # bridged it, so Python's last resort printed it on stderr (libvirt
    # showed the operator three lines) and the hook's log never had it.
    root, sysfs = tmp_path / 'r', tmp_path / 'cpu'
    make_tree(str(root), sysfs=str(sysfs))
    (root / ('ovsrdt-vm-' + UUID)).write_text('')   # mkdir "works", then not
    config = tmp_path / 'c.conf'
    log = tmp_path / 'hook.log'
    config.write_text('[DEFAULT]\nlog_file = %s\n[resctrl]\nroot = %s\n'
                      'sysfs_cpu_root = %s\n' % (log, root, sysfs))
    proc = subprocess.run([sys.executable, '-c', _FAILING_PLAN, str(config)],
                          input=L3_3, capture_output=True,
                          cwd=os.path.dirname(os.path.dirname(
                              os.path.dirname(os.path.abspath(__file__)))))
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith('ovs-rdt: refusing to start'), err
    assert 'undoing' in log.read_text()


def test_allocating_and_releasing_import_nothing_heavy(tmp_path):
    """prepare and release, the hook's slow events, import no typing, re
    or the dynamic policy (8 ms at every VM start) while it is off; nor
    libvirt-python or the agent (a hook must not call libvirtd back).
    """
    root, sysfs = tmp_path / 'resctrl', tmp_path / 'cpu'
    make_tree(str(root), sysfs=str(sysfs))
    config = tmp_path / 'ovs-rdt.conf'
    config.write_text('[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n'
                      '[allocation]\nsystem_min_ways = 2\n' % (root, sysfs))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    xml_text = xml(rdt('<rdt:l3 ways="2"/>'))
    code = '\n'.join([
        'import sys; sys.path.insert(0, %r)' % repo,
        'from libvirt_hooks import hook',
        'from tests.unit.fakes import FakeKernelTree',
        'hook.Log.use_syslog = False',
        'from ovs_rdt.guest import GuestCache',
        'GuestCache.make_resctrl = lambda self: FakeKernelTree(',
        '    self.settings.resctrl.root, self.settings.resctrl.sysfs_cpu_root)',
        'for op, sub in (("prepare", "begin"), ("release", "end")):',
        '    rc = hook.run(["--config-file", %r, "vm1", op, sub, "-"], %r)'
        % (str(config), xml_text),
        '    assert rc == 0, (op, rc)',
        'print(sorted(m for m in sys.modules if m.split(".")[0] in ('
        '"typing", "re", "logging", "configparser", "libvirt") '
        'or m == "ovs_rdt.core.policy" or m.startswith("ovs_rdt.agent")))',
        'print(sorted(n for n in __import__("os").listdir(%r) '
        'if n.startswith("ovsrdt-")))' % str(root)])
    out = subprocess.run([sys.executable, '-I', '-S', '-c', code],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    heavy, left = out.stdout.splitlines()
    assert heavy == '[]'
    assert left == '[]'          # allocated, then released


@pytest.mark.timeout(60)      # (before: a FIFO in conf.d blocked for good)
def test_release_needs_no_configuration(node, capsys):
    """A typo in conf.d, then ``virsh destroy``: the VM's group goes all
    the same (its UUID under the root it was made in), alone, and the log
    says why the configuration was not needed (issue 47).
    """
    assert node.run(L3_3) == 0
    before = node.masks('')
    confd = node.config.parent / 'conf.d'
    confd.mkdir()
    (confd / '50-typo.conf').write_text('[pool:noisy]\nl3_ways = tw0\n')
    run = ['--config-file', str(node.config), '--config-dir', str(confd)]
    assert hook.run(run + ['vm1', 'prepare', 'begin', '-'], L3_3) == 1
    assert hook.run(run + ['vm1', 'release', 'end', '-'], L3_3) == 0
    assert GROUP not in node.groups()
    assert node.masks('') == before        # alone: nothing else written
    log = node.log.read_text()
    assert ("release end: removed group %s alone, every other group as it "
            "is: the configuration does not read (config file %s line 2: "
            "[pool:noisy] l3_ways: 'tw0' is not a whole number"
            % (GROUP, confd / '50-typo.conf')) in log, log
    assert ("and releasing needs none: the group is the domain's UUID under "
            "[resctrl] root %s;" % node.root) in log
    # A FIFO in conf.d (a reader of it would block for good): refused by
    # name at prepare, and releasing does not wait on it either.
    (confd / '50-typo.conf').unlink()
    assert hook.run(run + ['vm1', 'prepare', 'begin', '-'], L3_3) == 0
    os.mkfifo(str(confd / '60-fifo.conf'))
    capsys.readouterr()
    assert hook.run(run + ['vm1', 'prepare', 'begin', '-'], L3_3) == 1
    assert 'config file %s is not a regular file' % (
        confd / '60-fifo.conf') in capsys.readouterr().err
    assert hook.run(run + ['vm1', 'release', 'end', '-'], L3_3) == 0
    assert GROUP not in node.groups()
