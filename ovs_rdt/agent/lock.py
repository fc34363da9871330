"""One agent per resctrl root: ``/run/ovs-rdt/agent-<hash of the root>.lock``.

The file holds the agent's pid and an ``flock``; the agent removes it when
it exits cleanly (a ``kill -9`` leaves it, empty of meaning: the next
agent takes the lock over).  Removing a lock file races with an agent that
opened it just before: so whoever gets the ``flock`` then checks that the
path still names the file it locked, and starts again if not.
"""
from __future__ import annotations

import fcntl
import os

from ovs_rdt.exceptions import ConfigError
from ovs_rdt.runfiles import RUN_DIR, ensure_dir, root_only, run_path


class AgentLock:
    """The node's agent lock for one resctrl root."""

    def __init__(self, root: str, lock_dir: str = RUN_DIR) -> None:
        self.path = run_path(root, 'agent-{tag}.lock', lock_dir)
        self.fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock; False when another agent holds it."""
        ensure_dir(os.path.dirname(self.path))
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
                             | os.O_NOFOLLOW, 0o644)
            except OSError as exc:
                raise ConfigError('%s: %s (a symlink put there? remove it)'
                                  % (self.path, exc.strerror)) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)        # removed by the agent that just exited
        os.ftruncate(fd, 0)
        os.write(fd, b'%d\n' % os.getpid())
        self.fd = fd
        return True

    def release(self) -> None:
        """Remove the file, then let go (in that order: see the module)."""
        if self.fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self.fd)
        self.fd = None

    def running(self) -> str | None:
        """The pid of the agent holding the lock now, or None.

        ``?`` when the holder wrote no pid; ConfigError when this user
        cannot tell.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except PermissionError:
            raise ConfigError(root_only(self.path)) from None
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return self.holder()
        finally:
            os.close(fd)
        return None

    def holder(self) -> str:
        """The pid written by the agent holding the lock, or ``?``."""
        try:
            with open(self.path) as fh:
                return fh.read().strip() or '?'
        except OSError:
            return '?'
