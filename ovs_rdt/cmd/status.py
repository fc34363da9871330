"""``ovs-rdt status [--json]``: the node's cache plan per cache domain, the
ways and CLOSIDs left, and whether resctrl holds what the configuration
asks (the exit status says it too).
"""
from __future__ import annotations

import argparse
import json
import sys

from ovs_rdt.agent.lock import AgentLock
from ovs_rdt.agent.policy import read_state
from ovs_rdt.agent.policy_state import PolicyStateError
from ovs_rdt.cmd.changes import explain
from ovs_rdt.cmd.common import group_members, manager_from, vm_names
from ovs_rdt.cmd import provider_config, report
from ovs_rdt.conf import Settings
from ovs_rdt.core.model import Group, held_masks
from ovs_rdt.core.ways import closids_free, ways_left
from ovs_rdt.exceptions import AllocationError, ConfigError, InvalidValue
from ovs_rdt.exceptions import RDTError
from ovs_rdt.manager import CacheManager
from ovs_rdt.resctrl import Resctrl
from ovs_rdt import VM_GROUP_PREFIX

#: Exit statuses (besides 0, 1: an error, 2: a bad command line).
EXIT_DIFFERS = 3
EXIT_INVALID = 4
APPLIED, DIFFERS, INVALID = 'applied', 'differs', 'invalid'
EXIT_CODES = {APPLIED: 0, DIFFERS: EXIT_DIFFERS, INVALID: EXIT_INVALID}
EPILOG = '''exit status:
  0  resctrl holds what the configuration asks
  1  an error (resctrl cannot be read, ...)
  2  a bad command line or configuration file
  %d  the configuration differs from what resctrl holds: "ovs-rdt apply"
     makes it so ("ovs-rdt apply --dry-run" shows how)
  %d  the configuration cannot be applied on this node (the reason is
     printed): resctrl holds the last layout applied
''' % (EXIT_DIFFERS, EXIT_INVALID)

_PLANNING_ERRORS = (AllocationError, ConfigError, InvalidValue)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument('--json', action='store_true',
                        help='print the plan as JSON (the same facts, the '
                             'same exit status)')
    parser.add_argument('--colour', choices=('auto', 'always', 'never'),
                        default='auto',
                        help='colour the way map (default: when a terminal)')


def collect(rc: Resctrl, names: dict[str, str] | None = None) -> dict:
    """The node's plan as it is now, members named (``report.build``).

    ``names``: uuid -> domain name from libvirt.
    """
    return _read(rc, names)[0]


def _read(rc: Resctrl, names: dict[str, str] | None
          ) -> tuple[dict, list[Group], dict[str, list[dict]]]:
    platform = rc.platform()
    groups, members = group_members(rc, names)
    return (report.build(platform, groups, lambda g: members[g.name],
                         rc.numa_l3()), groups, members)


def assess(manager: CacheManager, plan: dict, groups: list[Group],
           members: dict[str, list[dict]]) -> None:
    """Add to ``plan`` (:func:`collect`'s, of ``groups`` and their
    ``members``) what the configuration would change
    (``configuration``: :func:`configuration`) and the ways and CLOSIDs
    left (``free`` in each domain, ``closids_free``: :func:`left`).
    """
    plan['configuration'] = configuration(manager, members)
    # What is left: in the layout the next VM start makes (the configured
    # pools as configured, others kept), else in the one resctrl holds.
    try:
        layout = provider_config.layout_groups(manager.preview(),
                                               manager.resctrl)
    except _PLANNING_ERRORS:
        layout = groups
    free, closids = left(manager, layout)
    for dom in plan['domains']:
        dom['free'] = free.get(dom['domain'])
    plan['closids_free'] = closids


def configuration(manager: CacheManager, members: dict[str, list[dict]]
                  ) -> dict:
    """Whether resctrl holds what the configuration asks, by the plan
    ``ovs-rdt apply`` would carry out (:meth:`CacheManager.preview`): its
    writes and what each does to whom, or why it cannot be made.
    """
    try:
        plan = manager.preview(prune=True)
    except _PLANNING_ERRORS as exc:
        return {'state': INVALID, 'error': str(exc), 'writes': []}
    said = explain(plan, members, manager.settings.pools)
    return {'state': DIFFERS if plan.steps else APPLIED, 'error': None,
            'writes': [{'write': str(step), 'effects': lines}
                       for step, lines in zip(plan.steps, said)]}


def left(manager: CacheManager, groups: list[Group]
         ) -> tuple[dict[int, dict], int]:
    """Per domain, the ways left for VMs (by the rule of the Nova filter
    and ``provider-config``: the CBM length less the reserve for what is
    not a VM, less the ways VMs hold) and for one more pool (isolated, or
    not); and the CLOSIDs left.
    """
    platform = manager.resctrl.platform()
    min_ways = manager.settings.allocation.system_min_ways
    try:
        system_cbm = manager.system_masks(platform)
    except ConfigError:
        system_cbm = None          # (the configuration says why)
    width = platform.cbm_len
    root = next(g for g in groups if g.is_root)
    vm_held = {d: 0 for d in platform.domains}
    for grp in groups:
        if grp.name.startswith(VM_GROUP_PREFIX):
            for dom, mask in held_masks(grp, root).items():
                vm_held[dom] = vm_held.get(dom, 0) + mask.count
    try:
        reserved = provider_config.reserved_ways(platform, groups, min_ways,
                                                 system_cbm)
        isolated = provider_config.room(platform, groups, min_ways,
                                        system_cbm)
        shared = provider_config.room(platform, groups, min_ways, system_cbm,
                                      isolated=False)
    except _PLANNING_ERRORS:
        return {}, closids_free(platform.num_closids, len(groups), 0, 0)
    free = {d: {'vm_ways': ways_left(width, reserved[d], vm_held[d]),
                'reserved_ways': reserved[d], 'vm_held_ways': vm_held[d],
                'pool_ways': isolated[d], 'shared_pool_ways': shared[d]}
            for d in platform.domains}
    return free, closids_free(platform.num_closids, len(groups), 0, 0)


def run(settings: Settings, args: argparse.Namespace) -> int:
    names, source = vm_names(settings)
    manager = manager_from(settings)
    plan, groups, members = _read(manager.resctrl, names)
    assess(manager, plan, groups, members)
    plan['vm_names'] = {'source': 'proc' if names is None else 'libvirt',
                        'note': source}
    try:
        policy = read_state(settings.resctrl.root)
        policy_error = None
    except PolicyStateError as exc:
        policy, policy_error = None, str(exc)
    plan['policy'] = policy.to_dict() if policy is not None else None
    if policy_error:
        plan['policy_error'] = policy_error
    try:
        plan['agent'] = AgentLock(settings.resctrl.root).running()
    except RDTError as exc:
        plan['agent'], plan['agent_error'] = None, str(exc)
    code = EXIT_CODES[plan['configuration']['state']]
    if args.json:
        json.dump(plan, sys.stdout, indent=2)
        sys.stdout.write('\n')
        return code
    colour = args.colour == 'always' or (args.colour == 'auto'
                                         and sys.stdout.isatty())
    print(report.render(plan, colour))
    print()
    print(report.render_agent(plan['agent'], plan.get('agent_error')))
    print(source)
    if settings.policy.enabled or policy or policy_error:
        print()
        print(report.render_policy(policy, policy_error))
    print()
    print(report.render_configuration(plan['configuration'],
                                      settings.resctrl.root))
    return code
