"""The soak's invariants on one node (bench/soak.py), read from resctrl
and /proc:

* exactly one group per running guest that asks for ways (by ``ways`` or
  ``kib``), and none for a guest gone;
* every mask valid for the platform (the kernel's rules:
  :func:`ovs_rdt.core.kernel.validate_mask`);
* no way given twice: groups of ours that hold ways overlap no other, and
  a guest's group and the isolated pool ``hp`` none at all (the default
  group included); a guest's group holds ways on every domain, as many as
  it asked by count; the groups of the start are all there;
* every vCPU thread in the group its annotation says (a guest that asks
  for nothing: in no group of ours), every PMD thread in pool ``hp``
  (``rdt-pmd-pool=hp``).
"""
from __future__ import annotations

from typing import Any, Mapping

from ovs_rdt import GROUP_PREFIX, POOL_GROUP_PREFIX, VM_GROUP_PREFIX
from ovs_rdt.core.kernel import validate_mask
from ovs_rdt.core.model import PMD_GROUP, ROOT
from ovs_rdt.exceptions import RDTError
from ovs_rdt.resctrl import Resctrl
from tests.stress.bed import holds

OURS, VM = GROUP_PREFIX, VM_GROUP_PREFIX
PMD_POOL = POOL_GROUP_PREFIX + 'hp'


def _tasks(rc: Resctrl, name: str) -> set[int]:
    try:
        return set(rc.tasks(name))
    except (OSError, RDTError):
        return set()


def pmds_placed(rc: Resctrl, pmds: set[int]) -> bool:
    return bool(pmds) and pmds <= _tasks(rc, PMD_POOL)


def problems(rc: Resctrl, guests: Mapping[Any, set[int]], pmds: set[int],
             base: set[str]) -> list[str]:
    """What breaks an invariant now ([] when all hold).

    ``guests``: every running guest of the node -> its vCPU TIDs; ``base``:
    the groups at the start (those that are not a guest's).
    """
    found: list[str] = []
    platform = rc.platform()
    groups = {g.name: g for g in rc.groups()}
    root = groups[ROOT]
    want = {g.group for g in guests if g.group and g.group.startswith(VM)}
    have = {n for n in groups if n.startswith(VM)}
    for name in sorted(want - have):
        found.append('no group %s for a running guest' % name)
    for name in sorted(have - want):
        found.append('group %s of no running guest' % name)
    ours = [n for n in groups if n.startswith(OURS) or n == ROOT]
    for name in ours:
        for dom, mask in groups[name].l3.items():
            try:
                validate_mask(platform, mask, '%s on domain %d'
                              % (name or 'the default group', dom))
            except RDTError as exc:
                found.append(str(exc))
    for name in sorted(base - set(groups)):
        found.append('group %s is gone' % name)
    asked = {g.group: g.ways for g in guests
             if g.group and g.group.startswith(VM)}
    for dom, root_mask in root.l3.items():
        for name in sorted(have & set(asked)):
            mask = groups[name].l3[dom]
            # A guest's group holds ways on every domain (its threads may
            # run anywhere), as many as it asked by count.
            if mask == root_mask or (asked[name] is not None and
                                     mask.count != asked[name]):
                found.append('domain %d: %s has %s, asked %s ways' % (
                    dom, name, mask, asked[name] or 'some'))
        holders = [(n, groups[n].l3[dom]) for n in ours if n != ROOT and
                   holds(n, groups[n].l3[dom], root_mask)]
        for i, (name, mask) in enumerate(holders):
            isolated = name.startswith(VM) or name in (PMD_GROUP, PMD_POOL)
            if isolated and mask.overlaps(root_mask):
                found.append('domain %d: %s %s overlaps the default group '
                             '%s' % (dom, name, mask, root_mask))
            for other, omask in holders[i + 1:]:
                if mask.overlaps(omask):
                    found.append('domain %d: %s %s overlaps %s %s'
                                 % (dom, name, mask, other, omask))
    tasks = {n: _tasks(rc, n) for n in groups if n.startswith(OURS)}
    for guest, vcpus in guests.items():
        if not vcpus:
            found.append('%s has no vCPU thread' % guest)
            continue
        where = {n for n, t in tasks.items() if vcpus & t}
        expect = {guest.group} if guest.group else set()
        if guest.group and not vcpus <= tasks.get(guest.group, set()):
            found.append('%s: vCPU threads %s not in %s' % (
                guest, sorted(vcpus - tasks.get(guest.group, set())),
                guest.group))
        elif where - expect:
            found.append('%s: vCPU threads in %s' % (guest, sorted(where)))
    if not pmds:
        found.append('no PMD thread')
    elif not pmds <= tasks.get(PMD_POOL, set()):
        found.append('PMD threads %s not in %s' % (
            sorted(pmds - tasks.get(PMD_POOL, set())), PMD_POOL))
    unknown = set(groups) - base - have
    if unknown:
        found.append('groups nobody made: %s' % sorted(unknown))
    return found
