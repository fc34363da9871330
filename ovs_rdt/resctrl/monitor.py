"""Monitoring: ``mon_data`` counters and the groups' counter assignments."""
from __future__ import annotations

import os

from ovs_rdt.resctrl.files import GONE, Files, gone
from ovs_rdt.resctrl.text import resource_lines


class Monitoring(Files):
    """What the groups' monitors count, read."""

    def unassigned(self, name: str, event: str) -> list[int]:
        """The L3 domains where ``name`` has no counter for ``event``.

        Only with assignable counters (``mbm_assign_mode`` ``mbm_event``):
        its ``mbm_L3_assignments`` reads ``EVENT:0=e;1=_``; else none.
        """
        try:
            text = self.read(self.path(name, 'mbm_L3_assignments'))
        except OSError:         # absent, or EINVAL outside mbm_event mode
            return []
        return sorted(d for d, state in
                      resource_lines(text).get(event, {}).items()
                      if state == '_')

    def read_mon(self, name: str) -> dict[int, dict[str, int]]:
        """mon_data values per domain: {domain: {feature: value}}.

        Only numbers count: ``Unavailable``, ``Error`` and, with
        assignable counters (``mbm_assign_mode`` ``mbm_event``), an event
        with no counter behind it, ``Unassigned``, are left out, never
        taken as zero.  Sub-NUMA directories (``mon_sub_L3_NN``) are not
        events: the ``mon_L3_NN`` files already sum them.
        """
        base = self.path(name, 'mon_data')
        out: dict[int, dict[str, int]] = {}
        try:
            entries = os.listdir(base)
        except OSError as exc:
            if exc.errno in GONE:
                return out
            raise
        for entry in entries:
            if not entry.startswith('mon_L3_'):
                continue
            dom = int(entry[len('mon_L3_'):])
            vals: dict[str, int] = {}
            try:
                feats = os.listdir(os.path.join(base, entry))
            except OSError as exc:
                raise gone(exc) from None
            for feat in feats:
                try:
                    text = self.read(os.path.join(base, entry, feat)).strip()
                except OSError:
                    continue        # a directory, or gone
                if text.isascii() and text.isdigit():
                    vals[feat] = int(text)
            out[dom] = vals
        return out
