"""``ovs-rdt apply``: create or update the pools and the default group now."""
from __future__ import annotations

import argparse
import logging

from ovs_rdt.cmd.common import manager_from
from ovs_rdt.conf import Settings
from ovs_rdt.core import plan as plan_text

LOG = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--dry-run', action='store_true',
                        help='print the writes without making them')


def run(settings: Settings, args: argparse.Namespace) -> int:
    manager = manager_from(settings)
    if args.dry_run:
        plan = manager.preview(prune=True)
        for move in plan.moves:
            print('# %s' % move)
        for step in plan.steps:
            print('%s %s %s' % (step.op, step.group or '/',
                                step.value.strip().replace('\n', ' ')))
        return 0
    plan = manager.apply()
    for move in plan.moves:
        print(move)
    for name in sorted(plan.l3):
        masks = plan.l3[name]
        print('%-40s %s' % (name or 'default (root)',
                            plan_text.domain_text(masks)))
    if not plan.steps:
        print('(nothing to change)')
    return 0
