"""Event counters the agent keeps for its metrics endpoint.

The agent's parts (OvS placement, reconciliation, the dynamic policy) count
what happened here; the metrics collector (``[metrics] listen``) reads a
snapshot at scrape time.  No Prometheus import: the parts stay testable and
the counters cost one dict update under a lock.

Families (the contract's metric names, without ``ovs_rdt_`` and ``_total``):

* ``policy_decisions``: labels ``domain``, ``direction`` (grow/shrink),
  ``reason``;
* ``errors``: label ``source`` (e.g. placement, pools, reconcile, policy,
  metrics).
"""
from __future__ import annotations

import threading

Labels = tuple[tuple[str, str], ...]


class Counters:
    """Monotonic counters keyed by family and label set; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, dict[Labels, float]] = {}

    def inc(self, family: str, amount: float = 1.0, **labels: object) -> None:
        key = tuple(sorted((k, str(v)) for k, v in labels.items()))
        with self._lock:
            fam = self._values.setdefault(family, {})
            fam[key] = fam.get(key, 0.0) + amount

    def snapshot(self, family: str) -> dict[Labels, float]:
        """label set -> value, for one family (a copy)."""
        with self._lock:
            return dict(self._values.get(family, {}))
