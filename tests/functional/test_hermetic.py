"""A libvirt test that fails half-way leaves nothing on the host.

Runs, in a pytest of its own, a test that starts a private libvirtd, mounts
an emulator, starts an annotated KVM guest (so the hook has made a group)
and then fails on purpose; afterwards no daemon, guest, mount, hook file,
scratch directory or group of that run may remain.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

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
        print('MARK libvirtd=%s guest=%s' % (tb.libvirtd.pid(), tb.pid(guest)))
        assert False, 'failing on purpose, half-way'
    finally:
        emu.cleanUp()
'''


def test_failed_libvirt_test_leaves_the_host_clean(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / 'conftest.py').write_text(textwrap.dedent('''
        pytest_plugins = ['tests.functional.fixtures.emulator',
                          'tests.functional.fixtures.libvirt']
    '''))
    (tmp_path / 'test_inner.py').write_text(FAILING)
    before = host.snapshot(MARKERS)
    env = dict(os.environ, PYTHONPATH=REPO, OVS_RDT_TEST_RUN_ID=RUN_ID)
    res = subprocess.run([sys.executable, '-m', 'pytest', '-x', '-s', '-q',
                          '-p', 'no:cacheprovider', '--rootdir',
                          str(tmp_path), str(tmp_path / 'test_inner.py')],
                         capture_output=True, text=True, timeout=400,
                         env=env, cwd=str(tmp_path))
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert 'failing on purpose, half-way' in out, out
    mark = [ln for ln in out.splitlines() if ln.startswith('MARK ')]
    assert mark, 'the inner test failed before its guest ran: ' + out
    pids = [int(kv.split('=')[1]) for kv in mark[0].split()[1:]]
    for pid in pids:     # libvirtd and the guest's QEMU are gone
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
