"""Cache-way arithmetic shared by the node allocator and the Nova filter.

Pure functions, no I/O: the same numbers decide on the scheduler and on
the node.  Because the allocator repacks so that free ways form one
contiguous run, a count of free ways per cache domain is exact.
"""
from __future__ import annotations


def free_ways(l3_ways: int, system_ways: int, used_ways: int) -> int:
    """Ways per cache domain still free for a dedicated allocation.

    ``l3_ways``: ways available on the domain (the CBM length, less ways
    held by groups that are not counted in ``used_ways``);
    ``system_ways``: ways kept out of allocations (default group minimum,
    OvS, pools); ``used_ways``: ways already given out.
    """
    return l3_ways - system_ways - used_ways


def closids_fit(num_closids: int, groups: int) -> bool:
    """Whether ``groups`` control groups (root included) fit the CLOSIDs."""
    return groups <= num_closids
