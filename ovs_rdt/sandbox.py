"""Real parts started privately: the emulator, OvS, libvirtd, KVM guests.

Used by ``ovs-rdt demo``; every start records what it did so that
:meth:`Sandbox.teardown` leaves the machine as it found it.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

from ovs_rdt.exceptions import RDTError
from ovs_rdt import procfs

LOG = logging.getLogger(__name__)

LIBVIRTD_PIDFILE = '/run/libvirtd.pid'
VIRTLOGD_PIDFILE = '/run/virtlogd.pid'


class SandboxError(RDTError):
    """A real part could not be started or stopped."""


def run(*cmd: str, check: bool = True, timeout: float = 60,
        env: dict[str, str] | None = None,
        stdin: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True,
                          timeout=timeout, env=env, input=stdin)
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise SandboxError('%s failed: %s' % (' '.join(cmd[:3]),
                                              msg[-1] if msg else
                                              'exit %d' % proc.returncode))
    return proc


def wait_for(predicate: Any, timeout: float = 10.0, what: str = 'condition',
             step: float = 0.05, error: type[Exception] = SandboxError) -> Any:
    """Poll ``predicate()`` until it returns something true; that value.

    ``error`` is raised on time-out (the test fixtures use AssertionError).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error('timed out after %ss waiting for %s' % (timeout, what))
        time.sleep(step)


def stop_pid(pid: int | None, timeout: float = 10) -> None:
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not os.path.exists('/proc/%d' % pid) or _zombie(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _zombie(pid: int) -> bool:
    try:
        with open('/proc/%d/stat' % pid) as fh:
            return fh.read().rsplit(')', 1)[1].split()[0] == 'Z'
    except (OSError, IndexError):
        return True


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
    def install_hook(self, config_file: str, hooks_dir: str) -> str:
        run(sys.executable, '-m', 'ovs_rdt.cmd.main', 'install-hook',
            '--hooks-dir', hooks_dir, '--config-file', config_file)
        self.state['hook'] = {'hooks_dir': hooks_dir, 'config': config_file}
        self.save()
        return hooks_dir

    def start_libvirtd(self) -> None:
        """Start libvirtd, or make a running one discover the hook.

        libvirtd looks for hook scripts when it starts and on SIGHUP (its
        reload, which keeps guests running), so a running libvirtd is sent
        SIGHUP rather than restarted.
        """
        if procfs.read_pidfile(VIRTLOGD_PIDFILE) is None:
            run('virtlogd', '-d')
            self.state['started_virtlogd'] = True
        running = procfs.read_pidfile(LIBVIRTD_PIDFILE)
        if running:
            os.kill(running, signal.SIGHUP)
            self.state['reloaded_libvirtd'] = running
        else:
            run('libvirtd', '-d')
            self.state['started_libvirtd'] = True
        self.save()
        wait_for(lambda: run('virsh', 'version', check=False,
                             timeout=10).returncode == 0, 30, 'libvirtd')

    def define_and_start(self, name: str, xml: str) -> None:
        path = os.path.join(self.workdir, name + '.xml')
        with open(path, 'w') as fh:
            fh.write(xml)
        run('virsh', 'define', path)
        self.state['guests'].append(name)
        self.save()
        run('virsh', 'start', name, timeout=120)

    # -- teardown ------------------------------------------------------------
    def teardown(self) -> list[str]:
        """Undo everything recorded, most recent first; returns problems."""
        problems: list[str] = []

        def attempt(what: str, fn: Any, *args: Any) -> None:
            try:
                fn(*args)
            except (RDTError, OSError, subprocess.SubprocessError) as exc:
                problems.append('%s: %s' % (what, exc))

        for name in reversed(self.state.get('guests', [])):
            run('virsh', 'destroy', name, check=False)
            run('virsh', 'undefine', name, check=False)
        pids = self.state.get('pids', {})
        attempt('agent', stop_pid, pids.get('ovs-rdt-agent'))
        hook = self.state.get('hook')
        if hook:
            attempt('hook', run, sys.executable, '-m', 'ovs_rdt.cmd.main',
                    'install-hook', '--uninstall', '--hooks-dir',
                    hook['hooks_dir'])
        if self.state.get('started_libvirtd'):
            attempt('libvirtd', stop_pid,
                    procfs.read_pidfile(LIBVIRTD_PIDFILE), 30)
        elif self.state.get('reloaded_libvirtd'):
            pid = procfs.read_pidfile(LIBVIRTD_PIDFILE)
            if pid:   # forget the hook again
                attempt('libvirtd', os.kill, pid, signal.SIGHUP)
        if self.state.get('started_virtlogd'):
            attempt('virtlogd', stop_pid, procfs.read_pidfile(VIRTLOGD_PIDFILE))
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
