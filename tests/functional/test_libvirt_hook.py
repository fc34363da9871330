"""The libvirt hook end to end: a real libvirtd, real KVM guests, and the
resctrl emulator (xeon-e7-8890-v4: 4 cache domains of 20 ways, 16 CLOSIDs)
as ``[resctrl] root``.

Configuration of every test (unless it says otherwise): the default group
keeps 2 ways, pool ``noisy`` holds 2, so 16 ways per domain are free for
VMs.  CPUs 0 and 1 (all this host has) are on cache domain 0.
"""
from __future__ import annotations

import os
import threading
from typing import Iterator

import pytest

from ovs_rdt.agent import orphans
from ovs_rdt import conf
from ovs_rdt.core.model import ROOT
from ovs_rdt.manager import CacheManager
from ovs_rdt import procfs
from ovs_rdt.resctrl import Resctrl
from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.fixtures.libvirt import Guest, LibvirtTestbed, wait_for

PROFILE = 'xeon-e7-8890-v4'
WAYS = 20
DOMAINS = (0, 1, 2, 3)
POOL = 'ovsrdt-pool-noisy'
NOVA_NS = 'http://openstack.org/xmlns/libvirt/nova/1.1'


def rdt(body: str) -> str:
    return '<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">%s</rdt:rdt>' % body


def nova(specs: dict[str, str], flavor: str = 'm1.nfv') -> str:
    return ('<nova:instance xmlns:nova="%s"><nova:name>inst</nova:name>'
            '<nova:flavor name="%s"><nova:vcpus>2</nova:vcpus><nova:extraSpecs>'
            '%s</nova:extraSpecs></nova:flavor></nova:instance>'
            % (NOVA_NS, flavor, ''.join(
                '<nova:extraSpec name="%s">%s</nova:extraSpec>' % kv
                for kv in specs.items())))


class Env:
    """The testbed, the mounted emulator and reads of its state."""

    def __init__(self, testbed: LibvirtTestbed, emu: EmulatorFixture) -> None:
        self.tb = testbed
        self.emu = emu
        self.rc = Resctrl(emu.root, emu.sysfs)

    def configure(self, **kwargs: object) -> None:
        self.tb.configure(self.emu.root, self.emu.sysfs, **kwargs)

    def free(self) -> dict[int, int]:
        """Ways a new VM could still get, per cache domain."""
        settings = conf.load(self.tb.config)
        return CacheManager(Resctrl(self.emu.root, self.emu.sysfs),
                            settings).preview().free

    def groups(self) -> list[str]:
        return self.rc.group_names()

    def vm_groups(self) -> list[str]:
        return [g for g in self.groups() if g.startswith('ovsrdt-vm-')]

    def tasks(self, group: str) -> set[int]:
        return set(self.rc.tasks(group))

    def assert_isolated(self, group: str, ways: int,
                        domains: tuple[int, ...] = DOMAINS) -> None:
        """``ways`` contiguous ways on ``domains`` that no other group has."""
        groups = {g.name: g for g in self.rc.groups()}
        mine = groups[group].l3
        for dom in domains:
            mask = mine[dom]
            assert mask.count == ways and mask.is_contiguous(), (dom, mask)
            for name, other in groups.items():
                if name != group:
                    assert not mask.overlaps(other.l3[dom]), \
                        '%s %s overlaps %s %s on domain %d' % (
                            group, mask, name or '/', other.l3[dom], dom)


@pytest.fixture
def env(libvirt_testbed: LibvirtTestbed,
        testbed_emulator: EmulatorFixture) -> Iterator[Env]:
    env = Env(libvirt_testbed, testbed_emulator)
    env.configure()
    try:
        yield env
    finally:
        libvirt_testbed.remove_guests()
    # Whatever a test did, its guests' groups are gone with them.
    assert env.vm_groups() == []


def start_fails(env: Env, guest: Guest) -> str:
    res = env.tb.start(guest, check=False)
    assert res.returncode != 0, 'guest %s started' % guest.name
    assert env.tb.state(guest) == 'shut off'
    assert guest.group not in env.groups()
    return res.stderr


