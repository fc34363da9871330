"""``eval "$(ovs-rdt sandbox env)"``, then ``ovs-rdt status``: the
commands read the sandbox's configuration (issue 51 item 5: they read
/sys/fs/resctrl, the host's), in a sandbox of this test's own (emulator
only, a private --workdir: nothing machine-wide).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from tests.functional.fixtures.ovs import REPO


def test_sandbox_env_selects_the_sandbox_configuration() -> None:
    workdir = tempfile.mkdtemp(prefix='ovsrdt-sandbox-env-', dir='/dev/shm')
    os.rmdir(workdir)           # (start makes it)
    cli = [sys.executable, '-m', 'ovs_rdt.cmd.main']
    env = dict(os.environ, PYTHONPATH=REPO)
    env.pop('OVS_RDT_CONF', None)

    def sandbox(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(cli + ['sandbox', *args, '--workdir', workdir],
                              capture_output=True, text=True, timeout=300,
                              env=env)
    started = sandbox('start', '--emulator-only')
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert ('then ovs-rdt and ovs-rdt-agent alone reach the sandbox'
                in started.stdout), started.stdout
        shell = subprocess.run(
            ['sh', '-c', 'eval "$("$@" sandbox env --workdir %s)" && '
             '"$@" apply && "$@" config; "$@" status; echo "exit $?"'
             % workdir, 'sh'] + cli, capture_output=True, text=True,
            timeout=120, env=env)
        out = shell.stdout.splitlines()
        conf = os.path.join(workdir, 'ovs-rdt.conf')
        head = 'Files read ($OVS_RDT_CONF), in this order (a later value wins):'
        assert head in out, shell.stdout + shell.stderr
        assert out[out.index(head) + 1] == '  ' + conf, shell.stdout
        root = os.path.join(workdir, 'emulator', 'resctrl')
        assert ('Configuration: applied (%s holds what it asks)' % root
                in out), shell.stdout + shell.stderr
        assert out[-1] == 'exit 5'         # (no agent runs for it)
        # Named on the command line, a file wins over the variable.
        other = subprocess.run(
            ['sh', '-c', 'eval "$("$@" sandbox env --workdir %s)" && '
             '"$@" --config-file /nonexistent.conf config' % workdir, 'sh']
            + cli, capture_output=True, text=True, timeout=60, env=env)
        assert other.returncode == 2
        assert 'config file /nonexistent.conf does not exist' in other.stderr
    finally:
        stopped = sandbox('stop')
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert not os.path.exists(workdir)
