"""The mfusepy binding: every file operation is handed to the kernel model.

Errors raised by the model as ``OSError(errno)`` reach the writer as that
errno, like a kernfs ``write`` handler's negative return value.  Files are
opened with ``direct_io`` so every ``write(2)`` is one command and every read
sees fresh contents (kernfs files have size 0 too).  The daemon runs FUSE
single-threaded and also serializes operations with a lock, so the model never
sees two operations at once (the kernel's ``rdtgroup_mutex``).
"""
from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from typing import Any, Callable, Optional

import mfusepy

from ovs_rdt.emulator.context import oserror
from ovs_rdt.emulator.faults import KILL, Faults
from ovs_rdt.emulator.model import Caller, Node, ResctrlModel

LOG = logging.getLogger(__name__)


class _Handle:
    __slots__ = ('node', 'content', 'writes')

    def __init__(self, node: Node) -> None:
        self.node = node
        self.content: Optional[bytes] = None
        self.writes = 0


class ResctrlFS(mfusepy.Operations):  # type: ignore[misc]
    """FUSE operations over one :class:`ResctrlModel`."""

    use_ns = True

    def __init__(self, model: ResctrlModel,
                 on_ready: Optional[Callable[[], None]] = None,
                 faults: Optional[Faults] = None) -> None:
        self.model = model
        self.faults = faults or Faults(diverge=model.diverge)
        self._on_ready = on_ready
        self._handles: dict[int, _Handle] = {}
        self._next_fh = 1
        self._lock = threading.Lock()

    # -- plumbing ----------------------------------------------------------------
    @staticmethod
    def _caller() -> Caller:
        uid, gid, pid = mfusepy.fuse_get_context()
        return Caller(uid=uid, gid=gid, pid=pid)

    def _fault(self, op: str, path: str) -> None:
        """Fail with an injected errno (see faults.py), before the model;
        or signal the caller (a killed one gets EIO, which it never reads).
        """
        err = self.faults.check(op, path)
        self.model.diverge = self.faults.diverge
        if err is not None and err < 0:
            pid = self._caller().pid
            if pid > 1 and pid != os.getpid():
                try:
                    os.kill(pid, -err)
                except OSError:
                    pass
            err = errno.EIO if err == KILL else None
        if err is not None:
            raise oserror(err)

    def _handle(self, fi: Any) -> _Handle:
        handle = self._handles.get(fi.fh)
        if handle is None:
            raise oserror(errno.EBADF)
        if not handle.node.alive and 'removed-group-files' not in self.model.diverge:
            raise oserror(errno.ENODEV)
        return handle

    def init(self, path: str) -> None:
        LOG.info('resctrl emulator mounted (%s)', self.model.profile.name)
        if self._on_ready is not None:
            self._on_ready()

    # -- attributes and directories -----------------------------------------------
    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        with self._lock:
            self._fault('getattr', path)
            node = self.model.lookup(path)
            uid, gid = self.model.owner(node)
            when = int(self.model.ctime(node) * 1e9)
            nlink = 1
            if node.is_dir:
                mode = stat.S_IFDIR | node.perm
                nlink = 2
            else:
                mode = stat.S_IFREG | node.perm
        return {'st_mode': mode, 'st_nlink': nlink, 'st_uid': uid, 'st_gid': gid,
                'st_size': 0, 'st_blksize': 4096, 'st_atime': when, 'st_mtime': when,
                'st_ctime': when}

    def readdir(self, path: Optional[str], fh: Any) -> list[tuple[str, dict[str, int], int]]:
        """The entries with their types, as kernfs gives them (``d_type``:
        ``scandir`` callers need no stat per entry).  A directory removed
        since it was opened (libfuse then has no path for it) lists
        nothing, as kernfs lists no entry of a removed node.
        """
        out = [('.', {'st_mode': stat.S_IFDIR}, 0),
               ('..', {'st_mode': stat.S_IFDIR}, 0)]
        if path is None:
            return out
        with self._lock:
            self._fault('readdir', path)
            node = self.model.lookup(path)
            if not node.is_dir:
                raise oserror(errno.ENOTDIR)
            base = path.rstrip('/')
            for name in self.model.entries(node):
                child = self.model.lookup(base + '/' + name)
                out.append((name, {'st_mode': stat.S_IFDIR if child.is_dir
                                   else stat.S_IFREG}, 0))
            return out

    def mkdir(self, path: str, mode: int) -> int:
        with self._lock:
            self._fault('mkdir', path)
            self.model.mkdir(path, mode & 0o7777, self._caller())
        return 0

    def rmdir(self, path: str) -> int:
        with self._lock:
            self._fault('rmdir', path)
            self.model.rmdir(path)
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._lock:
            self.model.rename(old, new)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        return {'f_bsize': 4096, 'f_frsize': 4096, 'f_namemax': 255}

    # -- what kernfs refuses ----------------------------------------------------
    def create(self, path: str, mode: int, fi: Any = None) -> int:
        raise oserror(errno.EACCES)        # no ->create: may_o_create() says EACCES

    def mknod(self, path: str, mode: int, dev: int) -> int:
        raise oserror(errno.EPERM)

    def unlink(self, path: str) -> int:
        with self._lock:
            self.model.lookup(path)
        raise oserror(errno.EPERM)         # no ->unlink in kernfs_dir_iops

    def symlink(self, target: str, source: str) -> int:
        raise oserror(errno.EPERM)

    def link(self, target: str, source: str) -> int:
        raise oserror(errno.EPERM)

    # -- files ------------------------------------------------------------------
    def open(self, path: str, fi: Any) -> int:
        with self._lock:
            self._fault('open', path)
            node = self.model.lookup(path)
            writing = (fi.flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR)
            if writing and node.write is None:
                raise oserror(errno.EACCES)    # kernfs_fop_open(): no write op
            fh = self._next_fh
            self._next_fh += 1
            self._handles[fh] = _Handle(node)
        fi.fh = fh
        fi.direct_io = 1
        return 0

    def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
        with self._lock:
            self._fault('read', path)
            handle = self._handle(fi)
            if offset == 0 or handle.content is None:
                show = handle.node.show
                handle.content = show().encode('latin-1') if show else b''
            return handle.content[offset:offset + size]

    def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
        with self._lock:
            self._fault('write', path)
            handle = self._handle(fi)
            node = handle.node
            self.model.check_write(node, data)
            if node.write is None:
                raise oserror(errno.EINVAL)
            handle.writes += 1
            if handle.writes > 1 and node.name == 'tasks' and \
                    'tasks-one-write' in self.model.diverge:
                return len(data)
            node.write(data, self._caller())
        return len(data)

    def truncate(self, path: str, length: int, fh: Any = None) -> int:
        with self._lock:
            self.model.lookup(path)         # kernfs ignores ATTR_SIZE
        return 0

    def utimens(self, path: str, times: Any = None) -> int:
        with self._lock:
            self.model.lookup(path)
        return 0

    # No flush: kernfs files have no ->flush, and without one FUSE stops
    # sending FLUSH at every close (the first one answers ENOSYS).

    def release(self, path: str, fi: Any) -> int:
        with self._lock:
            self._handles.pop(fi.fh, None)
        return 0


def mount(model: ResctrlModel, mountpoint: str, on_ready: Optional[Callable[[], None]] = None,
          debug: bool = False, faults: Optional[Faults] = None) -> None:
    """Serve ``model`` on ``mountpoint`` until it is unmounted (or SIGTERM)."""
    options: dict[str, Any] = {
        'foreground': True, 'nothreads': True, 'fsname': 'resctrl',
        'subtype': 'resctrl', 'default_permissions': True, 'debug': debug,
    }
    if os.geteuid() == 0:
        options['allow_other'] = True
    mfusepy.FUSE(ResctrlFS(model, on_ready, faults), mountpoint, raw_fi=True, **options)
