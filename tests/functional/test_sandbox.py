"""``ovs-rdt sandbox``: the emulator, a private OvS and a private libvirtd
with the hook, each reached with the commands it prints (doc/try-it.md);
``stop`` leaves nothing behind.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import uuid as uuidlib
from typing import Any, Iterator

import pytest

from ovs_rdt.resctrl import Resctrl
from tests.functional.fixtures import host
from tests.functional.fixtures.libvirt import VIRT_TYPE, node_parts_missing
from tests.functional.fixtures.ovs import wait_for

WORKDIR = '/run/ovs-rdt-sandbox-test'
MARKERS = (WORKDIR,)

GUEST = """\
<domain type='%s'>
  <name>%s</name>
  <uuid>%s</uuid>
  <memory unit='MiB'>64</memory>
  <vcpu>2</vcpu>
  <metadata>
    <rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">
      <rdt:l3 ways="2"/>
    </rdt:rdt>
  </metadata>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices>
</domain>
"""


def sandbox(*args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main',
                           'sandbox', *args, '--workdir', WORKDIR],
                          capture_output=True, text=True, timeout=400,
                          env=env)


@pytest.fixture
def clean_host() -> Iterator[dict[str, list[str]]]:
    """The host's state before; whatever a failing test left is ended."""
    why = node_parts_missing()
    if why:
        pytest.fail('the sandbox needs real parts: %s' % why, pytrace=False)
    before = host.snapshot(MARKERS)
    try:
        yield before
    finally:
        from ovs_rdt.sandbox import Sandbox
        if os.path.exists(WORKDIR):
            Sandbox(WORKDIR).teardown()


def printed(out: str, pattern: str) -> str:
    found = re.search(pattern, out)
    assert found, 'not in the output: %s\n%s' % (pattern, out)
    return found.group(1)


def vcpus(qemu_run_dir: str, name: str) -> set[int]:
    with open(os.path.join(qemu_run_dir, name + '.pid')) as fh:
        return host.vcpu_tids(int(fh.read()))


def test_a_guest_and_the_pmds_get_their_groups_and_stop_leaves_nothing(
        clean_host: dict[str, list[str]], tmp_path: Any) -> None:
    res = sandbox('start')
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    # What it prints is what reaches each part.
    virsh = shlex.split(printed(out, r"(virsh -c '[^']+') list --all"))
    vsctl = printed(out, r'(ovs-vsctl --db=\S+) show').split()
    agent_cmd = shlex.split(printed(
        out, r'\n  (\S*ovs-rdt-agent --config-file \S+)'))
    config = agent_cmd[-1]
    root = printed(out, r'ls (\S+)\n')
    assert config == os.path.join(WORKDIR, 'ovs-rdt.conf')
    assert 'Traceback' not in out + res.stderr

    rc = Resctrl(root)
    with open(os.path.join(WORKDIR, 'agent.out'), 'wb') as log:
        agent = subprocess.Popen(agent_cmd, stdout=log, stderr=log)
    try:
        # The agent, as printed: it applies the pool and takes the knobs.
        subprocess.run(vsctl + ['set', 'Open_vSwitch', '.',
                                'other_config:rdt-pmd-pool=hp'], check=True)
        wait_for(lambda: (subprocess.run(
            vsctl + ['--if-exists', 'get', 'Open_vSwitch', '.',
                     'external_ids:rdt-status'], capture_output=True,
            text=True).stdout.strip('"\n').startswith('ok')), timeout=60,
            step=0.2, what='rdt-status ok (log: %s/agent.out)' % WORKDIR)
        with open(os.path.join(WORKDIR, 'ovs', 'vswitchd.pid')) as fh:
            vswitchd = int(fh.read())
        assert set(map(int, os.listdir('/proc/%d/task' % vswitchd))) <= \
            set(rc.tasks('ovsrdt-pool-hp'))

        # An annotated guest, through the printed URI.
        uuid = str(uuidlib.uuid4())
        xml = tmp_path / 'guest.xml'
        xml.write_text(GUEST % (VIRT_TYPE, 'ovsrdt-sandbox-vm', uuid))
        subprocess.run(virsh + ['define', str(xml)], check=True,
                       capture_output=True)
        start = subprocess.run(virsh + ['start', 'ovsrdt-sandbox-vm'],
                               capture_output=True, text=True, timeout=120)
        assert start.returncode == 0, start.stderr
        group = 'ovsrdt-vm-' + uuid
        threads = vcpus(os.path.join(WORKDIR, 'libvirt', 'run', 'qemu'),
                        'ovsrdt-sandbox-vm')
        assert len(threads) == 2 and threads <= set(rc.tasks(group))
        assert rc.group(group).l3[0].count == 2

        # "eval $(ovs-rdt sandbox env)": virsh and ovs-vsctl alone reach it.
        shell = subprocess.run(
            ['sh', '-c', 'eval "$("$@" sandbox env --workdir %s)" && '
             'virsh -q list --name && ovs-vsctl br-exists br0 && '
             'test -f "$OVS_RDT_CONF" && ls "$OVS_RDT_RESCTRL"' % WORKDIR,
             'sh', sys.executable, '-m', 'ovs_rdt.cmd.main'],
            capture_output=True, text=True, timeout=60)
        assert shell.returncode == 0, shell.stderr
        assert 'ovsrdt-sandbox-vm' in shell.stdout and group in shell.stdout

        status = sandbox('status')
        assert status.returncode == 0, status.stdout + status.stderr
        assert 'ovs-rdt-agent %d' % agent.pid in status.stdout
        assert 'NOT RUNNING' not in status.stdout

        # Stop with the guest and the agent running: it ends them too.
        stop = sandbox('stop')
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert agent.wait(30) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    assert not os.path.exists(WORKDIR)
    host.assert_unchanged(clean_host, MARKERS)
    after = sandbox('status')
    assert after.returncode == 1
    assert after.stderr.startswith('ovs-rdt sandbox: error: no sandbox in %s'
                                   % WORKDIR), after.stderr


