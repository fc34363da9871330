"""Real parts started privately: the emulator, OvS, libvirtd, KVM guests.

Used by ``ovs-rdt demo``; every start records what it did so that
:meth:`Sandbox.teardown` leaves the machine as it found it.
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
from typing import Any

from ovs_rdt.exceptions import RDTError
from ovs_rdt import procfs
from ovs_rdt.sandbox.libvirtd import PrivateLibvirtd, QEMU_USER
from ovs_rdt.sandbox.wait import SandboxError, run, stop_pid, wait_for

__all__ = ['PrivateLibvirtd', 'Sandbox', 'SandboxError', 'kvm_problem',
           'run', 'stop_pid', 'wait_for']

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

    # -- the emulator ------------------------------------------------------
    def mount_emulator(self, profile: str) -> tuple[str, str]:
        mnt = os.path.join(self.workdir, 'resctrl')
        sysfs = os.path.join(self.workdir, 'sys-cpu')
        os.makedirs(mnt, exist_ok=True)
        run(sys.executable, '-m', 'ovs_rdt.emulator', '--profile', profile,
            '--sysfs-dir', sysfs, '-d', mnt)
        self.state['emulator'] = mnt
        self.save()
        return mnt, sysfs

    # -- Open vSwitch --------------------------------------------------------
    def ovs_env(self) -> dict[str, str]:
        env = dict(os.environ)
        d = os.path.join(self.workdir, 'ovs')
        env.update(OVS_RUNDIR=d, OVS_LOGDIR=d, OVS_DBDIR=d, OVS_SYSCONFDIR=d)
        return env

    @property
    def ovs_dir(self) -> str:
        return os.path.join(self.workdir, 'ovs')

    @property
    def db_sock(self) -> str:
        return os.path.join(self.ovs_dir, 'db.sock')

    def vsctl(self, *args: str) -> str:
        return run('ovs-vsctl', '--db=unix:' + self.db_sock, '--timeout=10',
                   *args, env=self.ovs_env()).stdout.strip()

    def start_ovs(self, ports: int, pmd_mask: str) -> None:
        d = self.ovs_dir
        os.makedirs(d, exist_ok=True)
        env = self.ovs_env()
        run('ovsdb-tool', 'create', os.path.join(d, 'conf.db'),
            '/usr/share/openvswitch/vswitch.ovsschema', env=env)
        run('ovsdb-server', '--detach', '--no-chdir',
            '--pidfile=' + os.path.join(d, 'ovsdb-server.pid'),
            '--remote=punix:' + self.db_sock,
            '--log-file=' + os.path.join(d, 'ovsdb-server.log'),
            os.path.join(d, 'conf.db'), env=env)
        self.state['pids']['ovsdb-server'] = procfs.read_pidfile(
            os.path.join(d, 'ovsdb-server.pid'))
        self.save()
        run('ovs-vsctl', '--db=unix:' + self.db_sock, '--no-wait', 'init',
            env=env)
        run('ovs-vswitchd', '--enable-dummy=override', '--disable-system',
            '--detach', '--no-chdir', '--pidfile=' + self.vswitchd_pidfile,
            '--log-file=' + os.path.join(d, 'ovs-vswitchd.log'),
            'unix:' + self.db_sock, env=env)
        self.state['pids']['ovs-vswitchd'] = procfs.read_pidfile(
            self.vswitchd_pidfile)
        self.save()
        self.vsctl('add-br', 'br0', '--', 'set', 'bridge', 'br0',
                   'datapath_type=netdev')
        for i in range(ports):
            self.vsctl('add-port', 'br0', 'p%d' % i, '--', 'set', 'Interface',
                       'p%d' % i, 'type=dummy-pmd')
        self.vsctl('set', 'Open_vSwitch', '.',
                   'other_config:pmd-cpu-mask=' + pmd_mask)

    @property
    def vswitchd_pidfile(self) -> str:
        return os.path.join(self.ovs_dir, 'ovs-vswitchd.pid')

    def pmd_threads(self) -> list[tuple[int, str]]:
        pid = procfs.read_pidfile(self.vswitchd_pidfile)
        if pid is None:
            return []
        return [(t, c) for t, c in procfs.threads(pid)
                if procfs.parse_pmd_comm(c) is not None]

    # -- the agent -----------------------------------------------------------
    def start_agent(self, config_file: str) -> int:
        log = open(os.path.join(self.workdir, 'agent.log'), 'ab')
        proc = subprocess.Popen(
            [sys.executable, '-m', 'ovs_rdt.agent.service', '--config-file',
             config_file], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
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
        if self.state.get('libvirtd'):
            problems += ['libvirtd: %s' % p for p in
                         PrivateLibvirtd(self.state['libvirtd']).stop()]
        attempt('ovs-vswitchd', stop_pid, pids.get('ovs-vswitchd'))
        attempt('ovsdb-server', stop_pid, pids.get('ovsdb-server'))
        mnt = self.state.get('emulator')
        if mnt and os.path.ismount(mnt):
            attempt('emulator', run, 'fusermount3', '-u', mnt)
            try:
                wait_for(lambda: not os.path.ismount(mnt), 10, 'unmount')
            except SandboxError as exc:
                problems.append(str(exc))
        if not problems:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return problems