# -- a dedicated CLOS ----------------------------------------------------------
def test_dedicated_guest_gets_isolated_ways_and_its_threads(env: Env) -> None:
    free = env.free()
    assert free == {d: WAYS - 2 - 2 for d in DOMAINS}
    guest = env.tb.define(rdt('<rdt:l3 ways="3"/>'))
    env.tb.start(guest)
    env.assert_isolated(guest.group, 3)
    assert env.rc.group(guest.group).mode == 'exclusive'
    vcpus = env.tb.vcpu_tids(guest)
    assert len(vcpus) == 2
    tasks = env.tasks(guest.group)
    # include_emulator_threads = true (default): every QEMU thread.
    assert vcpus <= tasks
    assert tasks <= set(env.tb.threads(guest))
    assert len(tasks) > len(vcpus)
    assert env.free() == {d: free[d] - 3 for d in DOMAINS}
    env.tb.destroy(guest)
    assert guest.group not in env.groups()
    assert env.free() == free
    assert 'removed group %s' % guest.group in env.tb.hook_log()


def test_running_guests_keep_their_ways_while_others_go(env: Env) -> None:
    """Three guests (by ways, by size, by a flavor's extra spec) run; one
    at a time is killed and started again: the others' masks never change
    (their warm cache stays theirs), and the one back takes free ways.
    """
    # The hook log is the session's: only this test's lines count.
    since = len(env.tb.hook_log())
    guests = [env.tb.define(rdt('<rdt:l3 ways="2"/>')),
              env.tb.define(rdt('<rdt:l3 kib="6000"/>')),      # 2 ways
              env.tb.define(nova({'rdt:l3_ways': '1'}))]
    for guest in guests:
        env.tb.start(guest)

    def masks() -> dict[str, dict[int, int]]:
        return {g.name: {d: m.value for d, m in g.l3.items()}
                for g in env.rc.groups() if g.name.startswith('ovsrdt-vm-')}
    for guest in (guests[1], guests[0], guests[2]):
        before = masks()
        env.tb.destroy(guest)
        after = masks()
        assert set(after) == set(before) - {guest.group}
        assert after == {n: m for n, m in before.items()
                         if n != guest.group}
        env.tb.start(guest)
        again = masks()
        assert {n: m for n, m in again.items() if n != guest.group} == after
        env.assert_isolated(guest.group, 1 if guest is guests[2] else 2)
    assert ' moves ovsrdt-' not in env.tb.hook_log()[since:]


def test_only_vcpu_threads_without_emulator_threads(env: Env) -> None:
    env.configure(include_emulator_threads=False)
    guest = env.tb.define(rdt('<rdt:l3 ways="2"/>'))
    env.tb.start(guest)
    assert env.tasks(guest.group) == env.tb.vcpu_tids(guest)
    assert not env.tb.vcpu_tids(guest) & env.tasks(ROOT)


def test_guest_whose_emulator_is_named_kvm(env: Env) -> None:
    """``<emulator>`` is a symlink named ``kvm`` (as Debian's /usr/bin/kvm).

    QEMU's argv[0] then does not say "qemu": "started" must still know the
    process for the guest's QEMU (by its ``-uuid``, the rule the agent's
    reconciler applies too) and place its vCPU threads.
    """
    guest = env.tb.define(rdt('<rdt:l3 ways="2"/>'),
                          emulator=env.tb.emulator_link('kvm'))
    env.tb.start(guest)
    pid = env.tb.pid(guest)
    assert os.path.basename(procfs.cmdline(pid)[0]) == 'kvm'
    assert procfs.qemu_guest(pid) == (guest.name, guest.uuid)
    assert guest.uuid in orphans.running_vm_uuids()
    vcpus = env.tb.vcpu_tids(guest)
    assert len(vcpus) == 2 and vcpus <= env.tasks(guest.group)
    env.assert_isolated(guest.group, 2)
    assert 'moved vCPU threads' in env.tb.hook_log()


