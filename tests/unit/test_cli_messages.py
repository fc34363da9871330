"""What ``ovs-rdt`` writes on standard error: one form for every line,
``ovs-rdt COMMAND: error: ...`` / ``ovs-rdt COMMAND: warning: ...``
(``ovs-rdt: error: ...`` only while no subcommand is known).
"""
from __future__ import annotations

import pytest

from ovs_rdt.cmd import main

UNLISTED = ('[resctrl]\nroot = {root}\n[allocation]\npools = hp\n'
            '[pool:hp]\nl3_ways = 3\n[pool:noisy]\nl3_ways = 2\n')


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main.main(list(argv))
    return rc, capsys.readouterr().err


@pytest.mark.parametrize('command', ['apply', 'status'])
def test_config_error_names_the_subcommand(tmp_path, capsys, command):
    # Before: "ovs-rdt: error: ..." here, "ovs-rdt apply: error: ..." once
    # the configuration was read.
    bad = tmp_path / 'bad.conf'
    bad.write_text('[allocation]\npool = hp\n')
    rc, err = run(capsys, '--config-file', str(bad), command)
    assert rc == 2
    assert err == ("ovs-rdt %s: error: config file %s line 2: unknown option "
                   "'pool' in [allocation] (known: " % (command, bad)) + \
        err.split('(known: ', 1)[1]
    rc, err = run(capsys, command, '--config-file', str(tmp_path / 'no'))
    assert (rc, err) == (2, 'ovs-rdt %s: error: config file %s does not '
                            'exist\n' % (command, tmp_path / 'no'))


@pytest.mark.parametrize('command', ['apply', 'status'])
def test_unlisted_pool_section_is_a_warning(tmp_path, capsys, command):
    path = tmp_path / 'ovs-rdt.conf'
    path.write_text(UNLISTED.format(root=tmp_path / 'no-resctrl'))
    rc, err = run(capsys, '--config-file', str(path), command)
    lines = err.splitlines()
    assert lines[0] == (
        'ovs-rdt %s: warning: config file %s: [pool:noisy] is ignored: noisy '
        'is not in [allocation] pools (hp), so there is no group '
        'ovsrdt-pool-noisy (one left from before is removed, its tasks moved '
        'to the default group); add noisy to pools to use the pool, or remove '
        'or comment out the section' % (command, path))
    # (Then the command runs: here, without resctrl, its error.)
    assert rc == 1 and lines[1].startswith('ovs-rdt %s: error: ' % command)


def test_say_forms() -> None:
    import io
    import sys

    from ovs_rdt.cmd import say

    out = io.StringIO()
    old, sys.stderr = sys.stderr, out
    try:
        say(None, 'x')
        say('apply', 'y', 'warning')
        say('python3 -m ovs_rdt.emulator', 'z')
    finally:
        sys.stderr = old
    assert out.getvalue() == ('ovs-rdt: error: x\n'
                              'ovs-rdt apply: warning: y\n'
                              'python3 -m ovs_rdt.emulator: error: z\n')
