"""libvirt-driver computes on Nova's fakelibvirt, with NUMA cells, whose
domains start through the real ovs-rdt hook on their emulated node.

A host of kind ``nodes.GOLD`` is what the emulated ``xeon-gold-6230`` is:
2 sockets of 20 cores, HT off, node N = socket N = L3 domain N, CPUs
0-19 on socket 0 and 20-39 on socket 1 (fakelibvirt numbers a NUMA
cell's CPUs in a run, as the emulator's sysfs tree numbers a socket's).
Per node, CPUs 0-15 / 20-35 are for pinned instances
(``[compute] cpu_dedicated_set``), 16-19 / 36-39 for the others
(``cpu_shared_set``: their vCPUs float over both sockets, as the hook
sees it).
"""
from __future__ import annotations

import os
from typing import Any

import fixtures

from nova import objects
from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.functional.libvirt import base as libvirt_base

from tests.nova_functional import base
from tests.nova_functional import hooked
from tests.nova_functional import nodes

CPUS = 40


class LibvirtRDTTestCase(base.RDTMixin, libvirt_base.ServersTestBase):
    """Nova's libvirt functional base with ovs-rdt (see :mod:`base`)."""

    ADMIN_API = True
    microversion = 'latest'

    def setUp(self) -> None:
        super().setUp()
        self.useFixture(fixtures.MonkeyPatch(
            'nova.virt.libvirt.host.Host.get_online_cpus',
            lambda host: set(range(CPUS))))
        self.flags(cpu_dedicated_set='0-15,20-35',
                   cpu_shared_set='16-19,36-39', group='compute')
        self.flags(vcpu_pin_set=None)
        self.hooked = self.useFixture(hooked.HookedHosts())

    def _get_connection(self, host_info: Any = None, pci_info: Any = None,
                        mdev_info: Any = None, vdpa_info: Any = None,
                        libvirt_version: Any = None,
                        qemu_version: Any = None,
                        hostname: str | None = None) -> Any:
        """A fake connection to a 40-CPU host (Nova's base refuses more
        than 16: it mocks its online CPUs to 16, which setUp widens).
        """
        return fakelibvirt.Connection(
            'qemu:///system', version=fakelibvirt.FAKE_LIBVIRT_VERSION,
            hv_version=fakelibvirt.FAKE_QEMU_VERSION,
            host_info=host_info, hostname=hostname)

    def start_one(self, name: str, node: nodes.Node) -> None:
        assert node.kind.profile == 'xeon-gold-6230', node.kind
        self.hooked.add(name, node.kind)
        self.start_compute(name, host_info=fakelibvirt.HostInfo(
            cpu_nodes=2, cpu_sockets=1, cpu_cores=CPUS // 2,
            cpu_threads=1))

    def pinned(self, ways: int, vcpus: int = 2) -> str:
        """A flavor with ``ways`` on the one NUMA node its dedicated CPUs
        are pinned to (Placement: ``ways`` x 1 domain).
        """
        return self.flavor(ways, domains=1, extra={
            'hw:cpu_policy': 'dedicated', 'hw:numa_nodes': '1'},
            vcpus=vcpus)

    def cells(self, server: dict) -> set[int]:
        """The host NUMA cells Nova gave the instance."""
        numa = objects.InstanceNUMATopology.get_by_instance_uuid(
            self.ctxt, server['id'])
        return {cell.id for cell in numa.cells}

    def planned(self, host: str, server: dict) -> dict[int, int]:
        """Ways per L3 domain the hook reserved for the instance on
        ``host``'s emulated node: its group ``ovsrdt-vm-<uuid>``'s mask
        where it is its own, 0 where it mirrors the default group's (the
        domains its vCPUs do not run on).
        """
        emu = self.hooked.emulators[host]
        mine = _l3(emu.path('ovsrdt-vm-' + server['id'], 'schemata'))
        default = _l3(emu.path('schemata'))
        return {dom: 0 if mask == default[dom] else bin(mask).count('1')
                for dom, mask in mine.items()}

    def groups(self, host: str) -> list[str]:
        """The VM groups on ``host``'s emulated node."""
        return sorted(name for name in os.listdir(
            self.hooked.emulators[host].root) if name.startswith('ovsrdt-vm-'))


def _l3(path: str) -> dict[int, int]:
    """The ``L3:`` line of a schemata file: domain -> mask."""
    with open(path, encoding='ascii') as fh:
        for line in fh:
            if line.strip().startswith('L3:'):
                return {int(dom): int(mask, 16) for dom, mask in (
                    item.split('=')
                    for item in line.split(':', 1)[1].strip().split(';'))}
    raise AssertionError('no L3 line in %s' % path)
