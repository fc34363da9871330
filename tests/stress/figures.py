"""Figures the stress suite measures, kept for the end-of-run summary.

Tests call :func:`add` (counters) and :func:`record` (named values); the
summary is printed by the suite's conftest and written as JSON to
``$OVS_RDT_STRESS_REPORT`` (default ``.stress-figures.json``) for
``bench/bench_stress.py``.
"""
from __future__ import annotations

import json
import os
from typing import Any

_FIGURES: dict[str, Any] = {}


def add(name: str, count: int = 1) -> None:
    _FIGURES[name] = _FIGURES.get(name, 0) + count
    _save()


def record(name: str, value: Any) -> None:
    _FIGURES[name] = value
    _save()


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def report_path() -> str:
    return os.environ.get('OVS_RDT_STRESS_REPORT', '.stress-figures.json')


def _save() -> None:
    try:
        with open(report_path(), 'w', encoding='utf-8') as fh:
            json.dump(_FIGURES, fh, indent=1, sort_keys=True)
    except OSError:
        pass


def summary() -> str:
    return '\n'.join('%s: %s' % item for item in sorted(_FIGURES.items()))
