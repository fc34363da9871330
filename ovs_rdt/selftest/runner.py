"""Runs the behaviours, each under the resctrl lock, and cleans up.

Around every behaviour: the lock (``flock(LOCK_EX)`` on the root, which
libvirt, pqos and ovs-rdt take too, so none of them writes meanwhile),
a snapshot of what it must not change (:mod:`.guard`: every other group's
files and tasks, monitor groups included, and the node's settings), and
afterwards the removal of the behaviour's groups and the end of its
tasks.  A change is the kernel's or another writer's: :func:`run_one` tells
which.  Before the first, :func:`clean_stale` removes what a killed run
left (``ovsrdt-selftest-<pid>-*`` of a PID that is no selftest now).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
import logging
import os
import time

from ovs_rdt import procfs
from ovs_rdt.selftest.behaviours import Behaviour
from ovs_rdt.selftest.geometry import NEEDS, Geometry
from ovs_rdt.selftest import guard
from ovs_rdt.selftest.node import Mismatch, Node, Skip

LOG = logging.getLogger(__name__)

PASS, FAIL, SKIP = 'pass', 'FAIL', 'skip'


@dataclass
class Result:
    name: str
    summary: str
    result: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def clean_stale(node: Node) -> list[str]:
    """Remove the groups a killed run left; the names removed."""
    removed = []
    with node.lock():
        for name in node.groups():
            if not procfs.selftest_left(name):
                continue        # not a selftest's, or one running now
            try:
                os.rmdir(node.path(name))
            except FileNotFoundError:
                continue
            removed.append(name)
    if removed:
        LOG.warning('Removed what an earlier selftest left: %s', ', '.join(removed))
    return removed


#: Tries of a behaviour that changes what it must not (:func:`run_one`).
TRIES = 3
#: After such a try the selftest watches, doing nothing, this many times as
#: long as the try took, and at least and at most these seconds.
IDLE_TIMES, IDLE_MIN, IDLE_MAX = 3, 0.2, 3.0


def run_one(node: Node, behaviour: Behaviour) -> Result:
    """The behaviour's result.

    A try that changed what it must not (:mod:`.guard`) changed it itself
    (the kernel did, at one of its writes) or another writer did meanwhile
    (a tool that does not take the lock).  To tell which, the selftest then
    keeps the lock and does nothing for :data:`IDLE_TIMES` as long, watching
    the same: a change then is another writer's.  The behaviour is tried
    again, :data:`TRIES` times in all: the first try that changes nothing
    gives the verdict.  When every try changed something: ``skip`` (another
    writer) if anything changed while the selftest did nothing, else FAIL
    naming what changed, since then nothing but the selftest's own actions
    was there to change it.
    """
    idle: list[str] = []
    for _ in range(TRIES):
        res, changed, idle = _run_once(node, behaviour, idle)
        if not changed:
            return res
    if idle:
        return Result(behaviour.name, behaviour.summary, SKIP,
                      'another writer changed resctrl during the check, %d times, '
                      'and while the selftest did nothing (%s): a tool that does not '
                      'take the lock; run the selftest again when it is quiet'
                      % (TRIES, ', '.join(idle)))
    return res


def _run_once(node: Node, behaviour: Behaviour, idle: list[str]
              ) -> tuple[Result, list[str], list[str]]:
    """One try: its result, what it changed and, with ``idle`` (what
    changed while the selftest did nothing, so far) empty, what changed
    in the watch after a try that changed something.
    """
    def result(outcome: str, detail: str) -> Result:
        return Result(behaviour.name, behaviour.summary, outcome, detail)

    with node.lock():
        geo = Geometry.read(node)
        missing = [n for n in behaviour.needs if not geo.has(n)]
        if missing:
            return result(SKIP, 'the node has no %s' % ', '.join(
                NEEDS[n] for n in missing)), [], idle
        start = time.monotonic()
        before = guard.snapshot(node)
        outcome, detail = FAIL, 'interrupted'
        try:
            outcome, detail = PASS, behaviour.check(node, geo)
        except Mismatch as exc:
            outcome, detail = FAIL, str(exc)
        except Skip as exc:
            outcome, detail = SKIP, str(exc)
        except Exception as exc:    # a bug in a check, or an answer no check
            # expected: FAIL, and the next behaviours still run
            LOG.debug('%s', behaviour.name, exc_info=True)
            outcome, detail = FAIL, 'unexpected error: %s: %s (last_cmd_status %r)' % (
                type(exc).__name__, exc, _status(node))
        finally:
            problems = node.cleanup()
        after = guard.snapshot(node)
        changed = guard.changes(before, after)
        if changed:
            problems.append('changed %s' % ', '.join(changed))
            if not idle:
                idle = guard.watch(node, after, min(max(
                    IDLE_TIMES * (time.monotonic() - start), IDLE_MIN), IDLE_MAX))
        left = node.mine()
        if left:
            problems.append('left %s' % ', '.join(left))
        if problems:
            outcome = FAIL
            detail = '%s; %s' % (detail, '; '.join(problems))
    return result(outcome, detail), changed, idle


def _status(node: Node) -> str:
    try:
        return node.status()
    except OSError:
        return '?'
