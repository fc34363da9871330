"""A mounted resctrl emulator (``python3 -m ovs_rdt.emulator -d``).

``MountedEmulator(directory, profile)`` mounts it at ``directory/resctrl``
with its sysfs CPU tree (``sysfs``), footprints file (``footprints``, see
:meth:`set_footprints` and doc/emulator.md), log and pid file beside it;
:meth:`stop` unmounts it and makes sure the daemon is gone.  Used by
``ovs-rdt demo`` and the functional tests.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Sequence

from ovs_rdt import atomicfile
from ovs_rdt.sandbox.wait import SandboxError, kill_after, run, wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def mounted(path: str) -> bool:
    """Whether ``path`` is in the mount table (even if its daemon died)."""
    with open('/proc/self/mounts', encoding='utf-8', errors='replace') as fh:
        return any(len(line.split()) > 1 and line.split()[1] == path
                   for line in fh)


def missing() -> str | None:
    """Which part FUSE needs is missing here, or None."""
    if not os.path.exists('/dev/fuse'):
        return '/dev/fuse is missing (modprobe fuse)'
    if shutil.which('fusermount3') is None:
        return 'fusermount3 is not installed (fuse3)'
    return None


class MountedEmulator:
    """The emulator mounted below ``directory``."""

    def __init__(self, directory: str, profile: str,
                 extra_args: Sequence[str] = (), timeout: float = 60.0) -> None:
        self.dir = directory
        self.profile = profile
        self.extra_args = list(extra_args)
        self.timeout = timeout
        self.root = os.path.join(directory, 'resctrl')
        self.sysfs = os.path.join(directory, 'sysfs')
        self.footprints = os.path.join(directory, 'footprints.json')
        self.faults = os.path.join(directory, 'faults')
        self.log_file = os.path.join(directory, 'emulator.log')
        self.pid_file = os.path.join(directory, 'emulator.pid')
        self.pid = 0

    def start(self) -> 'MountedEmulator':
        why = missing()
        if why:
            raise SandboxError('the resctrl emulator needs FUSE: %s' % why)
        os.makedirs(self.root, exist_ok=True)
        cmd = [sys.executable, '-m', 'ovs_rdt.emulator', '-d',
               '--profile', self.profile, '--sysfs-dir', self.sysfs,
               '--footprints', self.footprints, '--faults', self.faults,
               '--pid-file', self.pid_file,
               '--log-file', self.log_file, *self.extra_args, self.root]
        env = dict(os.environ)
        env['PYTHONPATH'] = os.pathsep.join(
            p for p in (REPO, env.get('PYTHONPATH', '')) if p)
        try:
            proc = run(*cmd, check=False, timeout=self.timeout, env=env)
        except SandboxError as exc:
            raise SandboxError('the emulator did not start: %s (log: %s)'
                               % (exc, self.log_file)) from None
        if proc.returncode != 0:
            raise SandboxError('the emulator failed to start (%d): %s'
                               % (proc.returncode, proc.stderr.strip()))
        wait_for(lambda: mounted(self.root), 10,
                 '%s to become a mount point' % self.root)
        with open(self.pid_file, encoding='ascii') as fh:
            self.pid = int(fh.read())
        return self

    def set_footprints(self, mapping: dict[str, object]) -> None:
        """Replace the footprints file (the emulator re-reads it on change)."""
        atomicfile.write(self.footprints, json.dumps(mapping))

    def set_faults(self, *rules: str) -> None:
        """Inject faults (``"write /*/schemata EIO"``; none: clear them)."""
        atomicfile.write(self.faults, ''.join(rule + '\n' for rule in rules))

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def stop(self) -> list[str]:
        """Unmount and end the daemon; the problems met (never raises)."""
        problems = []
        unmounted = not mounted(self.root)     # e.g. a test sent SIGTERM
        if not unmounted:
            close_own_fds_below(self.root)
            try:       # busy while a closing descriptor is released
                wait_for(lambda: run('fusermount3', '-u', self.root,
                                     check=False).returncode == 0,
                         10, 'unmount of %s' % self.root, step=0.1)
                unmounted = True
            except SandboxError:
                pass
        if not unmounted:
            try:
                run('fusermount3', '-uz', self.root, check=False)
            except SandboxError as exc:
                problems.append(str(exc))
            problems.append('could not unmount %s (lazily detached)'
                            % self.root)
        if kill_after(self.pid, 30):     # a loaded machine is slow
            problems.append('emulator daemon %d did not exit after unmount'
                            % self.pid)
        return problems


def close_own_fds_below(root: str) -> None:
    """Close this process's file descriptors on files below ``root``.

    The resctrl layer reads with ``os.open``/``os.read`` (the hook's start
    costs fewer system calls so); an interrupt (Ctrl-C, the SIGTERM the
    demo turns into one) that lands just as ``os.open`` returns leaves
    that descriptor open, since it never reached the ``try`` that closes
    it.  A process that tears its own emulator down after such an
    interrupt (the demo) would keep the mount busy: unmounting fails.
    Only descriptors below the mount are closed: no Python file object
    owns one (the layer keeps none open between calls).
    """
    prefix = root.rstrip('/') + '/'
    fd_dir = '/proc/self/fd'
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return
    for name in names:
        try:
            target = os.readlink(os.path.join(fd_dir, name))
        except OSError:
            continue          # closed meanwhile (listdir's own descriptor)
        if target == root or target.startswith(prefix):
            try:
                os.close(int(name))
            except OSError:
                pass


def copy_tree(src: str, dst: str) -> None:
    """A plain-file copy of a resctrl tree.

    By read(2), not shutil.copytree: resctrl files (kernfs and the
    emulator alike) say size 0, and sendfile() copies nothing of them.
    """
    for dirpath, _dirs, files in os.walk(src):
        target = os.path.join(dst, os.path.relpath(dirpath, src))
        os.makedirs(target, exist_ok=True)
        for name in files:
            try:
                with open(os.path.join(dirpath, name), 'rb') as fh:
                    data = fh.read()
            except OSError:
                continue        # e.g. a write-only file
            with open(os.path.join(target, name), 'wb') as fh:
                fh.write(data)
