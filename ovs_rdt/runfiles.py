"""Where ovs-rdt keeps its run-time files: ``/run/ovs-rdt`` (tmpfs: gone
at boot), one set per resctrl root (the agent's lock, the policy's state).
Made mode 0700 and checked before use (:func:`ensure_dir`).
"""
from __future__ import annotations

import hashlib
import json
import os
import stat

from ovs_rdt.exceptions import ConfigError
from ovs_rdt import procfs

#: Where the agent keeps its files.
RUN_DIR = '/run/ovs-rdt'


def run_path(root: str, name: str, run_dir: str = RUN_DIR) -> str:
    """``<run_dir>/<name>`` with ``{tag}`` the hash of the resctrl root."""
    tag = hashlib.sha1(os.path.realpath(root).encode()).hexdigest()[:12]
    return os.path.join(run_dir, name.format(tag=tag))


def root_only(path: str) -> str:
    """Why a reader who is not root cannot see ``path``."""
    return ('cannot read %s: %s is for root only (mode 0700): run this as '
            'root' % (path, os.path.dirname(path)))


def ensure_dir(run_dir: str = RUN_DIR) -> str:
    """Make ``run_dir`` (mode 0700) if missing and check it before use: a
    real directory (no symlink) owned by this user that no one else may
    write to.  One left 0755 by an earlier release is made 0700; one that
    others could write to is refused (whatever they put there, a symlink
    to a file of root's, would be used).  Returns ``run_dir``; raises
    :class:`~ovs_rdt.exceptions.ConfigError` naming the path and what is
    wrong.
    """
    try:
        os.makedirs(run_dir, mode=0o700, exist_ok=True)
    except FileExistsError:
        pass                        # (not a directory: said below)
    except OSError as exc:
        raise ConfigError('%s: cannot make it: %s' % (run_dir, exc.strerror)
                          ) from None
    try:
        # Looked at and changed through one descriptor of the directory
        # itself (O_NOFOLLOW): never the target of a link put there.
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                     | os.O_CLOEXEC)
    except OSError:
        raise ConfigError('%s is not a directory (a symbolic link or a file '
                          'put there by someone else?): remove it'
                          % run_dir) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise ConfigError('%s is owned by uid %d, not by this user (uid '
                              '%d): remove it' % (run_dir, st.st_uid,
                                                  os.geteuid()))
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ConfigError('%s is writable by others (mode %04o): what '
                              'they may have put there would be used; remove '
                              'it (ovs-rdt makes it again, mode 0700)'
                              % (run_dir, stat.S_IMODE(st.st_mode)))
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return run_dir


def read_live(path: str, error: type[Exception], proc: str | None = None
              ) -> dict | None:
    """The JSON object an agent publishes at ``path`` (its state, the
    policy's), if the process that wrote it (its ``pid``) still runs; None
    when there is none, it is being replaced, or its writer is gone.
    ``error`` (naming the path) when this user may not read it.
    """
    try:
        with open(path, encoding='utf-8') as fh:
            data = json.load(fh)
    except PermissionError:
        raise error(root_only(path)) from None
    except (OSError, ValueError):
        return None     # none, or being replaced by a dead agent's
    pid = data.get('pid') if isinstance(data, dict) else None
    if not isinstance(pid, int) or not procfs.alive(pid, proc or procfs.PROC):
        return None
    return data
