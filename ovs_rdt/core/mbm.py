"""MBM byte counters as Prometheus counters: wraps and re-created groups.

The kernel's ``mbm_total_bytes``/``mbm_local_bytes`` only grow while a
group lives.  They start again from zero when the group is removed and
created again under the same name (a VM restarted: same UUID, same group
name, a new RMID), and a counter can wrap.  Both are counter *resets*:

* the value is exported as the kernel reads it, so a reset that shows as a
  drop is what Prometheus' ``rate()``/``increase()`` already handle (they
  count from zero after any drop);
* a re-creation that does not show as a drop (the new counter already
  passed the old value at the next scrape) is caught by the group
  directory's inode, which a new directory never shares with the old one;
* after any reset, the series' ``_created`` timestamp moves to the last
  scrape before it, the newest time known to precede the reset, so a
  Prometheus that reads created timestamps (OpenMetrics) sees the reset
  even when the value did not drop.  Series that were there when the agent
  started have no ``_created`` (their start is not known): an agent restart
  is no reset.

Pure: no I/O, no Prometheus import.
"""
from __future__ import annotations

import logging

LOG = logging.getLogger(__name__)

#: (group, domain, event)
Key = tuple[str, int, str]


class Epochs:
    """The start (``created``) of every counter series' current epoch."""

    def __init__(self) -> None:
        self._ident: dict[str, int] = {}
        self._last: dict[Key, int] = {}
        self._created: dict[Key, float | None] = {}
        self._previous: float | None = None

    def observe(self, now: float, idents: dict[str, int],
                values: dict[Key, int]) -> dict[Key, float | None]:
        """One scrape: group -> inode, series -> value; returns created.

        Series of groups no longer there are forgotten.
        """
        out: dict[Key, float | None] = {}
        recreated = {g for g, ident in idents.items()
                     if g in self._ident and self._ident[g] != ident}
        for group in sorted(recreated):
            LOG.info('resctrl group %s was re-created: its MBM counters '
                     'start again from zero', group or '/')
        for key, value in values.items():
            if key not in self._last:
                reset = self._previous is not None
            elif key[0] in recreated:
                reset = True
            elif value < self._last[key]:
                LOG.info('MBM counter %s of %s on domain %d went back from '
                         '%d to %d: a reset', key[2], key[0] or '/', key[1],
                         self._last[key], value)
                reset = True
            else:
                reset = False
            out[key] = self._previous if reset else self._created.get(key)
        self._last = dict(values)
        self._created = out
        self._ident = dict(idents)
        self._previous = now
        return out
