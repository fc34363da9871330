"""``ovs-rdt apply``: create or update the pools and the default group now."""
from __future__ import annotations

import argparse
import logging

from ovs_rdt.agent import agent_state
from ovs_rdt.cmd.changes import describe
from ovs_rdt.cmd import say
from ovs_rdt.cmd.common import manager_from, members_of, vm_names
from ovs_rdt.conf import Settings
from ovs_rdt.core import plan as plan_text
from ovs_rdt.exceptions import RDTError, count

LOG = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--dry-run', action='store_true',
                        help='print the writes without making them, each '
                             'with what it does to whom (the VMs and '
                             'threads of a group it removes or moves)')


def run(settings: Settings, args: argparse.Namespace) -> int:
    manager = manager_from(settings)
    # While an agent runs, its configuration is the pools' (it writes
    # them back): another is applied by reloading it, not over it.
    other = agent_state.other_than(settings.resctrl.root, settings.digests)
    if args.dry_run:
        state = manager.read(with_tasks=True)
        plan = manager.preview(prune=True, state=state)
        root = manager.resctrl.root
        if other:
            say('apply', 'without --dry-run, refused: %s' % other, 'warning')
        if not plan.steps:
            print('Dry run: nothing to change: %s holds what the '
                  'configuration asks' % root)
            return 0
        names, source = vm_names(settings)
        print('Dry run: %s would make %s what the configuration asks '
              '(nothing is written now):' % (count(len(plan.steps), 'write'),
                                             root))
        for line in describe(plan, members_of(state[1], names),
                             settings.pools):
            print(line)
        print(source)
        return 0
    if other:
        raise RDTError('nothing written: %s' % other)
    plan = manager.apply()
    for move in plan.moves:
        print(move)
    for name in sorted(plan.l3):
        code, data = plan.split.get(name, ({}, {}))
        # Under CDP, a pool's own code and data masks (the L3 line is
        # what they use together).
        masks = ('L3CODE:%s L3DATA:%s' % (plan_text.domain_text(code),
                                          plan_text.domain_text(data))
                 if code else plan_text.domain_text(plan.l3[name]))
        print('%-40s %s' % (name or 'default (root)', masks))
    if not plan.steps:
        print('(nothing to change)')
    return 0