def test_pinned_guest_takes_ways_where_its_vcpus_run(env: Env) -> None:
    guest = env.tb.define(rdt('<rdt:l3 ways="4"/>'), vcpu_attrs=" cpuset='0-1'")
    env.tb.start(guest)
    env.assert_isolated(guest.group, 4, domains=(0,))
    masks = env.rc.group(guest.group).l3
    root = env.rc.group(ROOT).l3
    assert all(masks[d] == root[d] for d in (1, 2, 3))
    assert env.rc.group(guest.group).mode == 'shareable'
    assert env.free() == {0: 12, 1: 16, 2: 16, 3: 16}


def test_nova_extra_specs_guest(env: Env) -> None:
    guest = env.tb.define(nova({'hw:cpu_policy': 'shared',
                                'rdt:l3_ways': '3'}))
    env.tb.start(guest)
    env.assert_isolated(guest.group, 3)
    assert env.tb.vcpu_tids(guest) <= env.tasks(guest.group)
    assert 'from flavor m1.nfv extra specs' in env.tb.hook_log()


def test_flavors_section_fallback(env: Env) -> None:
    env.configure(extra='[flavors]\nm1.old = rdt:l3_ways=2\n')
    guest = env.tb.define(
        '<nova:instance xmlns:nova="%s"><nova:flavor name="m1.old">'
        '<nova:vcpus>2</nova:vcpus></nova:flavor></nova:instance>' % NOVA_NS)
    env.tb.start(guest)
    env.assert_isolated(guest.group, 2)


# -- a shared pool -------------------------------------------------------------
def test_pool_guest_joins_the_pool(env: Env) -> None:
    dedicated = env.tb.define(rdt('<rdt:l3 ways="3"/>'))
    pooled = env.tb.define(rdt('<rdt:pool name="noisy"/>'))
    env.tb.start(dedicated)
    env.tb.start(pooled)
    vcpus = env.tb.vcpu_tids(pooled)
    assert vcpus <= env.tasks(POOL)
    assert not vcpus & env.tasks(dedicated.group)
    assert pooled.group not in env.groups()
    env.assert_isolated(dedicated.group, 3)
    assert env.rc.group(POOL).l3[0].count == 2
    env.tb.destroy(pooled)
    assert POOL in env.groups()
    assert not vcpus & env.tasks(POOL)


# -- refusals --------------------------------------------------------------------
def test_over_asking_guest_fails_to_start(env: Env) -> None:
    free = env.free()
    guest = env.tb.define(rdt('<rdt:l3 ways="17"/>'))
    err = start_fails(env, guest)
    assert ("ovs-rdt: refusing to start domain '%s': free cache ways on this "
            'host (stop a VM), or ask for fewer: %s needs 17 ways on cache '
            'domain 0, but only 16 of 20 are free'
            % (guest.name, guest.group)) in err
    guest = env.tb.define(rdt('<rdt:l3 ways="21"/>'))
    err = start_fails(env, guest)
    assert ("<rdt:l3 ways>: '21' is more than the 20 ways of this host's L3 "
            'cache') in err
    assert env.free() == free


BAD = [
    ('<rdt:l3 ways="0"/>', "<rdt:l3 ways>: '0' must be from 1 to 64"),
    ('<rdt:l3 ways="abc"/>', "<rdt:l3 ways>: 'abc' is not a whole number"),
    ('<rdt:l3 ways="2"/><rdt:pool name="noisy"/>',
     '<rdt:l3 ways> and <rdt:pool name> exclude each other'),
    ('<rdt:pool name="bogus"/>',
     "<rdt:pool name>: 'bogus' names no pool configured on this host "
     '(configured: noisy; see [allocation] pools)'),
    ('<rdt:l3 ways="2" size="3"/>',
     '<rdt:l3 size="3">: unknown attribute "size" (<rdt:l3> takes only '
     '"ways" or "kib")'),
]


@pytest.mark.parametrize('body, message', BAD,
                         ids=['zero', 'abc', 'l3+pool', 'unknown-pool',
                              'unknown-attribute'])
