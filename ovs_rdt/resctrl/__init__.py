"""The resctrl layer's front: one :class:`Resctrl` below an injectable root.

Each job in its own room, all of one object (a subclass's ``read`` or
``_write_fd`` is every room's):

* :mod:`~ovs_rdt.resctrl.text`: what the kernel prints, parsed (pure);
* :mod:`~ovs_rdt.resctrl.files`: raw I/O (``last_cmd_status`` in every
  error) and the flock;
* :mod:`~ovs_rdt.resctrl.platform`: the platform from ``info/``, and
  whether it is stale;
* :mod:`~ovs_rdt.resctrl.groups`: reading any group;
* :mod:`~ovs_rdt.resctrl.owned`: writes, to ``ovsrdt-`` groups only;
* :mod:`~ovs_rdt.resctrl.monitor`: ``mon_data`` and counter assignments;
* :mod:`ovs_rdt.sysfs`: the CPUs' cache domains and NUMA nodes (not
  resctrl: ``cpus``).
"""
from __future__ import annotations

from ovs_rdt.core.model import Platform
from ovs_rdt.resctrl.groups import Groups
from ovs_rdt.resctrl.monitor import Monitoring
from ovs_rdt.resctrl.owned import OwnedWrites

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Any

    from ovs_rdt.sysfs import CpuTopology


class Resctrl(Monitoring, OwnedWrites, Groups):
    """resctrl below ``root`` (``/sys/fs/resctrl`` on a real node)."""

    def __init__(self, root: str = '/sys/fs/resctrl',
                 sysfs_cpu_root: str = '/sys/devices/system/cpu',
                 lock_timeout: float = 30.0,
                 mounts: str = '/proc/mounts',
                 sysfs_node_root: str | None = None) -> None:
        super().__init__(root, lock_timeout, mounts)
        self._sysfs = (sysfs_cpu_root, sysfs_node_root)
        self._cpus: CpuTopology | None = None

    @property
    def cpus(self) -> CpuTopology:
        """The CPU topology from sysfs, read through :meth:`read`."""
        if self._cpus is None:
            # (Here: only pinned guests and the CLI read it; a hook event
            # for an unpinned guest imports one module less.)
            from ovs_rdt.sysfs import CpuTopology
            self._cpus = CpuTopology(self.read, *self._sysfs)
        return self._cpus

    @classmethod
    def from_settings(cls, settings: Any) -> 'Resctrl':
        """From the ``[resctrl]`` options of a :class:`~ovs_rdt.conf.Settings`."""
        cfg = settings.resctrl
        return cls(cfg.root, cfg.sysfs_cpu_root, cfg.lock_timeout,
                   sysfs_node_root=cfg.sysfs_node_root)

    def platform(self, refresh: bool = False, cpus: bool = False) -> Platform:
        """The platform (:mod:`~ovs_rdt.resctrl.platform`); ``cpus``: with
        its CPUs' cache domains (``Platform.cpu_domains``), read from sysfs
        once per platform read: the hook needs them only for pinned VMs.
        """
        plat = super().platform(refresh)
        if cpus and plat.cpu_domains is None:
            plat.cpu_domains = self.cpus.cpu_domains()
        return plat
