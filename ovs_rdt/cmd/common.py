"""What the subcommands share: building the resctrl layer from settings."""
from __future__ import annotations

from ovs_rdt.conf import Settings
from ovs_rdt.core.model import Group
from ovs_rdt.manager import CacheManager
from ovs_rdt import members
from ovs_rdt.resctrl import Resctrl


def vm_names(settings: Settings) -> tuple[dict[str, str] | None, str]:
    """uuid -> domain name from libvirt (a one-shot read-only connection to
    ``[libvirt] uri``), or None; and one line saying where VM names come
    from.
    """
    from ovs_rdt.agent import virt
    uri = settings.libvirt.uri
    try:
        names = virt.domain_names(uri)
    except virt.LibvirtUnavailable as exc:
        return None, ('VM names: from QEMU command lines (%s)' % exc)
    return names, 'VM names: from libvirt at %s' % uri


def resctrl_from(settings: Settings) -> Resctrl:
    return Resctrl.from_settings(settings)


def manager_from(settings: Settings) -> CacheManager:
    return CacheManager.from_settings(settings)


def members_of(groups: list[Group], names: dict[str, str] | None
               ) -> dict[str, list[dict]]:
    """Each group's members but the default group's, from its tasks
    (:func:`ovs_rdt.members.describe`; ``names``: uuid -> domain name from
    libvirt).
    """
    return {g.name: members.describe(g.tasks, vm_names=names)
            for g in groups if not g.is_root}
