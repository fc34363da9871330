"""What changed in resctrl between two of the agent's re-scans, logged.

Other tools (pqos, libvirt's ``<cachetune>``, a hand-made ``mkdir``) make
and remove groups without ovs-rdt's lock or word, and the default group's
mask changes as pools, VMs and those tools come and go.  At every re-scan
the agent looks at the group names and the default group's masks (two
reads) and logs what changed since the last look: another tool's group
that appeared or went, and the default group's mask, whoever wrote it.
The first look only remembers.
"""
from __future__ import annotations

import logging
from typing import Any

from ovs_rdt.core.model import ROOT
from ovs_rdt.core.plan import domain_text
from ovs_rdt.exceptions import RDTError
from ovs_rdt import GROUP_PREFIX

LOG = logging.getLogger(__name__)


class GroupWatch:
    """The last look at resctrl (``look()`` compares and logs)."""

    def __init__(self) -> None:
        self._foreign: set[str] | None = None
        self._root: str | None = None

    def look(self, resctrl: Any) -> list[str]:
        """Look at ``resctrl`` now; log and return what changed."""
        try:
            names = resctrl.group_names()
            root = domain_text(resctrl.group(ROOT, with_tasks=False).l3)
        except (OSError, RDTError) as exc:
            LOG.debug('cannot look at resctrl: %s', exc)
            return []
        foreign = {n for n in names
                   if n != ROOT and not n.startswith(GROUP_PREFIX)}
        said = []
        if self._foreign is not None:
            for name in sorted(foreign - self._foreign):
                said.append('another tool\'s group %s appeared in %s (ovs-rdt '
                            'never writes it; its ways count as used)'
                            % (name, resctrl.root))
            for name in sorted(self._foreign - foreign):
                said.append('another tool\'s group %s is gone from %s'
                            % (name, resctrl.root))
        if self._root is not None and root != self._root:
            said.append('the default group\'s L3 mask is now %s (was %s)'
                        % (root, self._root))
        self._foreign, self._root = foreign, root
        for line in said:
            LOG.info('%s', line)
        return said
