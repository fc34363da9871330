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

The one rule (:func:`is_reset`) serves every reader of the counters: the
metrics' created timestamps (:class:`Epochs`), ``ovs-rdt top``'s rates and
the dynamic policy's (:class:`Rates`, :func:`increase`).

Pure: no I/O, no Prometheus import.
"""
from __future__ import annotations

import logging

LOG = logging.getLogger(__name__)

#: (group, domain, event)
Key = tuple[str, int, str]


def is_reset(ident_before: int | None, value_before: int,
             ident_after: int | None, value_after: int) -> bool:
    """Whether a counter started again between two reads: its group's
    directory is another one (re-created: a new inode, even when the new
    counter already passed the old value) or its value went back (a wrap,
    a re-creation seen without the inode).  ``None`` idents: unknown, only
    the value counts.
    """
    if ident_before is not None and ident_after is not None and \
            ident_before != ident_after:
        return True
    return value_after < value_before


def increase(before: tuple[int | None, int] | None,
             after: tuple[int | None, int]) -> int | None:
    """How much a counter grew from ``before`` to ``after`` (each
    ``(group directory inode, value)``); None when unknown: no earlier read,
    or a reset in between (:func:`is_reset`).
    """
    if before is None or is_reset(before[0], before[1], after[0], after[1]):
        return None
    return after[1] - before[1]


class Rates:
    """Per-second rates of counters between two reads, None across resets.

    For readers that keep the last read themselves (the dynamic policy):
    :meth:`observe` takes every counter read now, with its group's
    directory inode, and returns the rate since the previous call.
    """

    def __init__(self) -> None:
        self._last: dict[Key, tuple[int | None, int]] = {}
        self._stamp: float | None = None

    def observe(self, now: float, idents: dict[str, int | None],
                values: dict[Key, int]) -> dict[Key, float | None]:
        """Rates (bytes/s) since the last call; the read becomes the base."""
        seconds = now - self._stamp if self._stamp is not None else 0.0
        out: dict[Key, float | None] = {}
        for key, value in values.items():
            grew = increase(self._last.get(key),
                            (idents.get(key[0]), value))
            out[key] = grew / seconds if grew is not None and seconds > 0 \
                else None
        self.rebase(now, idents, values)
        return out

    def rebase(self, now: float, idents: dict[str, int | None],
               values: dict[Key, int]) -> None:
        """Start the next rates from this read."""
        self._last = {key: (idents.get(key[0]), value)
                      for key, value in values.items()}
        self._stamp = now


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
            else:
                reset = is_reset(self._ident.get(key[0]), self._last[key],
                                 idents.get(key[0]), value)
                if reset and key[0] not in recreated:
                    LOG.info('MBM counter %s of %s on domain %d went back '
                             'from %d to %d: a reset', key[2], key[0] or '/',
                             key[1], self._last[key], value)
            out[key] = self._previous if reset else self._created.get(key)
        self._last = dict(values)
        self._created = out
        self._ident = dict(idents)
        self._previous = now
        return out
