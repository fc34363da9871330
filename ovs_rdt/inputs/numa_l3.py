"""The NUMA node to L3 cache domain map as text: ``0:0-11;1:12-23``.

Items ``NODE:L3S`` separated by ``;``: a NUMA node id, ``:``, the L3 cache
domain ids its CPUs use, in the CPU-list syntax (:mod:`ovs_rdt.inputs.cpulists`:
``0-11``, ``0,2``).  Spaces around items are layout; empty items (a trailing
``;``) are skipped.  Each node once, at least one item, at least one L3 id
per node.  ``ovs-rdt provider-config`` prints it; the Nova filter reads it
from aggregate metadata ``rdt_numa_l3`` (or ``[ovs_rdt] rdt_numa_l3``).  The
rule it describes is :mod:`ovs_rdt.core.topology`'s.
"""
from __future__ import annotations

from ovs_rdt.exceptions import InvalidValue, quote, refuse
from ovs_rdt.inputs import cpulists
from ovs_rdt.inputs.integers import whole

TYPE_CHECKING = False
if TYPE_CHECKING:  # inputs stay light (doc of ovs_rdt.inputs)
    from typing import Mapping

_WHAT = 'is not a NUMA node to L3 map (NODE:L3S;...)'


def parse(raw: str, field: str) -> dict[int, frozenset[int]]:
    """NUMA node -> L3 domain ids from ``raw``; errors name ``field``."""
    out: dict[int, frozenset[int]] = {}
    for item in raw.split(';'):
        item = item.strip()
        if not item:
            continue
        node_s, colon, l3_s = item.partition(':')
        node = whole(node_s.strip())
        if not colon:
            raise refuse(field, raw, '%s: %s has no ":"' % (_WHAT, quote(item)))
        if node is None or node > cpulists.MAX_CPU:
            raise refuse(field, raw, '%s: %s is not a NUMA node id'
                         % (_WHAT, quote(node_s.strip())))
        if node in out:
            raise refuse(field, raw, '%s: node %d is given twice'
                         % (_WHAT, node))
        try:
            l3s = cpulists.parse_bits(l3_s, field, empty_ok=True)
        except InvalidValue:
            raise refuse(field, raw, '%s: %s is not a list of L3 ids'
                         % (_WHAT, quote(l3_s.strip()))) from None
        if not l3s:
            raise refuse(field, raw, '%s: node %d has no L3 id'
                         % (_WHAT, node))
        out[node] = cpulists.to_set(l3s)
    if not out:
        raise refuse(field, raw, '%s: no NODE:L3S item' % _WHAT)
    return out


def to_text(numa_l3: Mapping[int, frozenset[int]]) -> str:
    """{0: {0..11}, 1: {12..23}} -> ``0:0-11;1:12-23`` (nodes in order)."""
    return ';'.join('%d:%s' % (node, cpulists.to_text(numa_l3[node]))
                    for node in sorted(numa_l3))
