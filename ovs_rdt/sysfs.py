"""CPU -> L3 cache domain and CPU -> NUMA node, read from sysfs.

Not resctrl: the Linux CPU and node trees (``/sys/devices/system/cpu``,
``.../node``), each root injectable (the emulator's ``--sysfs-dir``).
"""
from __future__ import annotations

import os

from ovs_rdt.exceptions import RDTError

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Callable


class CpuTopology:
    """The CPU and NUMA node trees below ``cpu_root`` and ``node_root``,
    each file read whole with ``read`` (the resctrl layer's: one system
    call per file).
    """

    def __init__(self, read: Callable[[str], str],
                 cpu_root: str = '/sys/devices/system/cpu',
                 node_root: str | None = None) -> None:
        self.read = read
        self.cpu_root = cpu_root
        #: Where nodeN/cpulist are read; None: beside or inside the CPU root.
        self.sysfs_node_root = node_root

    def cpu_domains(self) -> dict[int, int]:
        """CPU id -> L3 cache id, from sysfs (empty when unreadable)."""
        out: dict[int, int] = {}
        try:
            names = os.listdir(self.cpu_root)
        except OSError:
            return out
        for name in names:
            if not name.startswith('cpu') or not name[3:].isdigit():
                continue
            cache = os.path.join(self.cpu_root, name, 'cache')
            for index in ('index3', 'index2', 'index1', 'index0', 'index4'):
                try:
                    if self.read(os.path.join(cache, index, 'level')).strip() != '3':
                        continue
                    out[int(name[3:])] = int(self.read(
                        os.path.join(cache, index, 'id')).strip())
                    break
                except (OSError, ValueError):
                    continue
        return out

    def node_root(self) -> str:
        """The NUMA node directory: ``sysfs_node_root``, else derived.

        The emulator's ``--sysfs-dir`` tree has ``node/`` inside the CPU
        root; Linux has ``/sys/devices/system/node`` beside
        ``/sys/devices/system/cpu``.
        """
        if self.sysfs_node_root:
            return self.sysfs_node_root
        inside = os.path.join(self.cpu_root, 'node')
        if os.path.isdir(inside):
            return inside
        return os.path.join(
            os.path.dirname(os.path.normpath(self.cpu_root)), 'node')

    def cpu_nodes(self) -> dict[int, int]:
        """CPU id -> NUMA node id, from ``nodeN/cpulist`` (empty when
        unreadable; a node whose list cannot be read or parsed is skipped).
        """
        from ovs_rdt.inputs import cpulists

        root = self.node_root()
        out: dict[int, int] = {}
        try:
            names = os.listdir(root)
        except OSError:
            return out
        for name in names:
            if not name.startswith('node') or not name[4:].isdigit():
                continue
            path = os.path.join(root, name, 'cpulist')
            try:
                cpus = cpulists.parse(self.read(path).strip(), path)
            except (OSError, RDTError):
                continue
            for cpu in cpus:
                out[cpu] = int(name[4:])
        return out

    def numa_l3(self) -> dict[int, frozenset[int]]:
        """NUMA node -> its L3 cache domains (:mod:`ovs_rdt.core.topology`);
        empty when sysfs has no nodes or no caches.
        """
        from ovs_rdt.core import topology

        return topology.from_cpus(self.cpu_nodes(), self.cpu_domains())
