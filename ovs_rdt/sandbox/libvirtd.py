"""A private libvirtd: real, but sharing no state with the host's.

``PrivateLibvirtd(workdir)`` runs ``virtlogd`` and ``libvirtd`` in a mount
namespace of their own (``unshare --mount --propagation slave``) where
``/etc/libvirt``, ``/run/libvirt``, ``/var/lib/libvirt`` and
``/var/log/libvirt`` are directories below ``workdir``.  So its hook
directory, guest definitions, pidfiles, sockets and logs are private: nothing
it does (or a failed test does through it) reaches the host's
``/etc/libvirt/hooks``, the host's guests or a libvirtd the host runs.  It
shares the host's QEMU capability cache (``/var/cache/libvirt``), which is
only a cache.  Mounts made on the host later under a *shared* directory
(:func:`make_shared`) propagate into the namespace: that is how an emulator
mounted after libvirtd started reaches the hooks.

Two of them side by side are two nodes of a migration
(:mod:`ovs_rdt.sandbox.node`): each gets its own ``host_uuid`` (libvirt
refuses to migrate between daemons that share one) and host name (a UTS
namespace), and reaches the other at its :attr:`peer_uri`.

Clients reach it at :attr:`uri` (read-only: :attr:`ro_uri`); its hooks see the usual paths
(``/etc/libvirt/hooks/qemu.d``, ``/run/libvirt/qemu/<name>.pid``), which the
host sees as :attr:`hooks_dir` and :attr:`qemu_run_dir`.  :meth:`stop`
works from the files below ``workdir`` alone, so another process (``ovs-rdt
demo --teardown``) can end what ``--keep`` left running.
"""
from __future__ import annotations

import ctypes
import glob
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
from typing import Mapping, Sequence

from ovs_rdt import procfs
from ovs_rdt.sandbox.wait import SandboxError, pid_alive, stop_pid, wait_for

LOG = logging.getLogger(__name__)

#: What the namespace replaces: host path -> directory below the workdir.
PRIVATE_DIRS = (('/etc/libvirt', 'etc'), ('/run/libvirt', 'run'),
                ('/var/lib/libvirt', 'lib'), ('/var/log/libvirt', 'log'))
#: Of those, the ones on tmpfs that only a running libvirtd (or systemd's
#: tmpfiles.d at boot) creates: a new machine may lack them.
RUNTIME_DIRS = ('/run/libvirt',)
#: A cold libvirtd probes QEMU's capabilities before it answers (12 s seen
#: on an idle new machine, over a minute on a busy 2-core one).
START_TIMEOUT = 180.0
QEMU_USER = 'libvirt-qemu'
PR_SET_PDEATHSIG = 1
#: libvirtd runs below a child subreaper that reaps at once.  QEMU is
#: double-forked: without it, its zombie waits for PID 1 to reap it, and
#: libvirt counts a guest stopped only once its pid is gone.  systemd does
#: this at once; a container's init may take seconds (1.1-1.5 s measured
#: here), which would show in every "guest died -> group removed" time.
#: SIGTERM/SIGHUP/SIGINT are passed on to libvirtd; it exits with it.
REAPER = """\
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)     # PR_SET_CHILD_SUBREAPER
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(sig, lambda n, _f: os.kill(pid, n))
while True:
    try:
        got, status = os.waitpid(-1, 0)
    except ChildProcessError:
        sys.exit(0)
    if got == pid:
        sys.exit(os.waitstatus_to_exitcode(status) & 0xff)
"""


def make_shared(path: str) -> None:
    """Make ``path`` a shared mount point (a bind mount onto itself).

    Mounts made below it later appear in namespaces created after this
    call with slave propagation, such as a :class:`PrivateLibvirtd`'s.
    """
    subprocess.run(['mount', '--bind', path, path], check=True,
                   capture_output=True, timeout=30)
    subprocess.run(['mount', '--make-private', path], check=True,
                   capture_output=True, timeout=30)
    subprocess.run(['mount', '--make-shared', path], check=True,
                   capture_output=True, timeout=30)


