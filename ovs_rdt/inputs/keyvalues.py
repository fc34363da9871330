"""Lists of ``KEY=VALUE`` items: ``0=7f0;1=3f``, ``rdt:l3_ways=3, rdt:pool=hp``.

Items are separated by ``;`` or ``,``; spaces around items, keys and values
are layout, and empty items are skipped.  What a key or a value may be is
the caller's rule.
"""
from __future__ import annotations


def items(raw: str) -> list[tuple[str, str, str | None]]:
    """``(item, key, value)`` of each item; ``value`` None without ``=``."""
    out: list[tuple[str, str, str | None]] = []
    for item in raw.replace(',', ';').split(';'):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition('=')
        out.append((item, key.strip(), value.strip() if eq else None))
    return out
