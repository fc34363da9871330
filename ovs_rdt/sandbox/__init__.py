"""Real parts started privately: the emulator, OvS, libvirtd, KVM guests.

Used by ``ovs-rdt demo``; every start records what it did so that
:meth:`Sandbox.teardown` leaves the machine as it found it.  The tests and
benchmarks use the parts directly, and :class:`Node` for two nodes side by
side that guests migrate between.
"""
from __future__ import annotations

import grp
import json
import logging
import os
import pwd
import shutil
import stat
import subprocess
import sys
from typing import Any, Sequence

from ovs_rdt.exceptions import RDTError
from ovs_rdt.sandbox.emulator import MountedEmulator
from ovs_rdt.sandbox.libvirtd import PrivateLibvirtd, QEMU_USER
from ovs_rdt.sandbox.node import Node
from ovs_rdt.sandbox.ovs import PrivateOvs
from ovs_rdt.sandbox.wait import SandboxError, run, stop_pid, wait_for
from ovs_rdt.agent.lock import AgentLock
from ovs_rdt import procfs

__all__ = ['MountedEmulator', 'Node', 'PrivateLibvirtd', 'PrivateOvs',
           'Sandbox', 'SandboxError', 'kvm_problem', 'run', 'stop_pid',
           'wait_for']

LOG = logging.getLogger(__name__)


def kvm_problem(dev: str = '/dev/kvm', user: str = QEMU_USER) -> str | None:
    """Why QEMU (running as ``user``) cannot use KVM here, or None."""
    try:
        st = os.stat(dev)
    except FileNotFoundError:
        return '%s does not exist (no KVM on this machine)' % dev
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return 'user %s does not exist: apt-get install ' \
            'libvirt-daemon-system' % user
    groups = {pw.pw_gid} | {g.gr_gid for g in grp.getgrall()
                            if user in g.gr_mem}
    rw = stat.S_IRUSR | stat.S_IWUSR
    if (st.st_uid == pw.pw_uid and st.st_mode & rw == rw) or \
            (st.st_gid in groups and st.st_mode & (rw >> 3) == rw >> 3) or \
            st.st_mode & (rw >> 6) == rw >> 6:
        return None
    try:
        owner = '%s:%s' % (pwd.getpwuid(st.st_uid).pw_name,
                           grp.getgrgid(st.st_gid).gr_name)
    except KeyError:
        owner = '%d:%d' % (st.st_uid, st.st_gid)
    return ('%s is %s %04o, so QEMU (user %s) cannot open it; tools/setup.sh '
            'makes it root:kvm 0660 as Debian\'s udev rule does'
            % (dev, owner, stat.S_IMODE(st.st_mode), user))


