"""The emulator launcher's teardown helpers (no FUSE needed)."""
from __future__ import annotations

import os
from typing import Any

from ovs_rdt.sandbox.emulator import close_own_fds_below


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_descriptors_left_below_the_mount_are_closed(tmp_path: Any) -> None:
    """An interrupt just after os.open() leaves a descriptor nobody closes:
    the teardown closes those below the mount, and no other.
    """
    below = tmp_path / 'resctrl'
    below.mkdir()
    (below / 'schemata').write_text('L3:0=7ff\n')
    (tmp_path / 'resctrl.log').write_text('')
    leaked = os.open(str(below / 'schemata'), os.O_RDONLY)
    root_fd = os.open(str(below), os.O_RDONLY | os.O_DIRECTORY)
    beside = os.open(str(tmp_path / 'resctrl.log'), os.O_RDONLY)
    try:
        close_own_fds_below(str(below))
        assert not _is_open(leaked) and not _is_open(root_fd)
        assert _is_open(beside)       # a sibling sharing the name's prefix
    finally:
        for fd in (leaked, root_fd, beside):
            if _is_open(fd):
                os.close(fd)
