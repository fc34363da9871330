"""fakelibvirt hosts whose domains start through the real ovs-rdt hook.

Each host gets its own emulated node (the resctrl emulator mounted with
its kind's profile, an ``ovs-rdt.conf`` with its kind's allocation).  The
domain XML Nova's libvirt driver passes to ``defineXML`` is kept (fakelibvirt
``XMLDesc()`` drops ``<metadata>``, where Nova writes the flavor's extra
specs) and fed, as libvirt does, on standard input to ``ovs-rdt-hook NAME
prepare begin -`` when the domain is started, and to ``release end`` when a
running domain is destroyed; an incoming live migration (``createXML`` of
the destination XML) gets ``migrate begin`` then ``prepare begin``.  A
refusal fails the start with libvirt's error, which makes Nova reschedule
the instance.  The ``started`` event (moving QEMU's vCPU threads) is not
sent: fakelibvirt runs no QEMU.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Any
from xml.etree import ElementTree

import fixtures

from nova.tests.fixtures import libvirt as fakelibvirt

from ovs_rdt.sandbox.emulator import MountedEmulator
from tests.nova_functional import nodes

_FAKE = 'nova.tests.fixtures.libvirt.'


class HookedHosts(fixtures.Fixture):
    """Emulated nodes for fakelibvirt hosts, and the hook wired in."""

    def _setUp(self) -> None:
        self.emulators: dict[str, MountedEmulator] = {}
        self.configs: dict[str, str] = {}
        self.defined: dict[tuple[str, str], str] = {}
        self.refusals: list[tuple[str, str, str]] = []
        self._tmp = self.useFixture(fixtures.TempDir(
            rootdir='/dev/shm' if os.path.isdir('/dev/shm') else None)).path
        hosts = self

        real_define = fakelibvirt.Connection.defineXML
        real_create_xml = fakelibvirt.Connection.createXML
        real_create = fakelibvirt.Domain.createWithFlags

        def define(conn: fakelibvirt.Connection, xml: str) -> object:
            dom = real_define(conn, xml)
            hosts.defined[(conn.hostname, dom.name())] = xml
            return dom

        def create_xml(conn: fakelibvirt.Connection, xml: str,
                       flags: int) -> object:
            host = conn.hostname
            if host in hosts.configs:
                name = ElementTree.fromstring(xml).findtext('name')
                hosts.defined[(host, name)] = xml
                hosts.hook(host, name, 'migrate', 'begin')
                hosts.hook(host, name, 'prepare', 'begin')
            return real_create_xml(conn, xml, flags)

        def create(dom: fakelibvirt.Domain, flags: int) -> None:
            host = dom._connection.hostname
            if host in hosts.configs:
                hosts.hook(host, dom.name(), 'prepare', 'begin')
            real_create(dom, flags)

        def stopping(real: Any) -> Any:
            """A way QEMU stops: libvirt then runs ``release end``."""
            def stop(dom: fakelibvirt.Domain, *args: Any) -> Any:
                was_running = dom.isActive()
                out = real(dom, *args)
                host = dom._connection.hostname
                if was_running and host in hosts.configs:
                    hosts.hook(host, dom.name(), 'release', 'end')
                return out
            return stop

        self.useFixture(fixtures.MonkeyPatch(_FAKE + 'Connection.defineXML',
                                             define))
        self.useFixture(fixtures.MonkeyPatch(_FAKE + 'Connection.createXML',
                                             create_xml))
        self.useFixture(fixtures.MonkeyPatch(
            _FAKE + 'Domain.createWithFlags', create))
        for name in ('destroy', 'shutdown', 'managedSave'):
            self.useFixture(fixtures.MonkeyPatch(
                _FAKE + 'Domain.' + name,
                stopping(getattr(fakelibvirt.Domain, name))))

    def add(self, host: str, kind: nodes.Kind) -> MountedEmulator:
        """Emulate ``host``'s node (unmounted at cleanup)."""
        emu = MountedEmulator(tempfile.mkdtemp(prefix=host + '-',
                                               dir=self._tmp), kind.profile,
                              kind.emulator_args)
        try:
            emu.start()
        except Exception:
            emu.stop()
            raise
        self.addCleanup(self._stop, emu)
        conf = os.path.join(emu.dir, 'ovs-rdt.conf')
        with open(conf, 'w', encoding='ascii') as fh:
            fh.write('[DEFAULT]\nlog_file = %s\n\n[resctrl]\nroot = %s\n'
                     'sysfs_cpu_root = %s\n\n%s'
                     % (os.path.join(emu.dir, 'ovs-rdt.log'), emu.root,
                        emu.sysfs, kind.conf))
        self.emulators[host] = emu
        self.configs[host] = conf
        return emu

    @staticmethod
    def _stop(emu: MountedEmulator) -> None:
        problems = emu.stop()
        assert not problems, problems

    def hook(self, host: str, name: str, op: str, subop: str) -> None:
        """Run ``ovs-rdt-hook`` as libvirt does; a refusal raises
        libvirt's error.
        """
        xml = self.defined[(host, name)]
        proc = subprocess.run(
            [sys.executable, '-m', 'libvirt_hooks.hook', '--config-file',
             self.configs[host], name, op, subop, '-'],
            input=xml.encode(), capture_output=True, timeout=120,
            check=False)
        if proc.returncode != 0:
            why = proc.stderr.decode(errors='replace').strip()
            self.refusals.append((host, name, why))
            raise fakelibvirt.make_libvirtError(
                fakelibvirt.libvirtError,
                'Hook script execution failed: internal error: Child '
                'process (/etc/libvirt/hooks/qemu %s %s %s -) unexpected '
                'exit status %d: %s' % (name, op, subop, proc.returncode,
                                        why),
                error_code=fakelibvirt.VIR_ERR_INTERNAL_ERROR,
                error_domain=fakelibvirt.VIR_FROM_DOMAIN)
