"""What a plan would do, write by write, and to whom.

The text of ``ovs-rdt apply --dry-run`` and of ``ovs-rdt status`` when
resctrl does not hold what the configuration asks: each write of the plan
(:class:`~ovs_rdt.core.plan.Step`) on one line, as the manager makes it,
then, indented, what it does to whom: the VMs and threads of a group it
removes (the kernel moves them to the default group) or whose ways move
(:class:`~ovs_rdt.core.plan.Move`: they stay in the group, their cached
data there is lost).  Pure: each group's members come in, as
:func:`ovs_rdt.members.describe` finds them.
"""
from __future__ import annotations

from typing import Collection

from ovs_rdt.cmd.report import kind_of
from ovs_rdt.core.model import MODE_EXCLUSIVE, ROOT
from ovs_rdt.core.plan import EVENT, MKDIR, MODE, RMDIR, SCHEMATA, Plan
from ovs_rdt import members as members_
from ovs_rdt import POOL_GROUP_PREFIX, VM_GROUP_PREFIX

INDENT = '    '
_TITLES = {'default': 'the default group', 'ovs-pmd': 'the OvS PMD group'}


def title(group: str, members: list[dict]) -> str:
    """``pool hp``, ``the group of VM vm1``, ``the default group``, ..."""
    kind = kind_of(group)
    if kind == 'pool':
        return 'pool %s' % group[len(POOL_GROUP_PREFIX):]
    if kind == 'vm':
        return 'the group of VM %s' % (members_.vm_name(group, members)
                                       or group[len(VM_GROUP_PREFIX):])
    return _TITLES.get(kind, group)


def explain(plan: Plan, members: dict[str, list[dict]],
            pools: Collection[str]) -> list[list[str]]:
    """For each step of ``plan``, the lines saying what it does to whom.

    ``members``: group -> its members; ``pools``: the configured pool
    names (a pool's group that is removed is one no longer configured).
    """
    out: list[list[str]] = []
    for step in plan.steps:
        group = step.group
        who = members.get(group, [])
        name = title(group, who)
        held = members_.prose(who)
        if step.op == MKDIR:
            lines = ['creates %s' % name]
        elif step.op == RMDIR:
            why = ''
            if kind_of(group) == 'pool' and \
                    group[len(POOL_GROUP_PREFIX):] not in pools:
                why = ' (not in [allocation] pools)'
            lines = ['removes %s%s: %s' % (
                name, why, 'it holds %s; the kernel moves them to the default '
                'group' % held if held else 'it holds no task')]
        elif step.op == SCHEMATA:
            if group == ROOT:
                lines = ['sets the masks of the default group (the OS and '
                         'every task in no other group)']
            else:
                lines = ['sets the masks of %s%s' % (
                    name, ', which holds %s' % held if held else
                    ' (no task)')]
        elif step.op == MODE:
            lines = ['%s becomes %s%s' % (
                name, step.value, ' (isolated: no other group may share '
                'its ways)' if step.value == MODE_EXCLUSIVE else '')]
        elif step.op == EVENT:
            lines = ['the memory-bandwidth controller of %s follows %s'
                     % (name, step.value)]
        else:
            lines = []
        out.append(lines)
    # A move goes with the last write of the group's mask on its domain.
    for move in plan.moves:
        at = [i for i, step in enumerate(plan.steps)
              if step.op == SCHEMATA and step.group == move.group
              and move.domain in step.l3]
        text = '%s%s' % (move, '; its tasks stay in it, their cached data '
                         'there is lost' if members.get(move.group) else '')
        if at:
            out[at[-1]].append(text)
        elif out:
            out[-1].append(text)
    return out


def describe(plan: Plan, members: dict[str, list[dict]],
             pools: Collection[str]) -> list[str]:
    """Each write on a line (``str(step)``), what it does to whom on the
    lines below it, indented.
    """
    lines = []
    for step, said in zip(plan.steps, explain(plan, members, pools)):
        lines.append(str(step))
        lines.extend(INDENT + line for line in said)
    return lines
