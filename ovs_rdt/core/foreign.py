"""What another tool's group holds on a cache domain (pure logic, no I/O).

Groups not named ``ovsrdt-`` (libvirt's ``<cachetune>`` groups, pqos's
``COSn``, hand-made ones) are never written, moved or removed.  What each
one holds, from the kernel's rules:

* An exclusive or pseudo-locked group holds its whole mask: the kernel
  refuses any other group there.
* ``mkdir`` gives a new group the kernel's default mask
  (``__init_one_rdt_domain()``: :func:`ovs_rdt.core.kernel.new_group_masks`):
  every way of a shareable group (the default group's and ovs-rdt's
  shared pools' included) and every unused way, cut to the lowest run
  (kept whole on sparse-mask platforms by newer kernels).
  Those ways are other groups', not ways the tool took, and the group
  keeps that mask until the tool's first schemata write (libvirt writes
  under the resctrl lock, so ovs-rdt never sees its groups in between;
  pqos makes one ``COSn`` per CLOSID at every start and writes only the
  classes it is asked to; a person's bare ``mkdir`` may never be written).
  So, written or not, the ways a shareable group shares with the default
  group or a group of ours *now* are not the tool's (:func:`shares`):
  the groups of ours that have them keep them where they are (a re-apply,
  a release, the agent's reconciliation never fail because such a group
  appeared, :func:`held_by_ours`), and ovs-rdt gives none of them to another
  group of its own: the kernel refuses exclusive mode over them, and the
  tool's first write may claim them.  A request that needs them waits
  for that write (or the group's removal), refused meanwhile with a
  message naming the group (:func:`blocking`).
* The rest of its mask, the ways no group of ours has (unused ways the
  kernel gave it, ways the tool wrote), it holds (:func:`holds`): ovs-rdt
  never gives them away.
* Ways a tool wrote are for its class (:func:`written`): a shareable
  group that shares fewer ways with the default group than its floor
  cannot have the mask ``mkdir`` gave it (that mask held the whole
  default group), so its tool wrote it (pqos's ``-e llc:3=0x1``).  The
  default group leaves those ways when its floor fits beside them without
  any other group of ours moving (a group of ours that has some keeps
  them): :meth:`ovs_rdt.core.layout.CacheDomain.ceding`, tried first by
  :func:`ovs_rdt.core.allocator.layouts`; else the rule above holds.
  Once it left them, the group holds them (it shares no way with ours):
  a request that would need them is refused, naming the group, until the
  group goes.  A group that shares as many ways is a ``mkdir``'s, as
  above, whether its tool wrote it or not.
* libvirt's copy of the default group's mask on a domain its
  ``<cachetune>`` does not name holds and shares nothing
  (:func:`mirrors_default`): those ways are the default group's.
"""
from __future__ import annotations

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.kernel import UNSHAREABLE, new_group_masks
from ovs_rdt.core.model import Group, Platform, held


def mirrors_default(group: Group, domain: int, groups: list[Group]) -> bool:
    """Whether a foreign group only copies the default group on ``domain``.

    libvirt takes a ``<cachetune>``'s ways from those no group holds, not
    the default group's (``virResctrlAllocGetUnused``), and writes the
    default group's mask for the domains the ``<cachetune>`` does not name
    (``virResctrlAllocCopyMasks``).  So a group that holds ways (a mask
    disjoint from the default group's) on some domain and overlaps the
    default group on ``domain`` holds nothing there.  A group that
    overlaps the default group everywhere (a ``mkdir`` not written yet,
    ``pqos`` classes) is one of the others (:func:`shares`,
    :func:`holds`).
    """
    root = _root(groups)
    if root is None:
        return False
    mask = group.l3.get(domain)
    if mask is None or held(mask, root.l3.get(domain)):
        return False
    return any(held(m, root.l3.get(d)) for d, m in group.l3.items()
               if d != domain)


def _root(groups: list[Group]) -> Group | None:
    return next((g for g in groups if g.is_root), None)


def held_by_ours(domain: int, groups: list[Group]) -> CBM | None:
    """The ways the default group and the groups of ours have on
    ``domain`` now (a group that follows the default group adds none);
    None without a default group.
    """
    root = _root(groups)
    if root is None or domain not in root.l3:
        return None
    root_mask = root.l3[domain]
    ours = root_mask
    for grp in groups:
        mask = grp.l3.get(domain)
        if grp.owned and mask is not None and held(mask, root_mask):
            ours |= mask
    return ours


