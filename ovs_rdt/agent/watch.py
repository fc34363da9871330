"""Notice ovs-vswitchd (re)starting: inotify on its pidfile's directory.

ovs-vswitchd writes its pidfile (a rename into place) as it starts and
removes it on a clean exit; a restart changes nothing in the
``Open_vSwitch`` row, so this is what wakes the agent up for it.  Without
inotify (or without the directory) :meth:`PidfileWatch.fileno` is None and
the agent falls back on its periodic re-scan.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import struct

LOG = logging.getLogger(__name__)

IN_MODIFY = 0x002
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_Q_OVERFLOW = 0x4000
_MASK = (IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
         | IN_DELETE)
_HEADER = struct.Struct('iIII')


class PidfileWatch:
    """A non-blocking inotify fd that fires when ``path`` changes."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.name = os.path.basename(self.path).encode()
        self._fd: int | None = None
        self._watching = False
        try:
            self._libc = ctypes.CDLL(ctypes.util.find_library('c') or None,
                                     use_errno=True)
            fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError) as exc:
            LOG.warning('no inotify (%s): relying on periodic re-scans', exc)
            return
        if fd < 0:
            LOG.warning('inotify_init1: %s', os.strerror(ctypes.get_errno()))
            return
        self._fd = fd
        self.rearm()

    def fileno(self) -> int | None:
        return self._fd

    def rearm(self) -> bool:
        """(Re)add the watch on the pidfile's directory; True if watching."""
        if self._fd is None or self._watching:
            return self._watching
        directory = os.path.dirname(self.path).encode()
        wd = self._libc.inotify_add_watch(self._fd, directory, _MASK)
        self._watching = wd >= 0
        if not self._watching:
            LOG.debug('cannot watch %s: %s', directory.decode(),
                      os.strerror(ctypes.get_errno()))
        return self._watching

    def drain(self) -> bool:
        """Read pending events; True if one was about the pidfile."""
        hit = False
        while self._fd is not None:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            except OSError:
                break
            pos = 0
            while pos + _HEADER.size <= len(data):
                _wd, mask, _cookie, size = _HEADER.unpack_from(data, pos)
                name = data[pos + _HEADER.size:pos + _HEADER.size + size]
                pos += _HEADER.size + size
                if mask & IN_Q_OVERFLOW or name.rstrip(b'\0') == self.name:
                    hit = True
                if mask & 0x8000:  # IN_IGNORED: the directory went away
                    self._watching = False
        return hit

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
