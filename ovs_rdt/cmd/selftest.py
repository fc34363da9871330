"""``ovs-rdt selftest``: does this node's resctrl behave as ovs-rdt relies on,
and do its cache ways shield anything?

Runs on ``[resctrl] root`` (``/sys/fs/resctrl``), in temporary groups of its
own (``ovsrdt-selftest-<pid>-*``); see :mod:`ovs_rdt.selftest` and
doc/platforms.md.  Exit status 0 only when every behaviour matched (a skip
is no mismatch); the effect part's verdict does not change it.

SIGTERM, SIGHUP (an SSH session dropped, a systemd timeout) and SIGINT
stop it where it is: its groups are removed, then it exits with 128 + the
signal's number.  A ``kill -9`` leaves them: the next selftest, ``ovs-rdt
apply``, the agent or the hook removes them once its process is gone
(:func:`ovs_rdt.procfs.selftest_left`).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from ovs_rdt.cmd import say
from ovs_rdt.conf import Settings
from ovs_rdt.exceptions import RDTError, count
from ovs_rdt.inputs import cpulists
from ovs_rdt.selftest.behaviours import BEHAVIOURS
from ovs_rdt.selftest import effect as effect_part
from ovs_rdt.selftest.node import Node
from ovs_rdt.selftest import report
from ovs_rdt.selftest.runner import FAIL, clean_stale, run_one

#: ``--seconds`` at most: the lock is held ~3 of them, the libvirt hook
#: waits ``[resctrl] lock_timeout`` (30 s) for it.
MAX_SECONDS = 5.0


def _usage(why: str) -> int:
    say('selftest', why)
    return 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--only', choices=('behaviour', 'effect'),
                        help='run only the kernel behaviours or only the effect '
                             'measurement (default: both)')
    parser.add_argument('--json', action='store_true',
                        help='print one JSON document (for a bug report)')
    parser.add_argument('--ways', type=int, default=2,
                        help="ways of the probe's group in the effect part (default 2)")
    parser.add_argument('--seconds', type=float, default=1.0,
                        help='seconds of measurement per effect phase (default 1, at '
                             'most %g: the effect part holds the resctrl lock for about '
                             'three of them)' % MAX_SECONDS)
    parser.add_argument('--cpus', metavar='A,B',
                        help='the two CPUs (different cores sharing an L3 cache) of the '
                             "effect part's probe and neighbour (default: two no OvS PMD "
                             'thread or pinned vCPU uses)')


#: What stops a selftest, its groups removed first.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Stopped(BaseException):
    """A stop signal came (not an Exception: no check catches it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, _frame: Any) -> None:
    for sig in STOP_SIGNALS:        # the clean-up runs once, undisturbed
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def run(settings: Settings, args: argparse.Namespace) -> int:
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop)
    node = None
    try:
        cfg = settings.resctrl
        node = Node(cfg.root, cfg.sysfs_cpu_root, cfg.lock_timeout)
        return _run(node, args)
    except Stopped as exc:
        left = node.cleanup() if node is not None else []
        say('selftest', 'stopped by %s; %s' % (
            signal.Signals(exc.signum).name, '; '.join(left) or
            'its groups are removed'))
        return 128 + exc.signum


def _run(node: Node, args: argparse.Namespace) -> int:
    try:
        cpus = cpulists.parse(args.cpus, '--cpus') if args.cpus else None
    except RDTError as exc:
        return _usage(str(exc))
    if cpus is not None and len(cpus) != 2:
        return _usage('--cpus: %r names %d CPUs, not two' % (args.cpus, len(cpus)))
    if args.ways < 1 or not 0 < args.seconds <= MAX_SECONDS:
        return _usage('--ways must be at least 1 and --seconds more than 0 and at most %g '
                      '(got --ways %d --seconds %g)' % (MAX_SECONDS, args.ways, args.seconds))
    node.resctrl.check()
    fstype, options = node.resctrl.mount_entry() or (None, [])
    facts = report.node_facts(node.root, fstype, options)
    stale = clean_stale(node)

    def say(line: str) -> None:
        if not args.json:
            print(line, flush=True)

    emulated = None
    if fstype and fstype != 'resctrl':
        plat = node.resctrl.platform()
        emulated = '%s of %s' % (count(len(plat.domains), 'L3 cache domain'),
                                 count(plat.cbm_len, 'way'))
    say(report.header(facts, stale, emulated))
    results = []
    if args.only != 'effect':
        say('')
        say(report.behaviour_title())
        for behaviour in BEHAVIOURS:
            results.append(run_one(node, behaviour))
            say(report.behaviour_line(results[-1]))
        say(report.summary(results))
    effect = None
    if args.only != 'behaviour':
        say('')
        effect = effect_part.run(node, args.ways, args.seconds, cpus)
        for line in report.effect_lines(effect):
            say(line)
    ok = not any(r.result == FAIL for r in results)
    if args.json:
        json.dump({'node': facts, 'stale_groups_removed': stale,
                   'behaviours': [r.as_dict() for r in results],
                   'effect': effect, 'ok': ok}, sys.stdout, indent=2)
        sys.stdout.write('\n')
    return 0 if ok else 1