def test_bad_annotation_has_its_own_message(env: Env, body: str,
                                            message: str) -> None:
    guest = env.tb.define(rdt(body))
    err = start_fails(env, guest)
    line = "ovs-rdt: refusing to start domain '%s': fix the domain XML: %s" % (
        guest.name, message)
    assert line in err
    assert 'Traceback' not in err
    others = [m for _b, m in BAD if m != message]
    assert not any(m in err for m in others)


@pytest.mark.parametrize('namespace', ['urn:ovs-rdt:libvirt',
                                       'urn:ovs-rdt:libvirt:2'])
def test_mistyped_namespace_is_refused(env: Env, namespace: str) -> None:
    """A typo in the annotation's namespace: before, libvirt kept it as
    someone else's metadata and the VM ran in the default group, without
    a word.
    """
    before = {g.name: g.l3 for g in env.rc.groups()}
    guest = env.tb.define('<rdt:rdt xmlns:rdt="%s"><rdt:l3 ways="3"/>'
                          '</rdt:rdt>' % namespace)
    err = start_fails(env, guest)
    assert ("ovs-rdt: refusing to start domain '%s': fix the domain XML: "
            '<rdt:rdt> is in the namespace "%s", which ovs-rdt does not '
            'know: its annotation\'s namespace is "urn:ovs-rdt:libvirt:1" '
            '(xmlns:rdt="urn:ovs-rdt:libvirt:1")'
            % (guest.name, namespace)) in err, err
    assert 'Traceback' not in err
    # Nothing is left: no group, no mask changed.
    assert {g.name: g.l3 for g in env.rc.groups()} == before


def test_failure_at_started_stops_the_guest(env: Env) -> None:
    env.configure(qemu_run_dir='/nonexistent')
    guest = env.tb.define(rdt('<rdt:l3 ways="2"/>'))
    err = start_fails(env, guest)
    assert ("ovs-rdt: stopping domain '%s': check libvirt and resctrl on this "
            'host: no running QEMU for the domain' % guest.name) in err
    assert 'release end: removed group %s' % guest.group in env.tb.hook_log()


def test_on_failure_warn_starts_the_guest_unmanaged(env: Env) -> None:
    env.configure(on_failure='warn')
    guest = env.tb.define(rdt('<rdt:l3 ways="17"/>'))
    env.tb.start(guest)
    assert env.tb.state(guest) == 'running'
    assert guest.group not in env.groups()
    assert env.tb.vcpu_tids(guest) <= env.tasks(ROOT)
    assert 'starting it without a cache allocation' in env.tb.hook_log()


# -- libvirtd restarts, save/restore -------------------------------------------
def test_libvirtd_restart_keeps_guests_in_their_groups(env: Env) -> None:
    dedicated = env.tb.define(rdt('<rdt:l3 ways="3"/>'))
    pooled = env.tb.define(rdt('<rdt:pool name="noisy"/>'))
    env.tb.start(dedicated)
    env.tb.start(pooled)
    pids = {g.name: env.tb.pid(g) for g in (dedicated, pooled)}
    lost = env.tb.vcpu_tids(dedicated) | env.tb.vcpu_tids(pooled)
    # Lose the threads (as after a crash of whatever put them there).
    with env.rc.lock():
        env.rc.add_tasks(ROOT, sorted(lost))
    assert not lost & (env.tasks(dedicated.group) | env.tasks(POOL))
    env.tb.restart_libvirtd()
    for guest in (dedicated, pooled):
        assert env.tb.state(guest) == 'running'
        assert env.tb.pid(guest) == pids[guest.name]
    wait_for(lambda: env.tb.vcpu_tids(dedicated) <= env.tasks(dedicated.group)
             and env.tb.vcpu_tids(pooled) <= env.tasks(POOL),
             what='the reconnect hook to re-adopt the vCPU threads')
    env.assert_isolated(dedicated.group, 3)
    assert 'reconnect begin: moved vCPU threads' in env.tb.hook_log()


