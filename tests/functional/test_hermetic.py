"""A libvirt test that fails half-way leaves nothing on the host.

Runs, in a pytest of its own, a test that starts a private libvirtd, mounts
an emulator, starts an annotated KVM guest (so the hook has made a group)
and then fails on purpose, or is killed with SIGTERM (a CI timeout);
afterwards no daemon, guest, mount, hook file, scratch directory or group
of that run may remain.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import pytest

from tests.functional.fixtures import host

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
#: The inner run's id: in its work dir, guest names and so in every
#: daemon's command line and mount it makes (other runs have other ids).
RUN_ID = 'herm%s' % uuid.uuid4().hex[:6]
MARKERS = (RUN_ID,)

FAILING = '''
from tests.functional.fixtures.emulator import EmulatorFixture


def test_fails_half_way(libvirt_testbed):
    tb = libvirt_testbed
    emu = EmulatorFixture('xeon-gold-6230', rootdir=tb.mount_base)
    emu.setUp()
    try:
        tb.configure(emu.root, emu.sysfs)
        guest = tb.define('<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">'
                          '<rdt:l3 ways="2"/></rdt:rdt>')
        tb.start(guest)
        with open(emu.path(guest.group, 'tasks')) as fh:
            assert fh.read().split(), 'the hook placed no thread'
        print('MARK libvirtd=%s guest=%s' % (tb.libvirtd.pid(), tb.pid(guest)),
              flush=True)
        if os.environ.get('HERMETIC_WAIT'):
            time.sleep(300)     # until the outer test sends SIGTERM
        assert False, 'failing on purpose, half-way'
    finally:
        emu.cleanUp()
'''
#: Two nodes, a migration under way (the window a bandwidth cap keeps
#: open), then SIGTERM.
MIGRATING = '''
import threading

from tests.functional.fixtures.migration import wait_for


def test_killed_mid_migration(two_nodes):
    a, b = two_nodes.a, two_nodes.b
    two_nodes.reset()
    guest = a.define('<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">'
                     '<rdt:l3 ways="2"/></rdt:rdt>')
    a.start(guest)
    threading.Thread(target=two_nodes.migrate, args=(guest, a),
                     kwargs={'extra': ('--bandwidth', '1'), 'check': False},
                     daemon=True).start()
    wait_for(lambda: guest.group in b.groups() and b.tasks(guest.group), 120)
    print('MARK a=%s b=%s qa=%s qb=%s' % (a.libvirtd.pid(), b.libvirtd.pid(),
                                          a.pid(guest), b.pid(guest)),
          flush=True)
    time.sleep(300)     # until the outer test sends SIGTERM
'''
PLUGINS = '''
pytest_plugins = ['tests.functional.fixtures.signals',
                  'tests.functional.fixtures.emulator',
                  'tests.functional.fixtures.libvirt',
                  'tests.functional.fixtures.migration']
'''


def _inner(tmp_path,  # type: ignore[no-untyped-def]
           body: str = FAILING,
           **env_extra: str) -> tuple[list[str], dict[str, str]]:
    """The inner run's command line and environment."""
    (tmp_path / 'conftest.py').write_text(PLUGINS)
    (tmp_path / 'test_inner.py').write_text(
        'import os\nimport time\n' + body)
    env = dict(os.environ, PYTHONPATH=REPO, OVS_RDT_TEST_RUN_ID=RUN_ID,
               **env_extra)
    return ([sys.executable, '-m', 'pytest', '-x', '-s', '-q',
             '-p', 'no:cacheprovider', '--rootdir', str(tmp_path),
             str(tmp_path / 'test_inner.py')], env)


def _pids(mark: str) -> list[int]:
    return [int(kv.split('=')[1]) for kv in mark.split()[1:]]


def test_failed_libvirt_test_leaves_the_host_clean(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    cmd, env = _inner(tmp_path)
    before = host.snapshot(MARKERS)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=400,
                         env=env, cwd=str(tmp_path))
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert 'failing on purpose, half-way' in out, out
    mark = [ln for ln in out.splitlines() if ln.startswith('MARK ')]
    assert mark, 'the inner test failed before its guest ran: ' + out
    for pid in _pids(mark[0]):     # libvirtd and the guest's QEMU are gone
        assert not host.alive(pid), (pid, out)
    host.assert_unchanged(before, MARKERS)


@pytest.mark.parametrize('body', [FAILING, MIGRATING],
                         ids=['one-node', 'two-nodes-mid-migration'])
def test_a_libvirt_test_killed_with_sigterm_leaves_the_host_clean(
        tmp_path, body: str) -> None:  # type: ignore[no-untyped-def]
    # A CI timeout: SIGTERM while the guest runs and the emulator is
    # mounted (or, with two nodes, while a guest migrates between them).
    # Without tests.functional.fixtures.signals no finaliser ran: the
    # emulator, its FUSE mount and the scratch tmpfs stayed.
    cmd, env = _inner(tmp_path, body, HERMETIC_WAIT='1')
    before = host.snapshot(MARKERS)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=str(tmp_path))
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith('MARK '):
                proc.send_signal(signal.SIGTERM)
                break
        out = ''.join(lines) + proc.communicate(timeout=300)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    mark = [ln for ln in out.splitlines() if ln.startswith('MARK ')]
    assert mark, 'the inner test failed before its guest ran: ' + out
    assert 'SIGTERM' in out, out
    for pid in _pids(mark[0]):
        assert not host.alive(pid), (pid, out)
    host.assert_unchanged(before, MARKERS)


def test_a_private_libvirtd_does_not_pin_other_fuse_mounts(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An emulator mounted elsewhere before a private libvirtd starts.

    It still ends when the host unmounts it: the namespace dropped its copy
    of the mount.
    """
    from ovs_rdt.sandbox.emulator import MountedEmulator
    from ovs_rdt.sandbox.libvirtd import PrivateLibvirtd

    emu = MountedEmulator(str(tmp_path / 'emu'), 'xeon-d-1540').start()
    lv = PrivateLibvirtd(str(tmp_path / 'lv' / 'libvirt'))
    try:
        lv.start(die_with_parent=True)
        problems = emu.stop()
        assert problems == [], problems
        assert not host.alive(emu.pid)
    finally:
        assert lv.stop() == []
        emu.stop()