class Sandbox:
    """Everything the demo starts, recorded in ``<workdir>/state.json``."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.state_file = os.path.join(workdir, 'state.json')
        self.state: dict[str, Any] = {'guests': [], 'pids': {}}
        if os.path.exists(self.state_file):
            with open(self.state_file) as fh:
                self.state = json.load(fh)

    def save(self) -> None:
        os.makedirs(self.workdir, exist_ok=True)
        with open(self.state_file, 'w') as fh:
            json.dump(self.state, fh, indent=1)

    @property
    def config_file(self) -> str:
        """The configuration the hook, the agent and the CLI read."""
        return os.path.join(self.workdir, 'ovs-rdt.conf')

    def running(self) -> dict[str, int | None]:
        """Every daemon started (as recorded), with its pid while it runs
        (None once it is gone).
        """
        out: dict[str, int | None] = {}
        if self.state.get('emulator'):
            out['emulator'] = procfs.read_pidfile(self.emulator.pid_file)
        if self.state.get('ovs'):
            ovs = self.ovs
            out['ovsdb-server'] = ovs.pid_of(ovs.ovsdb_pidfile)
            out['ovs-vswitchd'] = ovs.vswitchd_pid
        if self.state.get('libvirtd'):
            out['libvirtd'] = self.libvirtd.pid()
        pid = self.state.get('pids', {}).get('ovs-rdt-agent')
        if pid:
            out['ovs-rdt-agent'] = pid if procfs.alive(pid) else None
        elif self.agent_pid():
            out['ovs-rdt-agent'] = self.agent_pid()
        return out

    def agent_pid(self) -> int | None:
        """The ovs-rdt-agent running for the emulator's resctrl root, by
        whomever it was started (the agent lock's holder), or None.
        """
        if not self.state.get('emulator'):
            return None
        try:
            pid = AgentLock(self.emulator.root).running()
        except RDTError:
            return None
        return int(pid) if pid and pid.isdigit() else None

    # -- the emulator ------------------------------------------------------
    @property
    def emulator(self) -> MountedEmulator:
        options = self.state.get('mount_options') or []
        return MountedEmulator(os.path.join(self.workdir, 'emulator'),
                               self.state.get('profile', ''),
                               ['-o', ','.join(options)] if options else [])

    def mount_emulator(self, profile: str,
                       options: Sequence[str] = ()) -> tuple[str, str]:
        """Mount the emulator with ``-o OPTIONS`` (cdp, mba_MBps, ...)."""
        self.state['profile'] = profile
        self.state['mount_options'] = list(options)
        emu = self.emulator
        self.state['emulator'] = emu.root
        self.save()
        emu.start()
        return emu.root, emu.sysfs

    # -- Open vSwitch --------------------------------------------------------
    @property
    def ovs(self) -> PrivateOvs:
        return PrivateOvs(os.path.join(self.workdir, 'ovs'),
                          self.state.get('pmd_cpu_mask', '0x1'),
                          self.state.get('ports', 1))

    def start_ovs(self, ports: int, pmd_mask: str, timeout: float) -> None:
        self.state.update(pmd_cpu_mask=pmd_mask, ports=ports, ovs=True)
        self.save()
        ovs = self.ovs
        ovs.timeout = timeout
        ovs.start()

    def vsctl(self, *args: str) -> str:
        return self.ovs.vsctl(*args)

    # -- the agent -----------------------------------------------------------
    def start_agent(self, config_file: str) -> int:
        """ovs-rdt-agent; in the private libvirtd's mount namespace when
        one runs, as on a node (where it sees libvirt's /run).
        """
        prefix = self.libvirtd.enter() if self.state.get('libvirtd') else []
        log = open(os.path.join(self.workdir, 'agent.log'), 'ab')
        proc = subprocess.Popen(
            prefix + [sys.executable, '-m', 'ovs_rdt.agent.service',
                      '--config-file', config_file],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            start_new_session=True)
        self.state['pids']['ovs-rdt-agent'] = proc.pid
        self.save()
        return proc.pid

    # -- libvirt -------------------------------------------------------------
    @property
    def libvirtd(self) -> PrivateLibvirtd:
        return PrivateLibvirtd(os.path.join(self.workdir, 'libvirt'))

    def start_libvirtd(self, config_file: str, timeout: float) -> None:
        """A private libvirtd with the hook in its own hook directory.

        See :mod:`ovs_rdt.sandbox.libvirtd`.
        """
        lv = self.libvirtd
        self.state['libvirtd'] = lv.workdir
        self.save()
        lv.prepare()
        run(sys.executable, '-m', 'ovs_rdt.cmd.main', 'install-hook',
            '--hooks-dir', lv.hooks_dir, '--config-file', config_file)
        lv.start(timeout)

    def define_and_start(self, name: str, xml: str) -> None:
        path = os.path.join(self.workdir, name + '.xml')
        with open(path, 'w') as fh:
            fh.write(xml)
        lv = self.libvirtd
        lv.virsh('define', path)
        lv.virsh('start', name, timeout=120)

    # -- teardown ------------------------------------------------------------
    def teardown(self) -> list[str]:
        """Undo everything recorded, most recent first; returns problems."""
        problems: list[str] = []

        def attempt(what: str, fn: Any, *args: Any) -> None:
            try:
                fn(*args)
            except (RDTError, OSError, subprocess.SubprocessError) as exc:
                problems.append('%s: %s' % (what, exc))

        pids = self.state.get('pids', {})
        attempt('agent', stop_pid, pids.get('ovs-rdt-agent'))
        # One started by hand against this root (doc/try-it.md).
        attempt('agent', stop_pid, self.agent_pid())
        if self.state.get('libvirtd'):
            problems += ['libvirtd: %s' % p for p in
                         PrivateLibvirtd(self.state['libvirtd']).stop()]
        if self.state.get('ovs'):
            attempt('Open vSwitch', self.ovs.stop)
        if self.state.get('emulator'):
            problems += self.emulator.stop()
        if not problems:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return problems
