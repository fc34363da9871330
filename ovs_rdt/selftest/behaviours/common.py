"""What the behaviours share: constants, the groups' ways, counter reads."""
from __future__ import annotations

from ovs_rdt.selftest.geometry import UNSHAREABLE, Geometry, GroupState, run_in
from ovs_rdt.selftest.node import Node, Skip, expect

GROUP_FILES = ('cpus', 'cpus_list', 'mode', 'mon_data', 'mon_groups', 'schemata',
               'size', 'tasks')
MON_GROUP_FILES = ('cpus', 'cpus_list', 'mon_data', 'tasks')
#: What a monitoring file may say instead of a count (ovs-rdt skips them).
NOT_A_COUNT = ('Unavailable', 'Unassigned', 'Error')
#: mba_MBps: the kernel's "no limit" (MBA_MAX_MBPS, U32_MAX).
MBPS_MAX = 4294967295
#: How long a load may take to show in the counters.
SETTLE = 2.0
MiB = 1024 * 1024


def others(geo: Geometry, node: Node, but: str = '') -> list[GroupState]:
    return [g for g in geo.states(node) if g.name != but]


def unshareable(groups: list[GroupState], dom: int) -> int:
    """Ways of exclusive (or pseudo-locked) groups: no one else may have them."""
    out = 0
    for grp in groups:
        if grp.mode in UNSHAREABLE:
            out |= grp.l3.get(dom, 0)
    return out


def used(groups: list[GroupState], dom: int, geo: Geometry) -> int:
    """Ways some group (or the hardware) uses on ``dom``."""
    out = geo.hw_shared(dom)
    for grp in groups:
        if grp.mode != 'pseudo-locksetup':
            out |= grp.l3.get(dom, 0)
    return out


def small_masks(node: Node, geo: Geometry, ways: int) -> dict[int, int]:
    """Per domain, the lowest ``ways`` ways no exclusive group holds."""
    groups = geo.states(node)
    out = {}
    for dom in geo.ids:
        mask = run_in(geo.full & ~unshareable(groups, dom), ways, geo.cbm_len)
        if mask is None:
            raise Skip('no %d ways free of exclusive groups on domain %d' % (ways, dom))
        out[dom] = mask
    return out


def count_or_none(text: str, rel: str) -> int | None:
    word = text.strip()
    if word.isdigit():
        return int(word)
    expect(word in NOT_A_COUNT, '%s reads %r: neither a count nor one of %s',
           rel, text, ', '.join(NOT_A_COUNT))
    return None


def mon_total(node: Node, group: str, event: str, geo: Geometry) -> int | None:
    """The sum of ``event`` over every L3 domain of ``group`` (None: no count)."""
    total = None
    for dom in geo.ids:
        rel = '%s/mon_data/mon_L3_%02d/%s' % (group, dom, event)
        value = count_or_none(node.read(rel), rel)
        if value is not None:
            total = (total or 0) + value
    return total


def masks_text(masks: dict[int, int]) -> str:
    return ';'.join('%d=%x' % kv for kv in sorted(masks.items()))
