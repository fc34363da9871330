"""What the behaviours share: a group's files, the ways ours may take,
counter reads.
"""
from __future__ import annotations

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.kernel import UNSHAREABLE
from ovs_rdt.selftest.geometry import Geometry, GroupState
from ovs_rdt.selftest.node import Node, Skip, expect

#: What a control group and a monitor group have (at least).
GROUP_FILES = ('cpus', 'cpus_list', 'mode', 'mon_data', 'mon_groups', 'schemata',
               'size', 'tasks')
MON_GROUP_FILES = ('cpus', 'cpus_list', 'mon_data', 'tasks')
#: What a monitoring file may say instead of a count (ovs-rdt skips them).
NOT_A_COUNT = ('Unavailable', 'Unassigned', 'Error')
#: How long a load may take to show in the counters.
SETTLE = 2.0
MiB = 1024 * 1024
#: What :func:`spare` ways are, for messages.
LOAD_WAYS = ('that only the default group holds or no group does, nor the hardware '
             '(shareable_bits, io_alloc): its load fills no other group\'s ways')


def run_in(avail: int, ways: int, width: int) -> int | None:
    """The lowest ``ways`` consecutive ways within ``avail``, or None."""
    for low, length in CBM(avail, width).runs():
        if length >= ways:
            return ((1 << ways) - 1) << low
    return None


def unshareable(groups: list[GroupState], dom: int) -> int:
    """Ways of exclusive (or pseudo-locked) groups: no one else may have them."""
    out = 0
    for grp in groups:
        if grp.mode in UNSHAREABLE:
            out |= grp.l3.get(dom, 0)
    return out


def used(groups: list[GroupState], dom: int, geo: Geometry) -> int:
    """Ways some group (or the hardware) uses on ``dom``."""
    out = geo.plat.hw_shared(dom)
    for grp in groups:
        if grp.mode != 'pseudo-locksetup':
            out |= grp.l3.get(dom, 0)
    return out


def spare(node: Node, geo: Geometry, groups: list[GroupState], dom: int) -> int:
    """Ways of ``dom`` a load of ours may fill: those only the default
    group holds, or no group; never another group's (ovs-rdt's pools,
    shareable unless isolated, libvirt's, pqos's), nor those the hardware
    fills too (``shareable_bits``, io_alloc's).
    """
    out = geo.full & ~geo.plat.hw_shared(dom)
    for grp in groups:
        if grp.name and not grp.name.startswith(node.prefix):
            out &= ~grp.l3.get(dom, 0)
    return out


def masks_for(node: Node, geo: Geometry, ways: int, load: bool = False) -> dict[int, int]:
    """Per domain, the lowest ``ways`` ways for a group of ours: with a
    ``load`` in it, :func:`spare` ways; without tasks (it fills nothing),
    any ways no exclusive group holds.  Skip if a domain has none.
    """
    groups = geo.groups(node)
    out = {}
    for dom in geo.ids:
        avail = spare(node, geo, groups, dom) if load else \
            geo.full & ~unshareable(groups, dom)
        mask = run_in(avail, ways, geo.cbm_len)
        if mask is None:
            raise Skip('no %d ways on domain %d %s' % (
                ways, dom, LOAD_WAYS if load else 'free of exclusive groups'))
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
