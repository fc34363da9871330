"""A private, real Open vSwitch: ovsdb-server + ovs-vswitchd with PMD threads.

Started as ``shared/TESTBED.md`` says, in one directory (no system path
touched): ``ovs-vswitchd --enable-dummy=override --disable-system``, bridge
``br0`` (netdev) with ``dummy-pmd`` ports, so real ``pmd-cNN/id:M`` threads
run, pinned to their cores.  ``pmd-maxsleep`` lets idle PMD threads sleep so
that busy-polling threads do not eat a small machine.

Laid out like a real node: the run directory (pidfiles, sockets: what the
agent watches with inotify) holds no database or log file, which change on
every transaction.  Used by ``ovs-rdt demo`` and the functional tests.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from typing import Any

from ovs_rdt import procfs
from ovs_rdt.sandbox.wait import SandboxError, wait_for
from ovs_rdt.inputs import cpulists

SCHEMA = '/usr/share/openvswitch/vswitch.ovsschema'
TOOLS = ('ovsdb-server', 'ovs-vswitchd', 'ovs-vsctl', 'ovsdb-tool')


def threads_alive(pid: int) -> bool:
    """True while any thread of ``pid`` runs.

    A killed multi-threaded daemon's main thread turns zombie before its
    other threads are gone; its pidfile lock is only released with the
    last one, so a restart must wait for all of them.
    """
    return procfs.threads_alive(pid)


class PrivateOvs:
    """ovsdb-server + ovs-vswitchd in ``directory``.

    ``error`` is what a time-out raises (the test fixtures use
    AssertionError); ``timeout`` bounds every wait for a daemon.
    """

    def __init__(self, directory: str, pmd_cpu_mask: str = '0x1',
                 ports: int = 1, error: type[Exception] = SandboxError,
                 timeout: float = 60.0) -> None:
        self.dir = directory
        self.db_dir = os.path.join(directory, 'db')
        self.log_dir = os.path.join(directory, 'log')
        self.db = os.path.join(self.db_dir, 'conf.db')
        self.db_sock = os.path.join(directory, 'db.sock')
        self.connection = 'unix:' + self.db_sock
        self.ovsdb_pidfile = os.path.join(directory, 'ovsdb-server.pid')
        self.vswitchd_pidfile = os.path.join(directory, 'vswitchd.pid')
        self.env = dict(os.environ, OVS_RUNDIR=directory,
                        OVS_LOGDIR=self.log_dir, OVS_DBDIR=self.db_dir,
                        OVS_SYSCONFDIR=self.db_dir)
        self.pmd_cpu_mask = pmd_cpu_mask
        self.ports = ports
        self.error = error
        self.timeout = timeout
        self._pids: set[int] = set()

    def wait(self, check: Any, what: str, timeout: float | None = None,
             step: float = 0.01) -> Any:
        return wait_for(check, self.timeout if timeout is None else timeout,
                        what, step, self.error)

    # -- processes ----------------------------------------------------------
    def _run(self, *cmd: str, timeout: float = 20) -> str:
        try:
            res = subprocess.run(cmd, env=self.env, capture_output=True,
                                 text=True, timeout=timeout, cwd=self.dir)
        except subprocess.TimeoutExpired:
            raise self.error('%s did not finish within %.0f s (logs: %s)'
                             % (' '.join(cmd[:2]), timeout,
                                self.log_dir)) from None
        if res.returncode:
            raise self.error('%s failed (%d): %s (logs: %s)' % (
                ' '.join(cmd[:2]), res.returncode, res.stderr.strip(),
                self.log_dir))
        return res.stdout

    def pid_of(self, pidfile: str) -> int | None:
        return procfs.read_pidfile(pidfile)

    @property
    def pids(self) -> set[int]:
        """Every daemon pid this instance started."""
        return set(self._pids)

    def start(self) -> 'PrivateOvs':
        for sub in (self.db_dir, self.log_dir):
            os.makedirs(sub, exist_ok=True)
        self._run('ovsdb-tool', 'create', self.db, SCHEMA)
        self.start_ovsdb()
        self.vsctl('--no-wait', 'init')
        self.vsctl('--no-wait', 'set', 'Open_vSwitch', '.',
                   'other_config:pmd-maxsleep=10000',
                   'other_config:pmd-cpu-mask=%s' % self.pmd_cpu_mask)
        self.start_vswitchd()
        self.vsctl('add-br', 'br0', '--', 'set', 'bridge', 'br0',
                   'datapath_type=netdev')
        for i in range(self.ports):
            self.vsctl('add-port', 'br0', 'p%d' % i, '--', 'set', 'Interface',
                       'p%d' % i, 'type=dummy-pmd')
        self.wait_pmds(self.mask_cores(self.pmd_cpu_mask))
        return self

    def start_ovsdb(self) -> int:
        self._run('ovsdb-server', '--detach', '--no-chdir',
                  '--pidfile=' + self.ovsdb_pidfile,
                  '--remote=punix:' + self.db_sock,
                  '--log-file=' + os.path.join(self.log_dir,
                                               'ovsdb-server.log'),
                  self.db, timeout=self.timeout)
        pid = self.wait(lambda: self.pid_of(self.ovsdb_pidfile),
                        'ovsdb-server')
        self._pids.add(pid)
        return pid

    def start_vswitchd(self) -> int:
        self._run('ovs-vswitchd', '--enable-dummy=override',
                  '--disable-system', '--detach', '--no-chdir',
                  '--pidfile=' + self.vswitchd_pidfile,
                  '--log-file=' + os.path.join(self.log_dir, 'vswitchd.log'),
                  self.connection, timeout=self.timeout)
        pid = self.wait(lambda: self.pid_of(self.vswitchd_pidfile),
                        'ovs-vswitchd')
        self._pids.add(pid)
        return pid

    def _kill(self, pid: int | None, sig: int) -> None:
        if pid is None:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        try:
            wait_for(lambda: not threads_alive(pid), 5, 'pid %d to exit' % pid)
        except SandboxError:
            os.kill(pid, signal.SIGKILL)
            self.wait(lambda: not threads_alive(pid), 'pid %d to die' % pid)

    def kill_vswitchd(self, sig: int = signal.SIGKILL) -> None:
        self._kill(self.pid_of(self.vswitchd_pidfile), sig)

    def kill_ovsdb(self, sig: int = signal.SIGKILL) -> None:
        self._kill(self.pid_of(self.ovsdb_pidfile), sig)

    def stop(self) -> None:
        """Stop every daemon this instance started (also after a restart)."""
        for pid in (self.pid_of(self.vswitchd_pidfile),
                    self.pid_of(self.ovsdb_pidfile)):
            if pid is not None:
                self._pids.add(pid)
        for pid in self._pids:
            if threads_alive(pid):
                self._kill(pid, signal.SIGTERM)

    # -- reading and writing the database --------------------------------------
    @property
    def vswitchd_pid(self) -> int | None:
        return self.pid_of(self.vswitchd_pidfile)

    def vsctl(self, *args: str, timeout: float = 20) -> str:
        return self._run('ovs-vsctl', '--db=' + self.connection,
                         '--timeout=%d' % timeout, *args,
                         timeout=timeout + 5).strip()

    def other_config(self, **keys: str | None) -> None:
        """Set (value) or remove (None) other_config keys in one command.

        Keyword names use ``_`` for ``-`` (``rdt_pmd_l3_ways=4``).
        """
        cmd: list[str] = ['--no-wait']
        for key, value in keys.items():
            key = key.replace('_', '-')
            if cmd[1:]:
                cmd.append('--')
            if value is None:
                cmd += ['remove', 'Open_vSwitch', '.', 'other_config', key]
            else:
                cmd += ['set', 'Open_vSwitch', '.',
                        'other_config:%s=%s' % (key, value)]
        self.vsctl(*cmd)

    def external_id(self, key: str) -> str | None:
        out = self.vsctl('--if-exists', 'get', 'Open_vSwitch', '.',
                         'external_ids:%s' % key)
        return out.strip('"').replace('\\"', '"') if out else None

    def threads(self) -> dict[int, str]:
        pid = self.vswitchd_pid
        return dict(procfs.threads(pid)) if pid else {}

    def pmd_threads(self) -> dict[int, int]:
        """PMD TID -> core."""
        out = {}
        for tid, comm in self.threads().items():
            core = procfs.parse_pmd_comm(comm)
            if core is not None:
                out[tid] = core
        return out

    def wait_pmds(self, cores: set[int],
                  timeout: float | None = None) -> dict[int, int]:
        return self.wait(lambda: (lambda p: p if set(p.values()) == set(cores)
                                  else None)(self.pmd_threads()),
                         'PMD threads on cores %s' % sorted(cores), timeout)

    @staticmethod
    def mask_cores(mask: str) -> set[int]:
        return set(cpulists.from_mask(mask, 'pmd-cpu-mask'))


def missing() -> str | None:
    """Which part of Open vSwitch is not installed here, or None."""
    for tool in TOOLS:
        if shutil.which(tool) is None:
            return '%s is not installed (openvswitch-switch)' % tool
    if not os.path.exists(SCHEMA):
        return '%s is missing (openvswitch-switch)' % SCHEMA
    return None
