"""The core cache-way arithmetic, with no imports at all.

The node allocator (:mod:`ovs_rdt.core.allocator`, run by the libvirt hook on
every VM start) and the Nova filter (through :mod:`ovs_rdt.core.capacity`) both
decide with these functions.
"""


def ways_holding(kib: int, way_bytes: int) -> int:
    """Ways that hold at least ``kib`` KiB, ways of ``way_bytes`` each.

    How a request by size (``rdt:l3_kib``) becomes ways on a node.
    """
    return -(-kib * 1024 // way_bytes)


def free_ways(l3_ways: int, system_ways: int, used_ways: int) -> int:
    """Ways of one domain still free for VMs (never negative)."""
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