def unmake_shared(path: str) -> None:
    subprocess.run(['umount', '-l', path], check=False, capture_output=True,
                   timeout=30)


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class PrivateLibvirtd:
    """libvirtd + virtlogd in their own mount namespace below ``workdir``."""

    def __init__(self, workdir: str,
                 binds: Sequence[tuple[str, str]] = (),
                 setup: Sequence[str] = (),
                 host_uuid: str | None = None,
                 hostname: str | None = None) -> None:
        self.workdir = workdir
        #: (source, target) bind mounts made inside the namespace.
        self.binds = list(binds)
        #: Extra shell lines run inside the namespace before the daemons.
        self.setup = list(setup)
        #: ``host_uuid`` of its libvirtd.conf (None: the host's, from
        #: SMBIOS).  libvirt refuses a migration between two daemons that
        #: share one: each node of a migration needs its own.
        self.host_uuid = host_uuid
        #: A UTS namespace of its own with this host name (None: the
        #: host's namespace and name).
        self.hostname = hostname
        self.proc: subprocess.Popen | None = None

    # -- where things are ---------------------------------------------------
    def path(self, *parts: str) -> str:
        return os.path.join(self.workdir, *parts)

    @property
    def uri(self) -> str:
        return 'qemu:///system?socket=' + self.path('run', 'libvirt-sock')

    @property
    def ro_uri(self) -> str:
        """Its read-only socket (what ovs-rdt-agent, status and top open)."""
        return 'qemu:///system?socket=' + self.path('run', 'libvirt-sock-ro')

    @property
    def peer_uri(self) -> str:
        """How another libvirtd reaches it (a migration's destination).

        ``qemu+unix``: the remote driver over this daemon's socket (a bare
        ``qemu:///`` opened inside a libvirtd is that daemon itself).
        """
        return 'qemu+unix:///system?socket=' + self.path('run',
                                                         'libvirt-sock')

    @property
    def hooks_dir(self) -> str:
        """The host's view of the namespace's /etc/libvirt/hooks/qemu.d."""
        return self.path('etc', 'hooks', 'qemu.d')

    @property
    def qemu_run_dir(self) -> str:
        """The host's view of the namespace's /run/libvirt/qemu."""
        return self.path('run', 'qemu')

    @property
    def log_file(self) -> str:
        return self.path('libvirtd.log')

    @property
    def pidfile(self) -> str:
        return self.path('run', 'libvirtd.pid')

    @property
    def virtlogd_pidfile(self) -> str:
        return self.path('run', 'virtlogd.pid')

    def pid(self) -> int | None:
        return _read_pid(self.pidfile)

    def enter(self) -> list[str]:
        """The command prefix that runs a command in libvirtd's mount
        namespace.

        Where its hooks run (its /run/libvirt): e.g. the node's agent.
        """
        pid = self.pid()
        if pid is None:
            raise SandboxError('libvirtd is not running (%s)' % self.pidfile)
        return ['nsenter', '--target', str(pid), '--mount', '--']

    # -- life cycle ---------------------------------------------------------
    def prepare(self) -> None:
        """The private directories: the host's config, no guests, no hooks."""
        if shutil.which('unshare') is None:
            raise SandboxError('unshare not found: apt-get install util-linux')
        for host, name in PRIVATE_DIRS:
            os.makedirs(self.path(name), exist_ok=True)
            if host in RUNTIME_DIRS and not os.path.isdir(host):
                # A new machine without systemd: nothing ran the package's
                # tmpfiles.d rule or a libvirtd that would have made it.
                LOG.info('creating %s (the mount point of the private '
                         'libvirtd\'s run directory)', host)
                os.makedirs(host, mode=0o755, exist_ok=True)
            if not os.path.isdir(host):
                raise SandboxError('%s is missing: apt-get install '
                                   'libvirt-daemon-system' % host)
        etc = self.path('etc')
        for entry in os.listdir('/etc/libvirt'):
            # Not the host's guests, networks (a default network would add
            # a bridge to the host) or hooks.
            if entry in ('qemu', 'hooks', 'storage', 'secrets'):
                continue
            src = os.path.join('/etc/libvirt', entry)
            dst = os.path.join(etc, entry)
            if os.path.isdir(src):
                shutil.copytree(src, dst, dirs_exist_ok=True)
            else:
                shutil.copy2(src, dst)
        if self.host_uuid is not None:
            set_conf(os.path.join(etc, 'libvirtd.conf'),
                     {'host_uuid': '"%s"' % self.host_uuid})
        for sub in ('qemu', 'hooks/qemu.d', 'secrets'):
            os.makedirs(os.path.join(etc, sub), exist_ok=True)
        os.chmod(os.path.join(etc, 'hooks'), 0o755)
        lib_qemu = self.path('lib', 'qemu')
        os.makedirs(lib_qemu, exist_ok=True)
        os.makedirs(self.path('log', 'qemu'), exist_ok=True)
        try:
            shutil.chown(lib_qemu, QEMU_USER, QEMU_USER)
        except (LookupError, OSError):
            pass
        os.chmod(lib_qemu, 0o751)

    def script(self) -> str:
        # The namespace starts with a copy of every host mount. A copy of a
        # FUSE mount (another emulator, another tool's) would keep that
        # filesystem alive after the host unmounts it (the host's mounts
        # need not be shared, so the unmount does not propagate): drop every
        # FUSE mount that is not below our own directory.
        keep = shlex.quote(os.path.dirname(os.path.abspath(self.workdir)))
        lines = ['set -e', 'mount --make-rslave /',
                 *(['hostname %s' % shlex.quote(self.hostname)]
                   if self.hostname else []),
                 "awk '$3 ~ /^fuse/ {print $2}' /proc/self/mounts | "
                 'while read -r m; do case "$m" in %s/*) ;; '
                 '*) umount -l "$m" 2>/dev/null || true ;; esac; done'
                 % keep]
        for host, name in PRIVATE_DIRS:
            lines.append('mount --bind %s %s' % (shlex.quote(self.path(name)),
                                                 host))
        for src, dst in self.binds:
            lines.append('mount --bind %s %s' % (shlex.quote(src),
                                                 shlex.quote(dst)))
        lines += self.setup
        # After a restart of libvirtd alone, its guests still log through
        # the virtlogd already running.
        pidfile = shlex.quote(self.virtlogd_pidfile)
        lines.append('kill -0 "$(cat %s 2>/dev/null)" 2>/dev/null || '
                     'virtlogd -d -p %s' % (pidfile, pidfile))
        lines.append('exec %s -I -S -c %s libvirtd -p %s' % (
            shlex.quote(sys.executable), shlex.quote(REAPER),
            shlex.quote(self.pidfile)))
        return '\n'.join(lines) + '\n'

    def start(self, timeout: float = START_TIMEOUT,
              die_with_parent: bool = False) -> None:
        """Start and wait until it answers; SandboxError names what failed.

        ``die_with_parent``: libvirtd gets SIGTERM if the caller dies (test
        fixtures); the demo's ``--keep`` needs it to outlive the caller.
        """
        self.prepare()
        log = open(self.log_file, 'ab')
        try:
            self.proc = subprocess.Popen(
                ['unshare', '--mount', '--propagation', 'slave',
                 *(['--uts'] if self.hostname else []), '--',
                 'sh', '-c', self.script()],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True,
                preexec_fn=_die_with_parent if die_with_parent else None)
        finally:
            log.close()
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        proc = self.proc

        def answers() -> bool:
            if proc is not None and proc.poll() is not None:
                raise SandboxError('libvirtd exited with status %s before it '
                                   'answered (log: %s): %s'
                                   % (proc.returncode, self.log_file,
                                      self.log_tail()))
            try:
                res = subprocess.run(['virsh', '-c', self.uri, 'version'],
                                     capture_output=True, timeout=10)
            except subprocess.TimeoutExpired:
                return False      # busy probing QEMU: not ready yet
            return res.returncode == 0

        try:
            wait_for(answers, timeout, 'libvirtd', step=0.2)
        except SandboxError as exc:
            if 'timed out' not in str(exc):
                raise
            raise SandboxError('libvirtd did not answer within %.0f s (log: '
                               '%s)' % (timeout, self.log_file)) from None

    def log_tail(self, lines: int = 1) -> str:
        try:
            with open(self.log_file, encoding='utf-8', errors='replace') as fh:
                text = fh.read().strip().splitlines()
        except OSError:
            return ''
        return ' | '.join(text[-lines:])

    def reload(self) -> None:
        """SIGHUP: libvirtd looks for hook scripts again; guests keep running."""
        pid = self.pid()
        if pid is None:
            raise SandboxError('libvirtd is not running (log: %s)'
                               % self.log_file)
        os.kill(pid, signal.SIGHUP)

    def virsh(self, *args: str, check: bool = True,
              timeout: float = 120) -> subprocess.CompletedProcess:
        res = subprocess.run(['virsh', '-q', '-c', self.uri, *args],
                             capture_output=True, text=True, timeout=timeout)
        if check and res.returncode != 0:
            msg = (res.stderr or res.stdout).strip().splitlines()
            raise SandboxError('virsh %s failed: %s' % (
                ' '.join(args[:2]), msg[-1] if msg else
                'exit %d' % res.returncode))
        return res

    def qemu_pids(self) -> list[int]:
        """Live QEMU processes of this libvirtd's guests (from pidfiles;
        not ``driver.pid``, libvirt's QEMU driver's own: the libvirtd).
        """
        out = []
        for path in glob.glob(os.path.join(self.qemu_run_dir, '*.pid')):
            if os.path.basename(path) == 'driver.pid':
                continue
            pid = _read_pid(path)
            if pid is not None:
                out.append(pid)
        return out

    def stop(self) -> list[str]:
        """Destroy every guest, stop the daemons, remove ``workdir``.

        Returns the problems met (empty when all went); never raises.
        """
        problems: list[str] = []
        pid = self.pid()
        if pid is not None:
            try:
                names = self.virsh('list', '--all', '--name', check=False,
                                   timeout=30).stdout.splitlines()
                for name in filter(None, names):
                    self.virsh('destroy', name, check=False, timeout=60)
                    self.virsh('undefine', name, check=False, timeout=60)
            except (OSError, subprocess.SubprocessError) as exc:
                problems.append('guests: %s' % exc)
            stop_pid(pid, 30)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        stop_pid(_read_pid(self.virtlogd_pidfile), 10)
        for qemu in self.qemu_pids():   # libvirtd died before destroying
            stop_pid(qemu, 10)
        for qemu in self.qemu_pids():
            problems.append('QEMU %d did not exit' % qemu)
        if pid is not None and pid_alive(pid):
            problems.append('libvirtd %d did not exit' % pid)
        if not problems:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return problems


def set_conf(path: str, values: Mapping[str, str]) -> None:
    """Set ``key = value`` lines of a libvirt conf file (others kept).

    A key set already is replaced, so that each is there once; a missing
    file is created.
    """
    try:
        with open(path, encoding='utf-8') as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        lines = []
    keep = [line for line in lines
            if line.split('=', 1)[0].strip() not in values]
    keep += ['%s = %s' % item for item in values.items()]
    with open(path, 'w', encoding='utf-8') as fh:
        fh.write('\n'.join(keep) + '\n')


def _read_pid(path: str) -> int | None:
    """The pidfile's live process; a zombie counts as gone.

    PID 1 in a container may never reap the daemons that double-forked.
    """
    return procfs.read_pidfile(path)
