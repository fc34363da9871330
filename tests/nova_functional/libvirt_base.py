"""libvirt-driver computes on Nova's fakelibvirt, with NUMA cells, whose
domains start through the real ovs-rdt hook on their emulated node.

A host of kind ``nodes.GOLD`` is what the emulated ``xeon-gold-6230`` is:
2 sockets of 20 cores, HT off, node N = socket N = L3 domain N = cache
group N, CPUs 0-19 on socket 0 and 20-39 on socket 1 (fakelibvirt numbers
a NUMA cell's CPUs in a run, as the emulator's sysfs tree numbers a
socket's).  Per node, CPUs 0-15 / 20-35 are for pinned instances
(``[compute] cpu_dedicated_set``), 16-19 / 36-39 for the others
(``cpu_shared_set``: their vCPUs float over both sockets, as the hook
sees it).

:meth:`LibvirtRDTTestCase.assert_counted` is the check of every step:
what Placement has allocated to each instance on each host is what the
host's resctrl holds for it, in Placement's unit (a way on every L3 of a
cache group; here a socket), and its CLOSID; what a move holds for a
revert (the migration's allocation) is the old flavor's.
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
from tests.nova_functional.nodes import RC_CLOSID, RC_WAYS

CPUS = 40
GROUP_PREFIX = 'ovsrdt-vm-'


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
        # Nova's own libvirt tests mock it ('{}': no disk to copy); the
        # domain is powered off as the real one does (the source's hook
        # then gives its ways back, before the destination takes its own)
        self.useFixture(fixtures.MonkeyPatch(
            'nova.virt.libvirt.driver.LibvirtDriver.'
            'migrate_disk_and_power_off', _power_off))

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

    def start_one(self, name: str, node: nodes.Node,
                  cell: str | None) -> None:
        assert node.kind.profile == 'xeon-gold-6230', node.kind
        self.hooked.add(name, node.kind)
        self.start_compute(name, host_info=fakelibvirt.HostInfo(
            cpu_nodes=2, cpu_sockets=1, cpu_cores=CPUS // 2,
            cpu_threads=1), cell_name=cell)

    def restart(self, host: str) -> None:
        self.flags(provider_config_location=os.path.join(
            self._provider_dirs, host), group='compute')
        self.restart_compute_service(host)

    def pinned(self, ways: int, vcpus: int = 1) -> str:
        """A flavor pinned to one NUMA node (dedicated CPUs): ``ways`` on
        that node's socket.
        """
        return self.flavor(ways, extra={
            'hw:cpu_policy': 'dedicated', 'hw:numa_nodes': '1'}, vcpus=vcpus)

    def cells(self, server: dict) -> set[int]:
        """The host NUMA cells Nova gave the instance."""
        numa = objects.InstanceNUMATopology.get_by_instance_uuid(
            self.ctxt, server['id'])
        return {cell.id for cell in numa.cells}

    # -- what the nodes hold -----------------------------------------------
    def held(self, host: str) -> dict[str, tuple[int, int]]:
        """Instance uuid -> (ways, CLOSIDs) its group holds on ``host``'s
        emulated node, in Placement's unit: per socket (a GOLD host's cache
        group) the ways of its own mask there, 0 where its mask is the
        default group's (its vCPUs do not run there); one CLOSID.
        """
        emu = self.hooked.emulators[host]
        default = _l3(emu.path('schemata'))
        out = {}
        for name in os.listdir(emu.root):
            if name.startswith(GROUP_PREFIX):
                mine = _l3(emu.path(name, 'schemata'))
                out[name[len(GROUP_PREFIX):]] = (sum(
                    0 if mask == default[dom] else bin(mask).count('1')
                    for dom, mask in mine.items()), 1)
        return out

    def planned(self, host: str, server: dict) -> dict[int, int]:
        """Ways per L3 domain the hook reserved for the instance."""
        emu = self.hooked.emulators[host]
        mine = _l3(emu.path(GROUP_PREFIX + server['id'], 'schemata'))
        default = _l3(emu.path('schemata'))
        return {dom: 0 if mask == default[dom] else bin(mask).count('1')
                for dom, mask in mine.items()}

    def allocated(self, host: str) -> dict[str, tuple[int, int]]:
        """Consumer uuid -> (ways, CLOSIDs) Placement allocated on
        ``host`` (instances and migrations).
        """
        found = self.placement.get(
            '/resource_providers/%s/allocations' % self.rp_uuid(host),
            version='1.17').body['allocations']
        return {uuid: (alloc['resources'].get(RC_WAYS, 0),
                       alloc['resources'].get(RC_CLOSID, 0))
                for uuid, alloc in found.items()
                if RC_WAYS in alloc['resources']
                or RC_CLOSID in alloc['resources']}

    def assert_counted(self, step: str,
                       unplanned: dict[str, tuple[int, int]] | None = None
                       ) -> None:
        """On every host: what Placement allocated to each instance is what
        resctrl holds for it; the one other allocation a host may have is
        the one ``unplanned`` names (host -> (ways, CLOSIDs)): a move's,
        holding the old flavor for a revert, or a stopped instance's, for
        its start (no QEMU: the hook gave the ways back); no node holds
        what Placement did not allocate.
        """
        migrations = dict(unplanned or {})
        for host in sorted(self.hooked.emulators):
            held = self.held(host)
            allocated = self.allocated(host)
            instances = {u: a for u, a in allocated.items() if u in held}
            others = {u: a for u, a in allocated.items() if u not in held}
            self.assertEqual(held, instances, '%s (%s): Placement allocated '
                             '%s, resctrl holds %s' % (host, step, allocated,
                                                       held))
            want = [migrations.pop(host)] if host in migrations else []
            self.assertEqual(want, list(others.values()),
                             '%s (%s): consumers holding cache without a '
                             'group on the node: %s' % (host, step, others))
        self.assertEqual({}, migrations, step)


def _power_off(driver: Any, context: Any, instance: Any, dest: Any,
               flavor: Any, network_info: Any, block_device_info: Any = None,
               timeout: int = 0, retry_interval: int = 0) -> str:
    """``LibvirtDriver.migrate_disk_and_power_off`` without its disks."""
    driver.power_off(instance, timeout, retry_interval)
    return '{}'


def _l3(path: str) -> dict[int, int]:
    """The ``L3:`` line of a schemata file: domain -> mask."""
    with open(path, encoding='ascii') as fh:
        for line in fh:
            if line.strip().startswith('L3:'):
                return {int(dom): int(mask, 16) for dom, mask in (
                    item.split('=')
                    for item in line.split(':', 1)[1].strip().split(';'))}
    raise AssertionError('no L3 line in %s' % path)