def test_emulator_only_refuses_a_second_start_and_stops_clean(
        clean_host: dict[str, list[str]]) -> None:
    res = sandbox('start', '--emulator-only', '--profile', 'xeon-d-1540')
    assert res.returncode == 0, res.stdout + res.stderr
    assert '[1/1] mounting the emulated resctrl (xeon-d-1540)' in res.stdout
    assert 'virsh' not in res.stdout and 'ovs-vsctl' not in res.stdout
    again = sandbox('start')
    assert again.returncode == 1        # (failed: 2 is a usage error)
    assert 'already set up in %s' % WORKDIR in again.stderr
    env = sandbox('env')
    assert env.returncode == 0
    assert 'OVS_RDT_CONF=%s/ovs-rdt.conf; export OVS_RDT_CONF' % WORKDIR \
        in env.stdout
    assert 'LIBVIRT_DEFAULT_URI' not in env.stdout

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, '-m', 'ovs_rdt.cmd.main', '--config-file',
             os.path.join(WORKDIR, 'ovs-rdt.conf')] + list(args),
            capture_output=True, text=True, timeout=60)

    # No agent runs: the sandbox's pool hp is configured, not yet applied.
    status = cli('status')
    assert status.returncode == 3, status.stdout + status.stderr
    assert 'sets the masks of pool hp' in status.stdout, status.stdout
    assert cli('apply').returncode == 0
    status = cli('status')
    assert status.returncode == 5, status.stdout + status.stderr  # no agent
    assert '12 ways' in status.stdout       # the emulated Xeon D-1540
    stop = sandbox('stop')
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert not os.path.exists(WORKDIR)
    host.assert_unchanged(clean_host, MARKERS)


def test_a_daemon_failing_to_start_leaves_nothing(
        clean_host: dict[str, list[str]], tmp_path: Any) -> None:
    env = host.failing_libvirtd(tmp_path / 'bin')
    res = sandbox('start', env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    assert '[3/3]' in res.stdout and 'FAILED' in res.stdout
    lines = [ln for ln in res.stderr.splitlines()
             if ln.startswith('ovs-rdt sandbox:')]
    assert len(lines) == 1 and 'libvirtd exited with status 1' in lines[0]
    assert 'Traceback' not in res.stdout + res.stderr
    assert not os.path.exists(WORKDIR)
    host.assert_unchanged(clean_host, MARKERS)
