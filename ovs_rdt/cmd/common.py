"""What the subcommands share: building the resctrl layer from settings."""
from __future__ import annotations

from ovs_rdt.conf import Settings
from ovs_rdt.manager import CacheManager
from ovs_rdt.resctrl import Resctrl


def resctrl_from(settings: Settings) -> Resctrl:
    return Resctrl.from_settings(settings)


def manager_from(settings: Settings) -> CacheManager:
    return CacheManager(Resctrl.from_settings(settings), settings)
