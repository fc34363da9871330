"""Fixtures that start real parts: each area keeps its own module.

The functional suite proves things through real parts, so a missing part
fails (the fixtures say which and how to install it) rather than skips, and
a run in which a test was skipped anyway, or none passed, fails too (set
OVS_RDT_ALLOW_SKIP=1 to allow skips while developing).
"""
from __future__ import annotations

import os

import pytest

pytest_plugins = [
    'tests.functional.fixtures.signals',
    'tests.functional.fixtures.emulator',
    'tests.functional.fixtures.ovs',
    'tests.functional.fixtures.libvirt',
    'tests.functional.fixtures.artifacts',
    'tests.functional.fixtures.migration',
]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin('terminalreporter')
    if reporter is None or exitstatus != 0:
        return
    passed = len(reporter.stats.get('passed', []))
    skipped = len(reporter.stats.get('skipped', []))
    if skipped and os.environ.get('OVS_RDT_ALLOW_SKIP') != '1':
        reporter.write_line('functional: %d test(s) skipped: every real part '
                            'must be there (OVS_RDT_ALLOW_SKIP=1 allows it)'
                            % skipped, red=True)
        session.exitstatus = 1
    elif session.testscollected and not passed:
        reporter.write_line('functional: no test passed', red=True)
        session.exitstatus = 1


@pytest.fixture(autouse=True)
def _no_agent_left_behind():
    """A test leaves no lock of an agent it started and did not stop (a
    ``kill -9`` it did not follow with a clean stop, or a stop that had to
    kill): ``/run/ovs-rdt/agent-*.lock`` naming a pid that is gone.
    """
    import glob
    import time

    began = time.time()
    yield
    left = []
    for path in glob.glob('/run/ovs-rdt/agent-*.lock'):
        try:
            if os.stat(path).st_mtime < began - 1:
                continue
            with open(path, encoding='utf-8') as fh:
                pid = fh.read().strip()
        except OSError:
            continue
        if pid.isdigit() and not os.path.exists('/proc/%s' % pid):
            left.append('%s (agent %s)' % (path, pid))
    assert not left, 'left behind: %s' % ', '.join(left)