def _mask(group: Group, domain: int) -> CBM | None:
    if group.is_root or group.owned:
        return None
    return group.l3.get(domain)


def shares(group: Group, domain: int, groups: list[Group]) -> CBM | None:
    """The ways a foreign shareable group shares with the default group
    or groups of ours on ``domain`` now: theirs to keep, no other group of
    ours may take them.  None for groups of ours, exclusive ones and
    copies of the default group's mask (:func:`mirrors_default`).
    """
    mask = _mask(group, domain)
    if mask is None or group.mode in UNSHAREABLE or \
            mirrors_default(group, domain, groups):
        return None
    ours = held_by_ours(domain, groups)
    return mask & ours if ours is not None else None


def holds(group: Group, domain: int, groups: list[Group]) -> CBM | None:
    """The ways a foreign group holds on ``domain``: never given away.

    Its whole mask when exclusive (or pseudo-locked); else what no group
    of ours has (:func:`shares`); nothing for a copy of the default
    group's mask.  None for groups of ours.
    """
    mask = _mask(group, domain)
    if mask is None:
        return None
    if group.mode in UNSHAREABLE:
        return mask
    if mirrors_default(group, domain, groups):
        return mask.empty(mask.width)
    return mask - (shares(group, domain, groups) or mask.empty(mask.width))


def unwritten(platform: Platform, group: Group, domain: int,
              groups: list[Group]) -> bool:
    """Whether ``group`` has, on ``domain``, exactly the mask ``mkdir``
    would give a new group now (its tool has most likely not written it).
    """
    mask = group.l3.get(domain)
    if mask is None:
        return False
    others = [(g.mode, g.l3[domain].value) for g in groups
              if g is not group and domain in g.l3]
    return mask.value in new_group_masks(platform, domain, others)


def unwritten_groups(platform: Platform, groups: list[Group]) -> list[str]:
    """Other tools' groups that have, on some domain, the mask ``mkdir``
    gives (:func:`unwritten`): their tools are making them now, or left
    them bare.
    """
    return [g.name for g in groups if not g.is_root and not g.owned and
            any(unwritten(platform, g, d, groups) for d in g.l3)]


def written(platform: Platform, group: Group, domain: int,
            groups: list[Group], floor: int) -> CBM | None:
    """The ways a foreign shareable group shares with ours on ``domain``
    (:func:`shares`) when its tool must have written its mask: ways for
    its class, which the default group leaves to it where it can.  None
    otherwise.

    The kernel keeps no record of a write, but a ``mkdir`` mask that
    overlaps the default group holds all of it (the lowest run of every
    shareable way: :func:`ovs_rdt.core.kernel.new_group_masks`), and the
    default group keeps the ways it shares (:func:`shares`).  So a group
    that shares fewer ways with the default group than its ``floor``
    (``system_min_ways``, at least the platform's minimum) cannot have its
    ``mkdir`` mask: it was written (pqos's ``-e llc:3=0x1``).  One that
    shares as many is taken as a ``mkdir``'s (issue 27's rule), written or
    not: ovs-rdt's own changes since its ``mkdir`` make its mask differ
    from the one ``mkdir`` would give now (:func:`unwritten`), so that
    difference alone proves nothing.
    """
    ways = shares(group, domain, groups)
    root = _root(groups)
    if not ways or root is None or unwritten(platform, group, domain, groups):
        return None
    mask = group.l3.get(domain)
    if mask is None or (mask & root.l3[domain]).count >= floor:
        return None
    return ways


def blocking(platform: Platform, domain: int, groups: list[Group],
             ways: CBM) -> str:
    """Which foreign groups hold or share ``ways`` on ``domain``, for a
    refusal ('' when none does).
    """
    names = []
    for grp in groups:
        mine = (holds(grp, domain, groups) or ways.empty(ways.width)) | (
            shares(grp, domain, groups) or ways.empty(ways.width))
        if not mine & ways:
            continue
        note = ''
        if unwritten(platform, grp, domain, groups):
            note = ', the mask mkdir gave it: not written yet'
        elif grp.mode in UNSHAREABLE:
            note = ', %s' % grp.mode
        names.append('%s (%s%s)' % (grp.name, grp.l3[domain], note))
    if not names:
        return ''
    return ('; other tools\' groups hold or share those ways: %s. ovs-rdt '
            'gives none of them to a group of its own: they come free '
            'when that tool writes its own masks or removes its groups'
            % ', '.join(names))
