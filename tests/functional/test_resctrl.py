"""The resctrl layer against the mounted emulator: locking, ownership,
symlinks, tasks and kernel errors."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import time

import pytest

from ovs_rdt.exceptions import NotOwnedError, ResctrlError, ResctrlUnavailable
from ovs_rdt.resctrl import Resctrl

HOLD_LOCK = '''
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX if sys.argv[2] == 'ex' else fcntl.LOCK_SH)
print('locked', flush=True)
time.sleep(float(sys.argv[3]))
'''


@pytest.fixture
def rc(emulated_resctrl):
    return Resctrl(emulated_resctrl.root, emulated_resctrl.sysfs,
                   lock_timeout=0.5)


def hold(root, mode, seconds):
    proc = subprocess.Popen([sys.executable, '-c', HOLD_LOCK, root, mode,
                             str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == 'locked'
    return proc


def test_exclusive_lock_waits_for_another_process(rc, emulated_resctrl):
    holder = hold(emulated_resctrl.root, 'ex', 5)
    try:
        began = time.monotonic()
        with pytest.raises(ResctrlUnavailable, match='timed out after 0.5s '
                           'waiting for the lock'):
            with rc.lock(exclusive=False):
                pass
        assert time.monotonic() - began >= 0.5
    finally:
        holder.kill()
        holder.wait()
    with rc.lock():   # free again
        pass


def test_shared_locks_coexist_and_block_writers(rc, emulated_resctrl):
    reader = hold(emulated_resctrl.root, 'sh', 5)
    try:
        with rc.lock(exclusive=False):
            rc.groups()
        with pytest.raises(ResctrlUnavailable):
            with rc.lock(exclusive=True):
                pass
    finally:
        reader.kill()
        reader.wait()


def test_lock_is_reentrant_and_released(rc, emulated_resctrl):
    with rc.lock():
        with rc.lock():
            rc.mkdir('ovsrdt-pool-x')
        rc.rmdir('ovsrdt-pool-x')
    reader = hold(emulated_resctrl.root, 'ex', 0.1)
    reader.wait()


def test_only_owned_groups_are_touched(rc, emulated_resctrl):
    os.mkdir(emulated_resctrl.path('COS1'))
    with rc.lock():
        for call in (lambda: rc.mkdir('COS2'), lambda: rc.rmdir('COS1'),
                     lambda: rc.write_schemata('COS1', 'L3:0=1\n'),
                     lambda: rc.write_mode('COS1', 'exclusive'),
                     lambda: rc.add_tasks('COS1', [os.getpid()])):
            with pytest.raises(NotOwnedError, match="'COS1'|'COS2'"):
                call()
        with pytest.raises(NotOwnedError, match='not a valid resctrl group'):
            rc.mkdir('ovsrdt-../../etc')
    assert os.path.isdir(emulated_resctrl.path('COS1'))


def test_symlinks_are_not_followed(rc, tmp_path):
    target = tmp_path / 'elsewhere'
    target.write_text('')
    with pytest.raises(ResctrlError, match='refusing to follow a symlink'):
        link = tmp_path / 'schemata'
        link.symlink_to(target)
        rc.write(str(link), 'L3:0=1\n')
    assert target.read_text() == ''


def test_tasks_one_per_write_and_exited_tids_tolerated(rc):
    child = subprocess.Popen([sys.executable, '-c', 'import time; '
                              'time.sleep(30)'])
    dead = subprocess.Popen(['true'])
    dead.wait()
    try:
        with rc.lock():
            rc.mkdir('ovsrdt-vm-t')
            gone = rc.add_tasks('ovsrdt-vm-t', [child.pid, dead.pid])
        assert gone == [dead.pid]
        assert rc.tasks('ovsrdt-vm-t') == [child.pid]
        assert child.pid not in rc.tasks('')
        with rc.lock():
            rc.rmdir('ovsrdt-vm-t')
        assert child.pid in rc.tasks('')
    finally:
        child.kill()
        child.wait()


def test_kernel_message_is_carried(rc):
    with rc.lock():
        rc.mkdir('ovsrdt-pool-x')
        with pytest.raises(ResctrlError) as err:
            rc.write_schemata('ovsrdt-pool-x', 'L3:0=800\n')
    assert err.value.errno == errno.EINVAL
    assert err.value.status == 'Mask out of range'
    assert "writing 'L3:0=800' to " in str(err.value)
    assert str(err.value).endswith('Mask out of range')


def test_platform_of_each_profile(emulator_factory):
    for profile, ways, domains in (('xeon-gold-6230', 11, (0, 1)),
                                   ('xeon-e7-8890-v4', 20, (0, 1, 2, 3)),
                                   ('xeon-d-1540', 12, (0,))):
        emu = emulator_factory(profile)
        plat = Resctrl(emu.root, emu.sysfs).platform(cpus=True)
        assert (plat.cbm_len, plat.domains) == (ways, domains)
        assert plat.num_closids == 16
        assert plat.cache_bytes[0] % ways == 0
        assert set(plat.cpu_domains.values()) == set(domains)


def test_missing_resctrl_is_explained(tmp_path):
    with pytest.raises(ResctrlUnavailable, match='resctrl is not mounted at'):
        Resctrl(str(tmp_path)).platform()
