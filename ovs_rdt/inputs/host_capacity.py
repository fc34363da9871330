"""The numbers a Nova scheduler reads about a host's cache capacity.

Each one can be a ``[ovs_rdt]`` option of nova.conf
(:mod:`nova_plugin.opts`) or the host aggregate metadata of the same name
(:mod:`nova_plugin.aggregates`); both read it with :func:`parse`, so a
value is accepted or refused alike, with one message.

``rdt_l3_ways`` is the length of a cache domain's capacity bitmask
(``info/L3/cbm_mask``), which the kernel never reports empty: 0 is
refused (1 to :data:`ovs_rdt.MAX_WAYS`, the rule of ``rdt:l3_ways``).  A
host with no ways to offer is one with no ``rdt_l3_ways`` at all: it fails
every request for ways, a pool or a bandwidth cap, where 0 ways would
still have passed pool requests it cannot serve.
"""
from __future__ import annotations

from ovs_rdt.inputs import integers
from ovs_rdt import MAX_WAYS

#: Whole-number keys -> (lowest, highest) value accepted.
RANGES = {
    'rdt_l3_ways': (1, MAX_WAYS),
    'rdt_system_ways': (0, MAX_WAYS),
    'rdt_closids': (1, integers.MAX),
    'rdt_reserved_closids': (0, integers.MAX),
    'rdt_l3_way_kib': (1, integers.MAX),
}


def parse(key: str, raw: str, field: str) -> int:
    """The value of whole-number ``key`` (a key of :data:`RANGES`) written
    ``raw``; :class:`ovs_rdt.exceptions.InvalidValue` naming ``field``.
    """
    low, high = RANGES[key]
    return integers.parse(raw, field, low, high)
