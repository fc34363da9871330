"""Runs the behaviours, each under the resctrl lock, and cleans up.

Around every behaviour: the lock (``flock(LOCK_EX)`` on the root, which
libvirt, pqos and ovs-rdt take too, so none of them writes meanwhile),
a snapshot of what it must not change (:mod:`.guard`: every other group's
files and tasks, monitor groups included, and the node's settings), and
afterwards the removal of the behaviour's groups and the end of its
tasks.  Before the first, :func:`clean_stale` removes what a killed run
left (``ovsrdt-selftest-<pid>-*`` of a PID that is no selftest now).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
import logging
import os
import re

from ovs_rdt.selftest.behaviours import Behaviour
from ovs_rdt.selftest.geometry import NEEDS, Geometry
from ovs_rdt.selftest import guard
from ovs_rdt.selftest.node import Mismatch, Node, Skip
from ovs_rdt import SELFTEST_GROUP_PREFIX

LOG = logging.getLogger(__name__)

PASS, FAIL, SKIP = 'pass', 'FAIL', 'skip'
_RUN = re.compile(re.escape(SELFTEST_GROUP_PREFIX) + r'(\d+)-')


@dataclass
class Result:
    name: str
    summary: str
    result: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def alive_selftest(pid: int) -> bool:
    """Whether ``pid`` is a running ``ovs-rdt selftest`` (not this one)."""
    if pid == os.getpid():
        return False
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as fh:
            return b'selftest' in fh.read()
    except OSError:
        return False


def clean_stale(node: Node) -> list[str]:
    """Remove the groups a killed run left; the names removed."""
    removed = []
    with node.lock():
        for name in node.groups():
            if not name.startswith(SELFTEST_GROUP_PREFIX):
                continue
            match = _RUN.match(name)
            if match and alive_selftest(int(match.group(1))):
                continue        # another selftest, running now
            try:
                os.rmdir(node.path(name))
            except FileNotFoundError:
                continue
            removed.append(name)
    if removed:
        LOG.warning('Removed what an earlier selftest left: %s', ', '.join(removed))
    return removed


def run_one(node: Node, behaviour: Behaviour) -> Result:
    def result(outcome: str, detail: str) -> Result:
        return Result(behaviour.name, behaviour.summary, outcome, detail)

    with node.lock():
        geo = Geometry.read(node)
        missing = [n for n in behaviour.needs if not geo.has(n)]
        if missing:
            return result(SKIP, 'the node has no %s' % ', '.join(NEEDS[n] for n in missing))
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
        if changed:
            problems.append('changed %s' % ', '.join(changed))
        left = node.mine()
        if left:
            problems.append('left %s' % ', '.join(left))
        if problems:
            outcome = FAIL
            detail = '%s; %s' % (detail, '; '.join(problems))
    return result(outcome, detail)


def _status(node: Node) -> str:
    try:
        return node.status()
    except OSError:
        return '?'
