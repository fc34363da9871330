"""The tests' one reader of resctrl's ``RES:D=V;D=V`` text (``schemata``,
``size``, the kernel's and the emulator's alike).

Kept apart from :func:`ovs_rdt.resctrl.resource_lines` on purpose: tests
that judge what the product writes read it with a parser of their own.
"""
from __future__ import annotations


def lines(text: str) -> dict[str, dict[int, str]]:
    """resource -> domain -> value text, for every ``RES:D=V;D=V`` line
    (padded names stripped; a line without ``RES:`` is resource ``''``).
    """
    out: dict[str, dict[int, str]] = {}
    for line in text.splitlines():
        res, _, rest = line.strip().rpartition(':')
        values = out.setdefault(res.strip(), {})
        for item in rest.strip().split(';'):
            dom, eq, value = item.partition('=')
            if eq:
                values[int(dom)] = value.strip()
    return out


def masks(text: str, resource: str = 'L3') -> dict[int, int]:
    """The ``resource`` line's masks as numbers (empty: no such line)."""
    return {d: int(v, 16) for d, v in lines(text).get(resource, {}).items()}
