"""Raw file I/O below the resctrl root, and the flock that guards it.

* Each write is one ``write(2)``, one command to the kernel; a failed one
  raises :class:`ResctrlError` with the file, the value and the kernel's
  ``info/last_cmd_status``.  Writes refuse to follow symlinks
  (``O_NOFOLLOW``).
* ``lock()`` is the kernel's documented convention: ``flock`` on the
  resctrl root, ``LOCK_EX`` around read-modify-write, ``LOCK_SH`` for reads.
"""
from __future__ import annotations

import errno
import fcntl
import os
import time

from ovs_rdt.exceptions import ResctrlError, ResctrlUnavailable

#: What :func:`read_file` asks for at a time.
_READ_SIZE = 65536

#: What reading a file of a group removed meanwhile gives: ENOENT (the
#: path; or the kernel's ``show`` racing the removal), ENODEV (a file open
#: before: ``kernfs_get_active()`` fails on a removed node), ESTALE (a FUSE
#: mount, the emulator: the node went between the lookup and its use).
GONE = (errno.ENOENT, errno.ENODEV, errno.ESTALE)


def gone(exc: OSError) -> OSError:
    """``exc``, as FileNotFoundError when it says the file's group went
    (:data:`GONE`): what every reader of resctrl takes as "gone".
    """
    if exc.errno in GONE and not isinstance(exc, FileNotFoundError):
        return FileNotFoundError(exc.errno, os.strerror(exc.errno),
                                 exc.filename)
    return exc


def read_file(path: str) -> str:
    """The whole file, in as few system calls as a read can take.

    (open() would add an fstat, an isatty ioctl and a seek, each a
    round trip to a FUSE mount; the hook reads ~50 files per event.)
    The files are ASCII; UTF-8 is the codec Python starts with (an
    "ascii" one costs the hook an import at every VM start).

    A read that returns less than it asked for has the whole file: every
    resctrl (and sysfs) file is one kernfs ``seq_show`` record, which
    ``seq_read_iter`` hands out whole up to the reader's size, and the
    emulator's ``direct_io`` reads return what is left up to the size.
    Only a full read is followed by another (a ``tasks`` list longer
    than the buffer); a read for end of file after every short one would
    be one more FUSE round trip per file, ~50 per event.

    A file of a group removed meanwhile (another tool's may go at any
    read) raises FileNotFoundError, however it is said (:func:`gone`).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            chunk = os.read(fd, _READ_SIZE)
            if len(chunk) < _READ_SIZE:
                return chunk.decode('utf-8')
            chunks = [chunk]
            while chunk:
                chunk = os.read(fd, _READ_SIZE)
                chunks.append(chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        raise gone(exc) from None
    return b''.join(chunks).decode('utf-8')


class _Lock:
    """``with resctrl.lock():`` (contextlib costs the hook milliseconds)."""

    __slots__ = ('files', 'exclusive')

    def __init__(self, files: 'Files', exclusive: bool) -> None:
        self.files = files
        self.exclusive = exclusive

    def __enter__(self) -> None:
        self.files._acquire(self.exclusive)

    def __exit__(self, *exc: object) -> None:
        self.files._release()


class Files:
    """The files below ``root``: paths, reads, one-write commands, the lock."""

    def __init__(self, root: str, lock_timeout: float) -> None:
        self.root = root.rstrip('/') or '/'
        self.lock_timeout = lock_timeout
        self._lock_fd: int | None = None
        self._lock_depth = 0
        self._lock_exclusive = False
        #: Counts the lock's acquisitions (depth 0 -> 1).
        self._lock_epoch = 0

    def path(self, group: str, *parts: str) -> str:
        """A group's directory (or a file in it).  Any name: a group
        another tool made is read whatever the kernel let it be called;
        the names ovs-rdt makes are checked where it makes them
        (:mod:`ovs_rdt.resctrl.owned`).
        """
        return os.path.join(self.root, group, *parts) if group else \
            os.path.join(self.root, *parts)

    def read(self, path: str) -> str:
        """The whole file (:func:`read_file`)."""
        return read_file(path)

    def last_cmd_status(self) -> str | None:
        try:
            return self.read(os.path.join(self.root, 'info',
                                          'last_cmd_status')).strip()
        except OSError:
            return None

    def write(self, path: str, value: str) -> None:
        """One write(2) of ``value``; raise ResctrlError on failure."""
        fd = self._open_write(path, value)
        try:
            self._write_fd(fd, path, value)
        finally:
            os.close(fd)

    @staticmethod
    def _open_write(path: str, value: str) -> int:
        try:
            return os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            reason = ('refusing to follow a symlink' if exc.errno == errno.ELOOP
                      else os.strerror(exc.errno or 0))
            raise ResctrlError(path, value, exc.errno, None, reason) from None

    def _write_fd(self, fd: int, path: str, value: str) -> None:
        """One write(2) on an open file: each is one command to the kernel
        (kernfs calls the file's write handler per write, whatever the
        offset), with its own ``last_cmd_status``.
        """
        try:
            os.write(fd, value.encode('ascii'))
        except OSError as exc:
            status = self.last_cmd_status()
            if status == 'ok':
                status = None
            raise ResctrlError(path, value, exc.errno, status,
                               os.strerror(exc.errno or 0)) from None

    # -- locking ----------------------------------------------------------
    def lock(self, exclusive: bool = True) -> '_Lock':
        """flock on the root (context manager); re-entrant in this object.

        Written here rather than taken from a lock library: the kernel
        documents the resctrl lock (Documentation/filesystems/resctrl.rst,
        "Locking between applications") as ``flock(2)`` on the resctrl
        root directory itself.  Lock libraries lock a file of their own (no
        file can be created in resctrl) or take POSIX ``fcntl`` record
        locks, which do not exclude an ``flock`` holder; and the libvirt
        hook, a new process at every event, imports no dependency for it.
        """
        return _Lock(self, exclusive)

    def _acquire(self, exclusive: bool) -> None:
        if self._lock_depth:
            if exclusive and not self._lock_exclusive:
                raise RuntimeError('cannot upgrade a shared resctrl lock')
            self._lock_depth += 1
            return
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise ResctrlUnavailable('cannot open resctrl root %s: %s'
                                     % (self.root, exc.strerror)) from None
        op = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.001
        try:
            while True:
                try:
                    fcntl.flock(fd, op | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise ResctrlUnavailable(
                            'timed out after %ss waiting for the lock on %s'
                            % (self.lock_timeout, self.root)) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd, self._lock_depth = fd, 1
        self._lock_exclusive = exclusive
        self._lock_epoch += 1

    def _release(self) -> None:
        self._lock_depth -= 1
        if self._lock_depth or self._lock_fd is None:
            return
        fd, self._lock_fd = self._lock_fd, None
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
