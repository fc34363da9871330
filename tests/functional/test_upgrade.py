"""Upgrade from the previous release (releases.txt, built from its commit)
with guests running: nothing moves.

Through pip: a virtualenv with the previous release's wheel runs the hook
(installed by its own ``ovs-rdt install-hook`` into a real private
libvirtd), the agent (real OvS, PMD threads placed) and ``apply``; KVM
guests start in a dedicated group of 1 and of 3 ways and in a pool.  Then
``pip install`` of this tree's wheel, ``install-hook``, the agent
restarted, ``apply``, libvirtd restarted (its ``reconnect`` hook runs for
every guest): every group's masks, mode and tasks are as they were, with
the same configuration file.  Then the downgrade (RELEASENOTES.md says it
works): the same again, back to the previous release.

Through the Debian package: tests/functional/test_package.py's overlay
root runs the same steps with ``dpkg -i`` (test_upgrade_through_the_package).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Iterator

import pytest

from ovs_rdt.cmd import install_hook as install
from ovs_rdt.core.model import PMD_GROUP, ROOT
from ovs_rdt.resctrl import Resctrl
from tests.functional.fixtures.artifacts import Artifacts, PREVIOUS
from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.fixtures.libvirt import LibvirtTestbed
from tests.functional.fixtures.ovs import OvsTestbed, wait_for

PROFILE = 'xeon-gold-6230'


def rdt(body: str) -> str:
    return '<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">%s</rdt:rdt>' % body


def snapshot(rc: Resctrl) -> dict[str, tuple]:
    """Every group: masks per domain, mode, tasks."""
    return {g.name: (tuple(sorted((d, m.value) for d, m in g.l3.items())),
                     g.mode, tuple(sorted(rc.tasks(g.name))))
            for g in rc.groups()}


def same(before: dict[str, tuple], after: dict[str, tuple],
         what: str = 'something moved') -> None:
    """Every group as it was: masks, mode, and no task gone from it.

    The default group's tasks are the host's; ovs-vswitchd's non-PMD
    threads come and go: their masks and modes only (PMDs are checked by
    the caller).  A QEMU may start a worker thread meanwhile (it is born in
    its parent's group): tasks may join a VM's or a pool's group, none may
    leave it.
    """
    before, after = dict(before), dict(after)
    for name in (ROOT, PMD_GROUP):
        assert after.pop(name)[:2] == before.pop(name)[:2], name
    assert {k: v[:2] for k, v in after.items()} == \
        {k: v[:2] for k, v in before.items()}, what
    for name, (_masks, _mode, tasks) in before.items():
        assert set(tasks) <= set(after[name][2]), '%s: %s' % (what, name)


class Node:
    """One installation (a virtualenv) driving the testbed's libvirtd."""

    def __init__(self, tb: LibvirtTestbed, emu: EmulatorFixture,
                 ovs: OvsTestbed, venv: str) -> None:
        self.tb, self.emu, self.ovs, self.venv = tb, emu, ovs, venv
        self.rc = Resctrl(emu.root, emu.sysfs)
        self.agent: subprocess.Popen | None = None
        self.log = os.path.join(tb.workdir, 'upgrade-agent.log')

    def bin(self, name: str) -> str:
        return os.path.join(self.venv, 'bin', name)

    def cli(self, *args: str) -> str:
        res = subprocess.run([self.bin('ovs-rdt'), *args, '--config-file',
                              self.tb.config], capture_output=True,
                             text=True, timeout=120, cwd='/')
        assert res.returncode == 0, res.stderr
        return res.stdout

    def pip_install(self, wheel: str) -> None:
        res = subprocess.run([self.bin('pip'), 'install', '-q',
                              '--disable-pip-version-check', wheel],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-2000:]

    def install_hook(self) -> None:
        self.cli('install-hook', '--hooks-dir', self.tb.libvirtd.hooks_dir)

    def start_agent(self) -> None:
        with open(self.log, 'ab') as out:
            self.agent = subprocess.Popen(
                [self.bin('ovs-rdt-agent'), '--config-file', self.tb.config],
                stdout=out, stderr=subprocess.STDOUT, cwd='/')

    def stop_agent(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.terminate()
            assert self.agent.wait(15) == 0
        self.agent = None

    def tasks(self, group: str) -> set[int]:
        try:
            return set(self.rc.tasks(group))
        except FileNotFoundError:
            return set()

    def settled(self) -> None:
        pmds = set(self.ovs.pmd_threads())
        try:
            wait_for(lambda: pmds and pmds <= self.tasks(PMD_GROUP)
                     and (self.ovs.external_id('rdt-status') or '')
                     .startswith('ok'), timeout=60, step=0.1,
                     what='PMD threads placed')
        except AssertionError as exc:
            with open(self.log, errors='replace') as fh:
                tail = fh.read()[-3000:]
            raise AssertionError('%s; rdt-status %r; the agent\'s log ends:'
                                 '\n%s' % (exc, self.ovs.external_id(
                                     'rdt-status'), tail)) from None

    def upgrade_to(self, wheel: str) -> None:
        """The release notes' steps, guests running."""
        self.pip_install(wheel)
        self.install_hook()
        self.stop_agent()
        self.start_agent()
        self.cli('apply')
        self.tb.restart_libvirtd()           # "reconnect" for every guest
        self.settled()


@pytest.fixture
def node(libvirt_testbed: LibvirtTestbed, previous_release: Artifacts,
         tmp_path: Any, monkeypatch: Any) -> Iterator[Node]:
    tb = libvirt_testbed
    # The virtualenv's releases alone: a PYTHONPATH naming a checkout would
    # run the checkout's code as "the previous release" (and have pip find
    # ovs-rdt installed there).
    monkeypatch.delenv('PYTHONPATH', raising=False)
    emu = EmulatorFixture(PROFILE, rootdir=tb.mount_base)
    ovs = OvsTestbed(tempfile.mkdtemp(prefix='ovsrdt-ovs-'))
    venv = str(tmp_path / 'venv')
    n = None
    try:
        emu.setUp()
        ovs.start()
        subprocess.run([sys.executable, '-m', 'venv', venv], check=True,
                       timeout=120)
        n = Node(tb, emu, ovs, venv)
        n.pip_install(previous_release.wheel)
        tb.configure(emu.root, emu.sysfs, pools={'noisy': 2},
                     qemu_run_dir=tb.libvirtd.qemu_run_dir,
                     extra='[ovs]\nconnection = %s\nvswitchd_pidfile = %s\n'
                     'rescan_interval = 1\n[agent]\nreconcile_interval = 1\n'
                     % (ovs.connection, ovs.vswitchd_pidfile))
        yield n
    finally:
        tb.remove_guests()
        if n is not None:
            n.stop_agent()
        install.install(tb.hook, tb.config)    # the testbed's own hook
        ovs.stop()
        emu.cleanUp()
        shutil.rmtree(ovs.dir, ignore_errors=True)


def test_upgrade_through_pip_with_guests_running(
        node: Node, artifacts: Artifacts, previous_release: Artifacts) -> None:
    tb = node.tb
    node.install_hook()
    node.start_agent()
    node.ovs.other_config(**{'rdt-pmd-l3-ways': '2'})
    node.cli('apply')
    node.settled()
    guests = [tb.define(rdt('<rdt:l3 ways="%d"/>' % ways), vcpus=1,
                        memory_mib=32) for ways in (1, 3)]
    guests.append(tb.define(rdt('<rdt:pool name="noisy"/>'), vcpus=1,
                            memory_mib=32))
    for guest in guests:
        tb.start(guest)
    groups = [g.group for g in guests[:2]] + ['ovsrdt-pool-noisy']
    for guest, group in zip(guests, groups):
        assert tb.vcpu_tids(guest) <= set(node.rc.tasks(group)), guest
    before = snapshot(node.rc)
    assert {g.group for g in guests[:2]} <= set(before)

    node.upgrade_to(artifacts.wheel)
    version = subprocess.run([node.bin('ovs-rdt'), '--version'],
                             capture_output=True, text=True).stdout
    assert version == 'ovs-rdt %s\n' % artifacts.version
    assert all(tb.state(g) == 'running' for g in guests)
    same(before, snapshot(node.rc))
    # The new hook handles the next guest.
    extra = tb.define(rdt('<rdt:l3 ways="1"/>'), vcpus=1, memory_mib=32)
    tb.start(extra)
    assert tb.vcpu_tids(extra) <= set(node.rc.tasks(extra.group))
    tb.undefine(extra)
    wait_for(lambda: extra.group not in node.rc.group_names(), timeout=30)

    # Downgrade: works, and nothing moves either.
    node.upgrade_to(previous_release.wheel)
    assert 'Version: %s' % PREVIOUS in subprocess.run(
        [node.bin('pip'), 'show', 'ovs-rdt'], capture_output=True,
        text=True).stdout
    assert all(tb.state(g) == 'running' for g in guests)
    same(before, snapshot(node.rc))
