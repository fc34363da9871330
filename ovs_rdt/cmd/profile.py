"""``ovs-rdt profile``: size cache allocations from measured footprints.

Samples every group's ``llc_occupancy`` (or those named with ``--group``)
for ``--seconds`` and prints, per group and cache domain, the peak
footprint, the ways that hold it (``ceil(peak / way size)``) and the
``[pool:X] l3_ways`` / annotation lines to paste: the application note's
Table 3 -> Table 4 path (the README's References, seed 000).  See
doc/metrics.md.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from ovs_rdt.cmd.common import resctrl_from
from ovs_rdt.cmd import say
from ovs_rdt.conf import Settings
from ovs_rdt.core import model, sizing
from ovs_rdt.exceptions import ConfigError
from ovs_rdt import members, sampling
from ovs_rdt.resctrl import Resctrl


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--seconds', type=float, default=10.0,
                        help='how long to sample (default 10)')
    parser.add_argument('--interval', type=float, default=1.0,
                        help='seconds between samples (default 1)')
    parser.add_argument('--group', action='append', default=[],
                        metavar='GROUP',
                        help='a resctrl group to profile ("default" for the '
                        'root group); repeatable; default: every group. With '
                        'several, also the peak of them together (one shared '
                        'pool)')
    parser.add_argument('--json', action='store_true',
                        help='print the plan as JSON')


class Sampler:
    """Occupancy samples of some groups, members named as they change."""

    def __init__(self, resctrl: Resctrl, names: list[str] | None) -> None:
        self.resctrl = resctrl
        self.names = names
        self.peaks = sizing.Peaks()
        self.current: dict[str, dict[int, int]] = {}
        self.members: dict[str, list[str]] = {}
        self._seen: dict[str, frozenset[int]] = {}

    def take(self) -> None:
        groups = sampling.sample(self.resctrl, self.names)
        self.peaks.add({g.name: {d: v['llc_occupancy']
                                 for d, v in g.mon.items()
                                 if 'llc_occupancy' in v}
                        for g in groups})
        for grp in groups:
            self.current[grp.name] = {d: m.count for d, m in grp.l3.items()}
            tasks = frozenset(grp.tasks)
            if grp.name and self._seen.get(grp.name) != tasks:
                self._seen[grp.name] = tasks
                known = self.members.setdefault(grp.name, [])
                known += [n for n in members.names(members.describe(grp.tasks))
                          if n not in known]


def chosen(resctrl: Resctrl, labels: list[str]) -> list[str] | None:
    """The resctrl group names of ``--group`` (None: every group)."""
    if not labels:
        return None
    have = resctrl.group_names()
    names = []
    for label in labels:
        name = model.group_of_label(label)
        if name not in have:
            raise ConfigError('--group %r: no such resctrl group in %s '
                              '(there are: %s)' % (
                                  label, resctrl.root, ', '.join(
                                      model.label_of(n) for n in have)))
        if name not in names:
            names.append(name)
    return names


def run(settings: Settings, args: argparse.Namespace) -> int:
    if args.seconds < 0 or args.interval <= 0:
        say('profile', '--seconds must be >= 0 and --interval > 0')
        return 2
    resctrl = resctrl_from(settings)
    platform = resctrl.platform()
    if 'llc_occupancy' not in platform.mon_features:
        say('profile', 'this platform has no LLC occupancy monitoring '
            '(info/L3_MON/mon_features)')
        return 1
    names = chosen(resctrl, args.group)
    sampler = Sampler(resctrl, names)
    if sys.stderr.isatty():
        print('sampling LLC occupancy for %g s ...' % args.seconds,
              file=sys.stderr)
    start = time.monotonic()
    sampler.take()
    for i in range(1, int(args.seconds / args.interval + 1e-9) + 1):
        time.sleep(max(start + i * args.interval - time.monotonic(), 0))
        sampler.take()
    report = sizing.plan(
        sampler.peaks, {d: platform.way_bytes(d) for d in platform.domains},
        platform.cbm_len, platform.min_cbm_bits, sampler.current,
        sampler.members, together=bool(names and len(names) > 1))
    report['seconds'] = args.seconds
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write('\n')
    else:
        print(sizing.render(report))
    return 0
