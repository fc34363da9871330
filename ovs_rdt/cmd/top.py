"""``ovs-rdt top``: live LLC occupancy and memory bandwidth per group.

Like ``pqos -T``: reads ``mon_data`` of every control group, turns the MBM
byte counters into MiB/s (2**20 bytes a second) over the refresh interval,
and sets each group's LLC occupancy against the bytes its mask gives it on
that domain (its ways x the way size).  Groups are named as in the metrics
(``default`` for the root) and so are their members (``vm=NAME``,
``pmd=CORES``).  A counter that went back (a wrap, or the group was
re-created) shows ``-`` for that interval.  Each refresh starts with the
time it was taken.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Callable

from ovs_rdt.cmd.common import resctrl_from, vm_names
from ovs_rdt.conf import Settings
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core import mbm, model
from ovs_rdt import members, sampling
from ovs_rdt.opts import whole_number
from ovs_rdt.resctrl import Resctrl

#: group -> (directory inode, {domain: {event: value}}, {domain: mask})
Sample = dict[str, tuple[int, dict[int, dict[str, int]], dict[int, CBM]]]
MIB = 2 ** 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--interval', type=float, default=1.0,
                        help='seconds between refreshes (default 1)')
    parser.add_argument('--once', action='store_true',
                        help='print one sample (over one interval) and exit')
    parser.add_argument('--no-clear', action='store_true',
                        help='append refreshes instead of redrawing the screen')
    parser.add_argument('--iterations', type=whole_number(), default=0,
                        help='stop after this many refreshes (0: until Ctrl-C)')


def sample(resctrl: Resctrl, names: dict[str, str] | None = None
           ) -> tuple[Sample, dict[str, str]]:
    """The counters of every group, and each group's members named.

    ``names``: uuid -> domain name from libvirt.
    """
    groups = sampling.sample(resctrl)
    named = {g.name: ' '.join(members.names(members.describe(
        g.tasks, vm_names=names))) for g in groups if g.name}
    return {g.name: (g.ident, g.mon, g.l3) for g in groups}, named


def rows(before: Sample, after: Sample, seconds: float,
         way_bytes: Callable[[int], int] = lambda dom: 0) -> list[tuple]:
    """(group, domain, occupancy KiB, allocated KiB, local MiB/s, total
    MiB/s) per group and domain; allocated: the ways of the group's mask
    there x ``way_bytes(domain)`` (None when unknown).
    """
    out = []
    for name in sorted(after, key=lambda n: (n == '', n)):
        ident, mon, masks = after[name]
        then = before.get(name)
        for dom, vals in sorted(mon.items()):
            prev = then[1].get(dom, {}) if then else {}

            def rate(feature: str) -> float | None:
                # None across a reset (core.mbm: a re-created group, a wrap)
                if feature not in vals or feature not in prev or seconds <= 0:
                    return None
                assert then is not None
                grew = mbm.increase((then[0], prev[feature]),
                                    (ident, vals[feature]))
                return None if grew is None else grew / seconds / MIB

            occ = vals.get('llc_occupancy')
            mask = masks.get(dom)
            size = mask.count * way_bytes(dom) if mask is not None else 0
            out.append((model.label_of(name), dom,
                        None if occ is None else occ / 1024,
                        size / 1024 if size else None,
                        rate('mbm_local_bytes'), rate('mbm_total_bytes')))
    return out


def render(table: list[tuple], interval: float,
           named: dict[str, str] | None = None, source: str = '',
           stamp: float | None = None) -> str:
    """The table; ``named``: group -> its members (as ``members.names``).

    ``source``: where VM names come from (a last line); ``stamp``: when
    the sample was taken (a first line, local time).
    """
    named = named or {}
    width = max([len(row[0]) for row in table] + [20])
    lines = []
    if stamp is not None:
        lines.append(time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(stamp)))
    lines.append('%-*s %4s %10s %10s %5s %11s %11s  %s' % (
        width, 'GROUP', 'L3', 'LLC[KiB]', 'OF[KiB]', 'OCC%', 'MBL[MiB/s]',
        'MBT[MiB/s]', 'MEMBERS'))

    def fmt(value: float | None) -> str:
        return '-' if value is None else '%.1f' % value

    for label, dom, occ, size, mbl, mbt in table:
        who = named.get(model.group_of_label(label), '')
        share = '-' if occ is None or not size else '%.0f' % (occ / size * 100)
        lines.append(('%-*s %4d %10s %10s %5s %11s %11s  %s' % (
            width, label, dom, fmt(occ), '-' if size is None else
            '%d' % size, share, fmt(mbl), fmt(mbt), who)).rstrip())
    lines.append('(%.1f s interval; OF: the bytes of the ways the group\'s '
                 'mask gives it on that cache domain)' % interval)
    if source:
        lines.append(source)
    return '\n'.join(lines)


def run(settings: Settings, args: argparse.Namespace) -> int:
    resctrl = resctrl_from(settings)
    platform = resctrl.platform()
    if not platform.mon_features:
        print('ovs-rdt top: this platform has no L3 monitoring (info/L3_MON)',
              file=sys.stderr)
        return 1
    tty = sys.stdout.isatty() and not args.once and not args.no_clear
    count = 0
    names, source = vm_names(settings)
    before, _ = sample(resctrl, names)
    stamp = time.monotonic()
    try:
        while True:
            time.sleep(args.interval)
            after, named = sample(resctrl, names)
            now = time.monotonic()
            text = render(rows(before, after, now - stamp, platform.way_bytes),
                          now - stamp, named, source, time.time())
            if tty:
                sys.stdout.write('\033[H\033[2J')
            print(text, flush=True)
            before, stamp = after, now
            count += 1
            if args.once or (args.iterations and count >= args.iterations):
                return 0
    except KeyboardInterrupt:
        return 0
