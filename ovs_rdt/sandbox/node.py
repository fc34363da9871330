"""Compute nodes side by side on one machine, for migrations between them.

``Node(workdir, name, profile)`` is what one node of ovs-rdt is: the resctrl
emulator of ``profile`` mounted below ``workdir/mnt`` (a shared mount, so
the mount reaches the libvirtd's namespace), a :class:`PrivateLibvirtd` in
namespaces of its own (mount and UTS: host name ``name``) with its own
``host_uuid``, and the hook installed in its hook directory, bound to
``workdir/ovs-rdt.conf``.  Two nodes share this machine's CPUs, ``/proc``
and loopback, and nothing else: each has its own resctrl, hook directory,
guest definitions, sockets and logs, and the profiles may differ (a Xeon
Gold 6230 source and an E7-8890 v4 destination).

:func:`migrate` moves a guest from one node to the other as an operator or
Nova does (``virsh migrate --p2p``): the source's libvirtd reaches the
destination's over its socket (:attr:`PrivateLibvirtd.peer_uri`), and QEMU's
migration stream goes over 127.0.0.1 only.  :meth:`Node.stop` ends it all
(guests, daemons, mount) from its files alone, and says what it could not.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from typing import Sequence
import uuid

from ovs_rdt import atomicfile
from ovs_rdt.sandbox.emulator import MountedEmulator
from ovs_rdt.sandbox.libvirtd import (PrivateLibvirtd, START_TIMEOUT,
                                      make_shared, unmake_shared)
from ovs_rdt.sandbox.wait import run

#: Where QEMU's migration stream goes (and the destination QEMU listens).
LOOPBACK = '127.0.0.1'
HOOK_NAME = '50-ovs-rdt'


class Node:
    """An emulator, a private libvirtd and the hook, below ``workdir``."""

    def __init__(self, workdir: str, name: str, profile: str,
                 emulator_args: Sequence[str] = (),
                 host_uuid: str | None = None) -> None:
        self.workdir = workdir
        self.name = name
        self.mount_base = os.path.join(workdir, 'mnt')
        self.emulator = MountedEmulator(os.path.join(self.mount_base,
                                                     'emulator'),
                                        profile, emulator_args)
        self.libvirtd = PrivateLibvirtd(
            os.path.join(workdir, 'libvirt'),
            host_uuid=host_uuid or str(uuid.uuid4()), hostname=name)
        self.config_file = os.path.join(workdir, 'ovs-rdt.conf')
        self.hook = os.path.join(self.libvirtd.hooks_dir, HOOK_NAME)
        self._shared = False

    def configure(self, text: str) -> None:
        """Replace the hook's configuration (read at every event)."""
        atomicfile.write(self.config_file, text)

    def start(self, config: str = '', timeout: float = START_TIMEOUT,
              die_with_parent: bool = False) -> None:
        """Mount, configure, install the hook, start libvirtd.

        ``config`` is the hook's configuration without ``[resctrl]``
        ``root`` and ``sysfs_cpu_root``, which name this node's emulator.
        """
        os.makedirs(self.emulator.dir, exist_ok=True)
        make_shared(self.mount_base)
        self._shared = True
        self.emulator.start()
        self.configure(config + self.resctrl_section())
        self.libvirtd.prepare()
        run(sys.executable, '-m', 'ovs_rdt.cmd.main', 'install-hook',
            '--hooks-dir', self.libvirtd.hooks_dir, '--config-file',
            self.config_file)
        self.libvirtd.start(timeout, die_with_parent=die_with_parent)

    def resctrl_section(self) -> str:
        return '[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n' % (
            self.emulator.root, self.emulator.sysfs)

    def stop(self) -> list[str]:
        """Guests, daemons, the emulator, the files; the problems met.

        libvirtd goes first: destroying its guests runs the hook, which
        needs the emulator to give their groups back.
        """
        problems = ['%s libvirtd: %s' % (self.name, p)
                    for p in self.libvirtd.stop()]
        if os.path.exists(self.emulator.pid_file) or \
                os.path.isdir(self.emulator.root):
            problems += ['%s emulator: %s' % (self.name, p)
                         for p in self.emulator.stop()]
        if self._shared:
            unmake_shared(self.mount_base)
        if not problems:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return problems


def migrate_args(dst: PrivateLibvirtd, name: str, live: bool = True,
                 extra: Sequence[str] = ()) -> list[str]:
    """``virsh`` arguments moving guest ``name`` to ``dst`` over loopback."""
    args = ['migrate', '--p2p']
    if live:
        # A port of its own: each private libvirtd takes the first port of
        # the same range (49152-49215) it sees free, and another sandbox's
        # migration on this host may bind it first ("Address already in
        # use").  The kernel hands out ephemeral ports in turn.
        with socket.socket() as sock:
            sock.bind((LOOPBACK, 0))
            port = sock.getsockname()[1]
        args += ['--live', '--migrateuri', 'tcp://%s:%d' % (LOOPBACK, port),
                 '--listen-address', LOOPBACK]
    return args + [*extra, name, dst.peer_uri]


def migrate(src: PrivateLibvirtd, dst: PrivateLibvirtd, name: str,
            live: bool = True, extra: Sequence[str] = (),
            timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``virsh migrate`` on ``src``; its result (never raises on exit).

    ``live=False`` with ``extra=['--offline', '--persistent']`` moves the
    definition only (a cold migration then starts it on ``dst``).
    """
    return src.virsh(*migrate_args(dst, name, live, extra), check=False,
                     timeout=timeout)
