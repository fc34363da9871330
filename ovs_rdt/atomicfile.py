"""Replacing a file whole: readers see the old text or the new, never half.

The one way ovs-rdt replaces a file another process reads (the provider
config nova-compute reads, the libvirt hook wrapper libvirtd runs, the
policy's state, the sandbox's hook configuration, the emulator's
footprints and faults): a temporary file in the same directory, written
and flushed to disk (``fsync``), given its mode, then renamed over
the target (``rename(2)`` is atomic within a file system) and the directory
flushed so the rename survives a crash.  The temporary file never stays
behind, whatever stops the write.
"""
from __future__ import annotations

import os
import tempfile


def write(path: str, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically; OSError if it
    cannot.
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory,
                               prefix='.' + os.path.basename(path) + '.')
    try:
        with os.fdopen(fd, 'wb') as fh:
            fh.write(text.encode('utf-8'))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
