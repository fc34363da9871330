"""The core cache-way arithmetic, with no imports at all.

The node allocator (:mod:`ovs_rdt.core.allocator`, run by the libvirt hook on
every VM start) decides with these functions.
"""


def ways_for_bytes(size: int, way_bytes: int) -> int:
    """The fewest ways of ``way_bytes`` bytes each that hold ``size`` bytes
    (``ceil(size / way_bytes)``; 0 when the way size is unknown).

    The one rule: a request by size, ``ovs-rdt profile``'s advice and the
    dynamic policy's working-set sizing all count ways with it.
    """
    return -(-size // way_bytes) if way_bytes > 0 else 0


def ways_holding(kib: int, way_bytes: int) -> int:
    """Ways that hold at least ``kib`` KiB, ways of ``way_bytes`` each.

    How a request by size (``rdt:l3_kib``) becomes ways on a node.
    """
    return ways_for_bytes(kib * 1024, way_bytes)


def ways_left(l3_ways: int, system_ways: int, used_ways: int) -> int:
    """Ways of one domain still free for VMs, from counts (never negative).

    (:func:`ovs_rdt.core.layout.free_ways` counts them from a domain's
    masks, with this rule.)
    """
    return max(0, l3_ways - system_ways - used_ways)


def closids_free(closids: int, reserved_closids: int, dedicated: int,
                 pools: int) -> int:
    """CLOSIDs still free (never negative).

    ``dedicated`` VM groups and ``pools`` on-demand pool groups hold one each.
    """
    return max(0, closids - reserved_closids - dedicated - pools)


def closids_fit(num_closids: int, groups: int) -> bool:
    """Whether ``groups`` control groups (root included) fit the CLOSIDs."""
    return groups <= num_closids
