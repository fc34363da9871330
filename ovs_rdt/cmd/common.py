"""What the subcommands share: building the resctrl layer from settings."""
from __future__ import annotations

from ovs_rdt.conf import Settings
from ovs_rdt.manager import CacheManager
from ovs_rdt.resctrl import Resctrl


def resctrl_from(settings: Settings) -> Resctrl:
    return Resctrl(settings.resctrl.root, settings.resctrl.sysfs_cpu_root,
                   settings.resctrl.lock_timeout)


def manager_from(settings: Settings) -> CacheManager:
    return CacheManager(resctrl_from(settings), settings)
