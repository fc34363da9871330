"""What the resctrl layer reads: each file once per question (the libvirt
hook reads the platform and every group at each VM start, on a FUSE
mount in the tests and the emulator, on kernfs on a node).
"""
from __future__ import annotations

import collections
import os

from ovs_rdt.resctrl.platform import MountState
from ovs_rdt.resctrl import Resctrl
from tests.unit.fakes import make_tree


class Counting(Resctrl):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reads: collections.Counter[str] = collections.Counter()
        self.signatures = 0

    def read(self, path: str) -> str:
        self.reads[os.path.relpath(path, self.root)] += 1
        return super().read(path)

    def _mount_signature(self, cdp: bool) -> MountState:
        self.signatures += 1
        return super()._mount_signature(cdp)


def tree(tmp_path,
         make: bool = True) -> Counting:
    root, sysfs = str(tmp_path / 'r'), str(tmp_path / 'cpu')
    if make:
        make_tree(root, sysfs=sysfs)
    return Counting(root, sysfs, mounts=str(tmp_path / 'mounts'))


def test_the_platform_reads_each_info_file_once(tmp_path) -> None:
    rc = tree(tmp_path)
    platform = rc.platform()
    assert platform.cbm_len == 11 and platform.num_closids == 8
    twice = {path: n for path, n in rc.reads.items() if n > 1}
    assert twice == {}, twice          # cbm_mask was read three times
    assert rc.reads['info/L3/cbm_mask'] == 1
    rc.reads.clear()
    rc.platform()                      # cached
    assert not rc.reads
    # A refresh reads again (the memo lives for one reading only).
    rc.platform(refresh=True)
    assert rc.reads['info/L3/cbm_mask'] == 1


def test_staleness_is_not_asked_of_a_platform_read_under_the_same_lock(
        tmp_path) -> None:
    rc = tree(tmp_path)
    with rc.lock():
        rc.platform()
        assert rc.signatures == 1
        assert not rc.platform_stale(rc.group('', with_tasks=False))
        assert rc.signatures == 1       # read a moment ago, same hold
    with rc.lock():
        assert not rc.platform_stale(rc.group('', with_tasks=False))
        assert rc.signatures == 2       # an earlier hold: compared again
    # Read without the lock: compared under it.
    rc2 = tree(tmp_path / 'b')
    rc2.platform()
    with rc2.lock():
        rc2.platform_stale(rc2.group('', with_tasks=False))
    assert rc2.signatures == 2


def test_group_names_are_real_directories_only(tmp_path) -> None:
    rc = tree(tmp_path)
    os.mkdir(os.path.join(rc.root, 'ovsrdt-vm-x'))
    os.mkdir(os.path.join(rc.root, 'COS1'))
    os.symlink(os.path.join(rc.root, 'COS1'),
               os.path.join(rc.root, 'ovsrdt-link'))
    with open(os.path.join(rc.root, 'ovsrdt-file'), 'w'):
        pass
    assert rc.group_names() == ['', 'COS1', 'ovsrdt-vm-x']


def test_read_returns_the_whole_file(tmp_path) -> None:
    rc = tree(tmp_path)
    path = str(tmp_path / 'big')
    text = ''.join('%d\n' % i for i in range(40000))    # > 64 KiB
    with open(path, 'w') as fh:
        fh.write(text)
    assert Resctrl.read(rc, path) == text
    open(path, 'w').close()
    assert Resctrl.read(rc, path) == ''
    with open(path, 'w') as fh:
        fh.write('x' * 65536)                           # one full read
    assert Resctrl.read(rc, path) == 'x' * 65536


def test_a_short_read_is_the_whole_file(tmp_path, monkeypatch) -> None:
    """kernfs hands a resctrl file out whole up to the reader's size: a
    read for end of file after it would be one more FUSE round trip per
    file on the emulator.  A full read is followed by more.
    """
    rc = tree(tmp_path)
    calls = []
    real = os.read

    def counting(fd: int, size: int) -> bytes:
        calls.append(size)
        return real(fd, size)

    monkeypatch.setattr(os, 'read', counting)
    assert rc.read(os.path.join(rc.root, 'schemata')).startswith('L3:')
    assert len(calls) == 1
    path = str(tmp_path / 'full')
    with open(path, 'w') as fh:
        fh.write('1\n' * 40000)
    del calls[:]
    assert Resctrl.read(rc, path) == '1\n' * 40000
    assert len(calls) == 3                  # 64 KiB, the rest, end of file


def test_the_mount_state_is_named(tmp_path) -> None:
    """What platform() keeps to compare later is a MountState read by
    field names, not a tuple unpacked by position.
    """
    rc = tree(tmp_path)
    rc.platform()
    state = rc._mount_signature(False)
    assert isinstance(state, MountState) and state.cdp is False
    assert state == rc._mount_signature(False)
    assert state.io_alloc == ((None, None),)
