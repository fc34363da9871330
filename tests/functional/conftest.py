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
