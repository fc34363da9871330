"""A warning repeated while a failure lasts: at most once an interval.

The filter runs for every host of every request; a database or Placement
that stays unreachable would otherwise log one warning per host.
"""
from __future__ import annotations

#: Seconds between two warnings of the same kind.
WARN_INTERVAL = 60.0


class Throttle:
    """``due(now)`` is true at most once per ``interval`` seconds."""

    def __init__(self, interval: float = WARN_INTERVAL) -> None:
        self.interval = interval
        self._last = -interval

    def due(self, now: float) -> bool:
        """Whether to warn at ``now`` (``time.monotonic()``); if so, the
        next is due ``interval`` seconds later.
        """
        if now - self._last < self.interval:
            return False
        self._last = now
        return True