def test_save_and_restore(env: Env, tmp_path) -> None:  # type: ignore
    guest = env.tb.define(rdt('<rdt:l3 ways="3"/>'))
    env.tb.start(guest)
    image = str(tmp_path / 'guest.save')
    env.tb.virsh('save', guest.name, image)
    assert guest.group not in env.groups()
    env.tb.virsh('restore', image)
    assert env.tb.state(guest) == 'running'
    env.assert_isolated(guest.group, 3)
    assert env.tb.vcpu_tids(guest) <= env.tasks(guest.group)
    assert 'restore begin: capacity check passed' in env.tb.hook_log()


# -- concurrency -------------------------------------------------------------------
def test_eight_guests_started_concurrently(env: Env) -> None:
    free = env.free()
    guests = [env.tb.define(rdt('<rdt:l3 ways="2"/>'), vcpus=1, memory_mib=32)
              for _ in range(8)]
    results: dict[str, int] = {}

    def run(action: str, guest: Guest) -> None:
        res = env.tb.virsh(action, guest.name, check=False)
        results[guest.name] = res.returncode

    def all_at_once(action: str) -> None:
        threads = [threading.Thread(target=run, args=(action, g))
                   for g in guests]
        for thr in threads:
            thr.start()
        for thr in threads:
            thr.join()
        assert set(results.values()) == {0}, results
        results.clear()

    all_at_once('start')
    for guest in guests:
        env.assert_isolated(guest.group, 2)
        assert env.tb.vcpu_tids(guest) <= env.tasks(guest.group)
    # 8 x 2 ways: every free way is taken, none twice.
    assert env.free() == {d: 0 for d in DOMAINS}
    held = 0
    for guest in guests:
        for mask in env.rc.group(guest.group).l3.values():
            held += mask.count
    assert held == 8 * 2 * len(DOMAINS)
    extra = env.tb.define(rdt('<rdt:l3 ways="1"/>'), vcpus=1, memory_mib=32)
    assert 'but only 0 of 20 are free' in start_fails(env, extra)
    all_at_once('destroy')
    assert env.vm_groups() == []
    assert env.free() == free


# -- what the review found (libvirt 9.0's real behaviour) ----------------------
def test_foreign_metadata_with_unbound_prefixes(env: Env) -> None:
    # libvirt keeps <y:z q:a> nested in another application's metadata
    # without a declaration; expat's namespace mode refused the whole XML.
    other = '<app:x xmlns:app="urn:app"><y:z q:a="1">t</y:z></app:x>'
    plain = env.tb.define(other)
    annotated = env.tb.define(other + rdt('<rdt:l3 ways="2"/>'))
    env.tb.start(plain)
    env.tb.start(annotated)
    env.assert_isolated(annotated.group, 2)
    assert env.tb.vcpu_tids(annotated) <= env.tasks(annotated.group)


def test_odd_name_and_default_namespace_annotation(env: Env) -> None:
    # libvirt keeps the name as written (its pidfile is "<name>.pid") and
    # the annotation in a default namespace as written.
    guest = env.tb.define('<rdt xmlns="urn:ovs-rdt:libvirt:1"><l3 ways="2"/>'
                          '</rdt>', name_suffix=" 'q' \u00e9 ")
    env.tb.start(guest)
    env.assert_isolated(guest.group, 2)
    assert env.tb.vcpu_tids(guest) <= env.tasks(guest.group)


@pytest.mark.parametrize('name', ['-db', '--config-file=x'])
def test_a_name_like_an_option_is_a_name(env: Env, name: str) -> None:
    """libvirt's arguments are the hook's last four: a domain named like an
    option is started, placed and released as any other.
    """
    guest = env.tb.define(rdt('<rdt:l3 ways="2"/>'), name=name)
    try:
        env.tb.start(guest)
        env.assert_isolated(guest.group, 2)
        assert env.tb.vcpu_tids(guest) <= env.tasks(guest.group)
        env.tb.destroy(guest)
        assert guest.group not in env.groups()
    finally:
        env.tb.undefine(guest)


