"""``ovs-rdt status [--json]``: the node's cache plan per cache domain."""
from __future__ import annotations

import argparse
import json
import sys

from ovs_rdt.agent.lock import AgentLock
from ovs_rdt.agent.policy import read_state
from ovs_rdt.agent.policy_state import PolicyStateError
from ovs_rdt.cmd.common import resctrl_from, vm_names
from ovs_rdt.cmd import report
from ovs_rdt.conf import Settings
from ovs_rdt.exceptions import RDTError
from ovs_rdt import members
from ovs_rdt.resctrl import Resctrl


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--json', action='store_true',
                        help='print the plan as JSON')
    parser.add_argument('--colour', choices=('auto', 'always', 'never'),
                        default='auto',
                        help='colour the way map (default: when a terminal)')


def collect(rc: Resctrl, names: dict[str, str] | None = None) -> dict:
    """The node's plan as it is now, members named (``report.build``).

    ``names``: uuid -> domain name from libvirt.
    """
    platform = rc.platform()
    with rc.lock(exclusive=False):
        groups = rc.groups(with_tasks=True)
    return report.build(platform, groups,
                        lambda g: members.describe(g.tasks, vm_names=names),
                        rc.numa_l3())


def run(settings: Settings, args: argparse.Namespace) -> int:
    names, source = vm_names(settings)
    plan = collect(resctrl_from(settings), names)
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
    if args.json:
        json.dump(plan, sys.stdout, indent=2)
        sys.stdout.write('\n')
        return 0
    colour = args.colour == 'always' or (args.colour == 'auto'
                                         and sys.stdout.isatty())
    print(report.render(plan, colour))
    print()
    print(report.render_agent(plan['agent'], plan.get('agent_error')))
    print(source)
    if settings.policy.enabled or policy or policy_error:
        print()
        print(report.render_policy(policy, policy_error))
    return 0
