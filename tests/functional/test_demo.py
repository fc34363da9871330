"""``ovs-rdt demo --keep``: seed 000 Table 4 on real parts, then teardown."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from ovs_rdt import procfs
from tests.functional.fixtures import host
from tests.functional.fixtures.libvirt import node_parts_missing

WORKDIR = '/run/ovs-rdt-demo-test'
#: What the demo's daemons, mounts and guests carry in their names.
MARKERS = (WORKDIR, 'ovsrdt-demo-')


@pytest.fixture(autouse=True)
def real_parts() -> None:
    why = node_parts_missing()
    if why:
        pytest.fail('the demo needs real parts: %s' % why, pytrace=False)


def demo(*args: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main', 'demo',
                           '--workdir', WORKDIR, '--top-seconds', '1', *args],
                          capture_output=True, text=True, timeout=400,
                          env=env)


def emulator_root() -> str:
    from ovs_rdt.sandbox import Sandbox
    return Sandbox(WORKDIR).emulator.root


def read(*parts: str) -> str:
    with open(os.path.join(emulator_root(), *parts)) as fh:
        return fh.read()


def l3(group: str) -> str:
    return [ln.strip() for ln in read(group, 'schemata').splitlines()
            if ln.strip().startswith('L3:')][0]


def qemu_threads(name: str) -> tuple[set[int], set[int]]:
    from ovs_rdt.sandbox import Sandbox
    with open(os.path.join(Sandbox(WORKDIR).libvirtd.qemu_run_dir,
                           name + '.pid')) as fh:
        threads = procfs.threads(int(fh.read()))
    return ({tid for tid, _ in threads},
            {tid for tid, comm in threads if procfs.is_vcpu_thread(comm)})


def vswitchd_threads() -> tuple[set[int], set[int]]:
    from ovs_rdt.sandbox import Sandbox
    with open(Sandbox(WORKDIR).ovs.vswitchd_pidfile) as fh:
        pid = int(fh.read())
    pmds, others = set(), set()
    for tid in os.listdir('/proc/%d/task' % pid):
        with open('/proc/%d/task/%s/comm' % (pid, tid)) as fh:
            comm = fh.read().strip()
        (pmds if comm.startswith('pmd-c') else others).add(int(tid))
    return pmds, others


#: The contract's metrics and the groups each must be served for.
METRICS = ('ovs_rdt_llc_occupancy_bytes', 'ovs_rdt_mbm_total_bytes',
           'ovs_rdt_mbm_local_bytes', 'ovs_rdt_l3_ways', 'ovs_rdt_l3_cbm',
           'ovs_rdt_group_tasks')


def check_metrics(dedicated: str) -> None:
    """curl 127.0.0.1:9468/metrics on the demo node.

    Every contract metric for every group, parsed with prometheus_client's
    own parser.
    """
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen('http://127.0.0.1:9468/metrics',
                                timeout=10) as resp:
        text = resp.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    groups = {'default', 'ovsrdt-pool-hp', 'ovsrdt-pool-noisy', dedicated}
    for name in METRICS:
        fam = families[name]
        seen = {s.labels['group'] for s in fam.samples}
        assert seen == groups, (name, seen)
    assert families['ovs_rdt_mbm_total_bytes'].type == 'counter'
    assert families['ovs_rdt_llc_occupancy_bytes'].type == 'gauge'
    for name in ('ovs_rdt_policy_decisions', 'ovs_rdt_errors'):
        assert families[name].type == 'counter'
    hp_cbm = [s.value for s in families['ovs_rdt_l3_cbm'].samples
              if s.labels['group'] == 'ovsrdt-pool-hp']
    assert hp_cbm == [0x7f0, 0x7f0]


def test_demo_reproduces_table4_and_leaves_nothing_behind():
    before = host.snapshot(MARKERS)
    result = demo('--keep')
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        out = result.stdout
        assert 'ovsrdt-pool-hp' in out and 'Seed 000 Table 4' in out
        # The plan, read from the emulator's own files.
        assert l3('ovsrdt-pool-hp') == 'L3:0=7f0;1=7f0'
        assert l3('ovsrdt-pool-noisy') == 'L3:0=2;1=2'
        assert l3('') == 'L3:0=c;1=c'
        assert read('ovsrdt-pool-hp', 'mode').strip() == 'exclusive'
        dedicated = [g for g in os.listdir(emulator_root())
                     if g.startswith('ovsrdt-vm-')]
        assert len(dedicated) == 1
        assert l3(dedicated[0]) == 'L3:0=1;1=1'
        hp = {int(t) for t in read('ovsrdt-pool-hp', 'tasks').split()}
        noisy = {int(t) for t in read('ovsrdt-pool-noisy', 'tasks').split()}
        # PMD threads, ovs-vswitchd and the VM under test share one CLOS.
        pmds, others = vswitchd_threads()
        assert len(pmds) == 2 and pmds <= hp and others <= hp
        sut, sut_vcpus = qemu_threads('ovsrdt-demo-sut')
        assert len(sut_vcpus) == 2 and sut_vcpus <= hp
        for name in ('ovsrdt-demo-noisy1', 'ovsrdt-demo-noisy2'):
            tids, vcpus = qemu_threads(name)
            assert vcpus and vcpus <= noisy and not tids & hp
        check_metrics(dedicated[0])
        _, ded_vcpus = qemu_threads('ovsrdt-demo-dedicated')
        ded = {int(t) for t in read(dedicated[0], 'tasks').split()}
        assert ded_vcpus <= ded and not ded & (hp | noisy)
    finally:
        down = demo('--teardown')
    assert down.returncode == 0, down.stdout + down.stderr
    assert not os.path.exists(WORKDIR)
    host.assert_unchanged(before, MARKERS)


# After step 7 (the guests started: its line ends when it is done) and in
# step 9, "ovs-rdt top", once it shows its first figures: top alone ends
# quietly on Ctrl-C (there a Ctrl-C let the demo run on to the end, exit 0).
@pytest.mark.parametrize('step', ['[7/10]', '(1.'])
def test_ctrl_c_mid_demo_tears_everything_down(step):
    before = host.snapshot(MARKERS)
    proc = subprocess.Popen([sys.executable, '-m', 'ovs_rdt.cmd.main', 'demo',
                             '--workdir', WORKDIR, '--top-seconds', '30'],
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(step):
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    out = ''.join(seen) + rest
    assert proc.returncode == 130, out
    assert 'interrupted: tearing down' in out and 'Torn down' in out
    assert not os.path.exists(WORKDIR)
    host.assert_unchanged(before, MARKERS)


def test_libvirtd_that_never_comes_up_fails_in_one_line_and_cleans_up(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A daemon failing mid-demo: one line naming it and its log.

    No traceback, and everything started before it is gone again.
    """
    env = host.failing_libvirtd(tmp_path / 'bin')
    before = host.snapshot(MARKERS)
    result = demo(env=env)
    err = result.stderr
    assert result.returncode == 1, result.stdout + err
    assert 'Traceback' not in err + result.stdout
    assert '[5/10]' in result.stdout and 'FAILED' in result.stdout
    lines = [ln for ln in err.splitlines() if ln.startswith('ovs-rdt demo:')]
    assert len(lines) == 1, err
    assert 'libvirtd exited with status 1' in lines[0]
    assert 'cannot bind socket' in lines[0] and 'log: ' in lines[0]
    assert 'Torn down' in result.stdout
    assert not os.path.exists(WORKDIR)
    host.assert_unchanged(before, MARKERS)


def test_unusable_kvm_is_one_line_naming_the_fix(
        monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from ovs_rdt.cmd import demo as demo_mod
    from ovs_rdt import sandbox
    monkeypatch.setattr(sandbox, 'kvm_problem',
                        lambda: '/dev/kvm is root:root 0600')
    problems = demo_mod.missing_prerequisites(tcg=False)
    assert any('/dev/kvm is root:root 0600' in p and '--tcg' in p
               for p in problems)
    assert not any('/dev/kvm' in p
                   for p in demo_mod.missing_prerequisites(tcg=True))
