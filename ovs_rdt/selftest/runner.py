"""Runs the behaviours, each under the resctrl lock, and cleans up.

Around every behaviour: the lock (``flock(LOCK_EX)`` on the root, which
libvirt, pqos and ovs-rdt take too, so none of them writes meanwhile),
a snapshot of what it must not change (:mod:`.guard`: every other group's
files and tasks, monitor groups included, and the node's settings), and
afterwards the removal of the behaviour's groups and the end of its
tasks (when one changes, a tool that does not take the lock wrote
meanwhile, and the behaviour is tried again).  Before the first, :func:`clean_stale` removes what a killed run
left (``ovsrdt-selftest-<pid>-*`` of a PID that is no selftest now).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
import logging
import os

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


#: Tries of a behaviour while another writer changes resctrl during it.
TRIES = 3


def run_one(node: Node, behaviour: Behaviour) -> Result:
    """The behaviour's result; tried again while a tool that does not take
    the lock changes another group meanwhile (then what the check saw is
    no verdict on the kernel).
    """
    for _ in range(TRIES):
        res, changed = _run_once(node, behaviour)
        if not changed:
            return res
    return Result(behaviour.name, behaviour.summary, SKIP,
                  'another writer changed resctrl during the check (%s), %d '
                  'times: a tool that does not take the lock; run the selftest '
                  'again when it is quiet' % (', '.join(changed), TRIES))


def _run_once(node: Node, behaviour: Behaviour) -> tuple[Result, list[str]]:
    def result(outcome: str, detail: str) -> Result:
        return Result(behaviour.name, behaviour.summary, outcome, detail)

    with node.lock():
        geo = Geometry.read(node)
        missing = [n for n in behaviour.needs if not geo.has(n)]
        if missing:
            return result(SKIP, 'the node has no %s' % ', '.join(NEEDS[n] for n in missing)), []
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
        changed = guard.changes(before, guard.snapshot(node))
        left = node.mine()
        if left:
            problems.append('left %s' % ', '.join(left))
        if problems:
            outcome = FAIL
            detail = '%s; %s' % (detail, '; '.join(problems))
    return result(outcome, detail), changed

def _status(node: Node) -> str:
    try:
        return node.status()
    except OSError:
        return '?'
