"""``ovs-rdt status [--json]``: the node's cache plan per cache domain, the
ways and CLOSIDs left, and whether resctrl holds what the configuration
asks (the exit status says it too).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Collection

from ovs_rdt.agent import agent_state
from ovs_rdt.agent.agent_state import AgentState
from ovs_rdt.agent.lock import AgentLock
from ovs_rdt.agent.policy import read_state
from ovs_rdt.agent.policy_state import PolicyStateError
from ovs_rdt.cmd.changes import explain
from ovs_rdt.cmd.common import manager_from, members_of, vm_names
from ovs_rdt.cmd import provider_config, report
from ovs_rdt.conf import Settings
from ovs_rdt.core.model import Group, Platform
from ovs_rdt.core.plan import Plan
from ovs_rdt.core.ways import closids_free
from ovs_rdt.exceptions import AllocationError, ConfigError, InvalidValue
from ovs_rdt.exceptions import RDTError
from ovs_rdt.manager import CacheManager
from ovs_rdt.resctrl import Resctrl

#: Exit statuses (besides 0, 1: an error, 2: a bad command line).
EXIT_DIFFERS = 3
EXIT_INVALID = 4
EXIT_AGENT = 5
APPLIED, DIFFERS, INVALID = 'applied', 'differs', 'invalid'
EXIT_CODES = {APPLIED: 0, DIFFERS: EXIT_DIFFERS, INVALID: EXIT_INVALID}
EPILOG = '''exit status:
  0  resctrl holds what the configuration asks, and the node's
     ovs-rdt-agent runs it
  1  an error (resctrl cannot be read, ...)
  2  a bad command line or configuration file
  %d  the configuration differs from what resctrl holds: "ovs-rdt apply"
     makes it so ("ovs-rdt apply --dry-run" shows how)
  %d  the configuration cannot be applied on this node (the reason is
     printed): resctrl holds the last layout applied
  %d  resctrl holds what the configuration asks, but no ovs-rdt-agent runs
     for it, or it runs an older configuration than the files, or it
     reports an error (the OvS knobs): what and what to do is printed
''' % (EXIT_DIFFERS, EXIT_INVALID, EXIT_AGENT)

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


def collect(resctrl: Resctrl, names: dict[str, str] | None = None) -> dict:
    """The node's plan as it is now, members named (``report.build``).

    ``names``: uuid -> domain name from libvirt.
    """
    with resctrl.lock(exclusive=False):
        groups = resctrl.groups(with_tasks=True)
    return _table(resctrl, resctrl.platform(), groups,
                  members_of(groups, names))


def _table(resctrl: Resctrl, platform: Platform, groups: list[Group],
           members: dict[str, list[dict]]) -> dict:
    return report.build(platform, groups, lambda g: members[g.name],
                        resctrl.cpus.numa_l3())


def assess(manager: CacheManager, names: dict[str, str] | None) -> dict:
    """:func:`collect`'s plan, with whether resctrl holds what the
    configuration asks (``configuration``: :func:`configuration`) and the
    ways and CLOSIDs left (``free`` in each domain, ``closids_free``:
    :func:`left`; ``free_error``: why the ways are not counted), all from
    one read of resctrl.

    What is left is what one more VM would get now, as ``provider-config``
    counts it for Placement and the hook's refusals say it; not counted
    when the configuration cannot be applied (the hook refuses VMs that
    need a write then).
    """
    platform, groups = state = manager.read(with_tasks=True)
    members = members_of(groups, names)
    plan = _table(manager.resctrl, platform, groups, members)
    try:
        target = manager.preview(prune=True, state=state)
    except _PLANNING_ERRORS as exc:
        plan['configuration'] = {'state': INVALID, 'error': str(exc),
                                 'writes': []}
        layout = groups
    else:
        plan['configuration'] = configuration(target, members,
                                              manager.settings.pools)
        layout = provider_config.layout_groups(target, groups)
    try:
        free = left(manager, state)
    except _PLANNING_ERRORS as exc:
        free, plan['free_error'] = {}, str(exc)
    for dom in plan['domains']:
        dom['free'] = free.get(dom['domain'])
    plan['closids_free'] = closids_free(platform.num_closids, len(layout),
                                        0, 0)
    return plan


def configuration(target: Plan, members: dict[str, list[dict]],
                  pools: Collection[str]) -> dict:
    """The writes of ``target`` (``ovs-rdt apply``'s plan) and what each
    does to whom (``members``: group -> its members; ``pools``: the
    configured ones).
    """
    said = explain(target, members, pools)
    return {'state': DIFFERS if target.steps else APPLIED, 'error': None,
            'writes': [{'write': str(step), 'effects': lines}
                       for step, lines in zip(target.steps, said)]}


def left(manager: CacheManager, state: tuple[Platform, list[Group]]
         ) -> dict[int, dict]:
    """Per domain, the ways left for one more VM and what holds the rest
    (:meth:`CacheManager.free_ways`: the count ``provider-config`` gives
    Placement and the hook's refusals say), and for one more pool that is
    not isolated.  Raises the planning errors (a configuration that
    cannot be applied, a ``system_l3_cbm`` that does not parse: nothing is
    counted then).
    """
    free = manager.free_ways(state)
    shared = manager.room(state, isolated=False)
    return {d: dict(free[d], pool_ways=free[d]['vm_ways'],
                    shared_pool_ways=shared[d]) for d in free}


def agent_problems(pid: str | None, state: AgentState | None,
                   changed: list[str],
                   read: dict[str, str | None] | None = None) -> list[str]:
    """What is wrong with the node's agent (exit status 5): none runs; it
    runs other files than this command read (``read``:
    :attr:`ovs_rdt.conf.Settings.digests`), or an older configuration than
    its files (``changed``: :func:`.agent_state.outdated`, the rule of its
    own log and ``ovs_rdt_config_outdated``); its OvS side reports an
    error.  Each with what to do.
    """
    if pid is None:
        return ['no ovs-rdt-agent runs for this resctrl root: nothing follows '
                'the OvS knobs (PMD threads stay where the last agent put '
                'them; Open_vSwitch external_ids:rdt-status is what it '
                'wrote), VM groups left behind stay, no metrics; start it: '
                + ('systemctl start ovs-rdt-agent' if agent_state.systemd()
                   else 'ovs-rdt-agent with the --config-file and '
                   '--config-dir of this command (doc/try-it.md, "Without '
                   'systemd")')]
    if state is None:
        return []       # (an agent that publishes nothing: cannot tell)
    out = []
    if read is not None and list(read) != list(state.read):
        out.append('it runs other files than this command read (%s): what '
                   'this command says of the configuration is of its files; '
                   'give it the agent\'s --config-file and --config-dir (or '
                   'set OVS_RDT_CONF)' % '; '.join(
                       agent_state.differs(state, read)))
    if changed:
        head = ('it runs an older configuration than the files (%s; it read '
                'them at %s)' % ('; '.join(changed),
                                 agent_state.when(state.loaded)))
        hint = agent_state.reload_hint(state.pid)
        out.append('%s: its last reload was rejected: %s; fix that, then '
                   'reload it again: %s' % (head, state.reload_error, hint)
                   if state.reload_error else
                   '%s: apply them with %s' % (head, hint))
    if state.ovs_status and state.ovs_status.startswith('error'):
        out.append('OvS knobs (Open_vSwitch external_ids:rdt-status): %s'
                   % state.ovs_status)
    return out


def run(settings: Settings, args: argparse.Namespace) -> int:
    names, source = vm_names(settings)
    plan = assess(manager_from(settings), names)
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
    state = None
    try:
        plan['agent'] = AgentLock(settings.resctrl.root).running()
        state = agent_state.read(settings.resctrl.root)
    except RDTError as exc:
        plan['agent'], plan['agent_error'] = None, str(exc)
    plan['agent_state'] = state.to_dict() if state is not None else None
    changed = agent_state.outdated(state) if state is not None else []
    plan['agent_problems'] = [] if plan.get('agent_error') else \
        agent_problems(plan['agent'], state, changed, settings.digests)
    code = EXIT_CODES[plan['configuration']['state']]
    if code == 0 and plan['agent_problems']:
        code = EXIT_AGENT
    if args.json:
        json.dump(plan, sys.stdout, indent=2)
        sys.stdout.write('\n')
        return code
    colour = args.colour == 'always' or (args.colour == 'auto'
                                         and sys.stdout.isatty())
    print(report.render(plan, colour))
    print()
    print(report.render_agent(plan['agent'], plan.get('agent_error'), state,
                              plan['agent_problems']))
    print(source)
    if settings.policy.enabled or policy or policy_error:
        print()
        print(report.render_policy(policy, policy_error, plan['agent']))
    print()
    print(report.render_configuration(plan['configuration'],
                                      settings.resctrl.root, bool(changed)))
    return code