def test_metadata_as_deep_as_libvirt_takes(env: Env) -> None:
    """libxml2 (so libvirt) takes elements 257 levels deep, <domain> the
    first, and refuses 258 ("Excessive depth in document: 256"): the hook
    takes what libvirt took.
    """
    def nested(levels: int) -> str:     # below <domain> and <metadata>
        return ('<x:a xmlns:x="urn:x">' + '<x:a>' * (levels - 3)
                + '</x:a>' * (levels - 3) + '</x:a>')

    with pytest.raises(AssertionError, match='Excessive depth'):
        env.tb.define(nested(258) + rdt('<rdt:l3 ways="1"/>'))
    guest = env.tb.define(nested(257) + rdt('<rdt:l3 ways="1"/>'))
    env.tb.start(guest)
    env.assert_isolated(guest.group, 1)
    env.tb.undefine(guest)


def test_annotation_dropped_live_then_destroyed(env: Env) -> None:
    free = env.free()
    guest = env.tb.define(rdt('<rdt:l3 ways="2"/>'))
    env.tb.start(guest)
    env.tb.virsh('metadata', guest.name, 'urn:ovs-rdt:libvirt:1', '--live',
                 '--remove')
    assert 'urn:ovs-rdt' not in env.tb.virsh('dumpxml', guest.name).stdout
    env.tb.destroy(guest)
    assert guest.group not in env.groups()
    assert env.free() == free


def test_moved_config_refuses_starts_never_running_guests(
        env: Env) -> None:
    """The wrapper binds every --config-file and --config-dir; when one is
    gone the hook refuses a start that asks for ovs-rdt (one line, which
    virsh shows) instead of running on the defaults, and still never kills
    or blocks a guest (libvirtd's reconnect, a VM that asks for nothing).
    """
    from ovs_rdt.cmd import install_hook as install

    confd = env.tb.config + '.d'
    os.makedirs(confd)
    with open(os.path.join(confd, 'warn.conf'), 'w') as fh:
        fh.write('[libvirt]\non_failure = warn\n')   # overridden below
    with open(os.path.join(confd, 'zz.conf'), 'w') as fh:
        fh.write('[libvirt]\non_failure = refuse\n')
    install.install(env.tb.hook, [env.tb.config], [confd])
    moved = env.tb.config + '.moved'
    annotated = env.tb.define(rdt('<rdt:l3 ways="2"/>'))
    try:
        env.tb.start(annotated)        # both bound, read, in order
        env.assert_isolated(annotated.group, 2)
        pid = env.tb.pid(annotated)
        os.rename(env.tb.config, moved)
        env.tb.restart_libvirtd()      # "reconnect": never fails
        assert env.tb.state(annotated) == 'running'
        assert env.tb.pid(annotated) == pid
        refused = env.tb.define(rdt('<rdt:l3 ways="1"/>'))
        err = start_fails(env, refused)
        assert ("ovs-rdt: refusing to start domain '%s': fix the ovs-rdt "
                'configuration: config file %s does not exist'
                % (refused.name, env.tb.config)) in err, err
        plain = env.tb.define()
        env.tb.start(plain)            # asks for nothing: not blocked
        os.rename(moved, env.tb.config)
        os.rename(confd, confd + '.moved')
        err = start_fails(env, refused)
        assert 'config directory %s does not exist' % confd in err, err
        os.rename(confd + '.moved', confd)
        env.tb.start(refused)
        env.assert_isolated(refused.group, 1)
    finally:
        if os.path.exists(moved):
            os.rename(moved, env.tb.config)
        if os.path.exists(confd + '.moved'):
            os.rename(confd + '.moved', confd)
        install.install(env.tb.hook, env.tb.config)
        for name in os.listdir(confd):
            os.unlink(os.path.join(confd, name))
        os.rmdir(confd)


