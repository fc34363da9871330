"""The stress suite: load, faults, hostile input, foreign tools, upgrades.

Two budgets, chosen with ``OVS_RDT_STRESS``:

* ``quick`` (default; ``tox -e stress-quick``, part of ``tools/test.sh``):
  a few minutes on a 2-core machine: 16 guests started at once, each fault
  once, Hypothesis' ``ci`` profile (a fixed number of examples per fuzz
  target, no database, derandomized so a CI failure reproduces).
* ``long`` (``tox -e stress``): 16 and 32 guests over several rounds and
  Hypothesis' ``long`` profile (many more examples, random seeds).

The figures (starts/s, hook time per event, fuzz cases, faults, leaks) are
written by :mod:`tests.stress.figures` to ``$OVS_RDT_STRESS_REPORT`` (default
``.stress-figures.json``) and printed at the end of the run.
"""
from __future__ import annotations

import os
import shutil
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests.stress import figures

pytest_plugins = [
    'tests.functional.fixtures.signals',
    'tests.functional.fixtures.emulator',
    'tests.functional.fixtures.ovs',
    'tests.functional.fixtures.libvirt',
]

LONG = os.environ.get('OVS_RDT_STRESS', 'quick') == 'long'

settings.register_profile(
    'ci', max_examples=1000, deadline=2000, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile(
    'long', max_examples=20000, deadline=5000, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get('HYPOTHESIS_PROFILE',
                                     'long' if LONG else 'ci'))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    text = figures.summary()
    if text:
        terminalreporter.section('stress figures')
        for line in text.splitlines():
            terminalreporter.write_line(line)


@pytest.fixture(scope='module')
def node(libvirt_testbed: Any) -> Iterator[Any]:
    """A node with guests' hook, emulator, OvS (PMD knob set) and agent.

    The agent reads the testbed's libvirtd (``[libvirt] uri``, read-only):
    an orphaned VM group goes as libvirt reports its domain stopped; its
    reconciliation also runs every second, and while libvirt does not
    answer removes an orphaned VM group after one second (ORPHAN_GRACE),
    so that repairs are seen within a test.
    """
    from tests.stress import bed     # after the fixture plugins

    emu = bed.mount_emulator(libvirt_testbed)
    ovs = bed.private_ovs()
    n = None
    try:
        ovs.start()
        n = bed.Node(libvirt_testbed, emu, ovs)
        ovs.other_config(**{'rdt-pmd-l3-ways': str(bed.PMD_WAYS)})
        n.start_agent()
        n.wait_agent_ok()
        yield n
    finally:
        libvirt_testbed.remove_guests()
        if n is not None:
            n.stop_agent()
        ovs.stop()
        emu.cleanUp()
        shutil.rmtree(ovs.dir, ignore_errors=True)