@pytest.mark.parametrize('typo,why', [
    ('[allocation]\nsystem_min_way = 3\n',
     "line 2: unknown option 'system_min_way' in [allocation]"),
    ('[pool:noisy]  # 4 ways\nl3_ways = 4\n',
     "line 1: bad section header '[pool:noisy]  # 4 ways'")],
    ids=['unknown-option', 'section-header'])
def test_a_config_error_at_release_frees_the_vm_all_the_same(
        env: Env, typo: str, why: str) -> None:
    """An operator's typo in conf.d, then ``virsh destroy`` (issue 47;
    issue 51's trial: both kinds of typo): the VM's group goes, alone, and
    the hook's log says why the configuration was not needed; once the
    typo is fixed the ways go back.
    """
    from ovs_rdt.cmd import install_hook as install

    text, typo = typo, os.path.join(env.tb.config + '.d', 'typo.conf')
    confd = env.tb.config + '.d'
    os.makedirs(confd)
    install.install(env.tb.hook, [env.tb.config], [confd])
    guest = env.tb.define(rdt('<rdt:l3 ways="2"/>'))
    try:
        free = env.free()
        env.tb.start(guest)
        root = env.rc.group(ROOT).l3
        with open(typo, 'w') as fh:
            fh.write(text)
        env.tb.destroy(guest)
        assert guest.group not in env.groups(), env.tb.hook_log()[-2000:]
        assert env.rc.group(ROOT).l3 == root        # alone
        log = env.tb.hook_log()
        assert ("release end: removed group %s alone, every other group as "
                "it is: the configuration does not read (config file %s %s"
                % (guest.group, typo, why)) in log, log[-2000:]
        assert ("releasing needs none: the group is the domain's UUID under "
                "[resctrl] root %s;" % env.emu.root) in log
        os.unlink(typo)
        env.tb.start(guest)
        env.tb.destroy(guest)
        assert env.free() == free
    finally:
        env.tb.undefine(guest)
        install.install(env.tb.hook, env.tb.config)
        if os.path.exists(typo):
            os.unlink(typo)
        os.rmdir(confd)


def test_stale_wrapper_never_kills_or_blocks_guests(env: Env) -> None:
    """The packages (or the virtualenv) are gone, the wrapper stayed."""
    import os

    from ovs_rdt.cmd import install_hook as install

    plain = env.tb.define()
    annotated = env.tb.define(rdt('<rdt:l3 ways="2"/>'))
    env.tb.start(plain)
    env.tb.start(annotated)
    pids = {g.name: env.tb.pid(g) for g in (plain, annotated)}
    stale = {'nopkg': dict(packages='/nonexistent'),
             'nopython': dict(python='/nonexistent/venv/bin/python3')}
    paths = []
    try:
        for suffix, kwargs in stale.items():
            path = '%s-%s' % (env.tb.hook, suffix)
            with open(path, 'w', encoding='utf-8') as fh:
                fh.write(install.wrapper_text(env.tb.config, **kwargs))
            os.chmod(path, 0o755)
            paths.append(path)
        env.tb.restart_libvirtd()          # "reconnect" through them
        for guest in (plain, annotated):
            assert env.tb.state(guest) == 'running'
            assert env.tb.pid(guest) == pids[guest.name]
        late = env.tb.define()
        env.tb.start(late)                 # asks for nothing: not blocked
        refused = env.tb.define(rdt('<rdt:l3 ways="1"/>'))
        err = start_fails(env, refused)
        # libvirt runs every script of qemu.d and reports the last failure.
        # What to fix first; the path as libvirtd sees it.
        assert ("ovs-rdt: refusing to start domain '%s': reinstall ovs-rdt and "
                're-run "ovs-rdt install-hook", or remove /' % refused.name
                ) in err, err
        assert ('/qemu.d/%s-nopython: the ovs-rdt hook cannot run '
                '(/nonexistent/venv/bin/python3 or the ovs-rdt packages in '
                % os.path.basename(env.tb.hook)) in err, err
        env.tb.destroy(annotated)          # stopped/release: no matter
        assert annotated.group not in env.groups()
    finally:
        for path in paths:
            os.unlink(path)
