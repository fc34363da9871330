"""Writes to the groups ovs-rdt owns, and to no other group.

Only ``ovsrdt-`` names are created, written or removed (and the default
group's schemata and tasks written), never through a symlink.  Callers
hold ``lock(exclusive=True)``.
"""
from __future__ import annotations

import errno
import os

from ovs_rdt.core.model import ROOT
from ovs_rdt import GROUP_PREFIX
from ovs_rdt.exceptions import NotOwnedError, ResctrlError
from ovs_rdt.resctrl.files import Files

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Iterable

_NAME_CHARS = frozenset('abcdefghijklmnopqrstuvwxyz'
                        'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:')


def check_group_name(name: str) -> None:
    """A name ovs-rdt gives a group it makes or writes (never a check on
    what it reads: the kernel takes any name without a newline).
    """
    if name == ROOT:
        return
    if (name in ('.', '..', 'info', 'mon_groups', 'mon_data')
            or not set(name) <= _NAME_CHARS or len(name) > 200):
        raise NotOwnedError('%r is not a valid resctrl group name' % name)


class OwnedWrites(Files):
    """mkdir, rmdir and the writes, each refused for a group not ours."""

    def _owned(self, name: str, what: str) -> None:
        check_group_name(name)
        if not name.startswith(GROUP_PREFIX):
            raise NotOwnedError('refusing to %s resctrl group %r: ovs-rdt only '
                                'touches groups named %s*'
                                % (what, name or '/', GROUP_PREFIX))
        if os.path.islink(self.path(name)):
            raise NotOwnedError('refusing to %s %s: it is a symlink'
                                % (what, self.path(name)))

    def mkdir(self, name: str) -> None:
        self._owned(name, 'create')
        try:
            os.mkdir(self.path(name))
        except FileExistsError:
            return
        except OSError as exc:
            status = self.last_cmd_status()
            raise ResctrlError(self.path(name), 'mkdir', exc.errno,
                               None if status == 'ok' else status,
                               os.strerror(exc.errno or 0)) from None

    def rmdir(self, name: str) -> None:
        self._owned(name, 'remove')
        try:
            os.rmdir(self.path(name))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ResctrlError(self.path(name), 'rmdir', exc.errno, None,
                               os.strerror(exc.errno or 0)) from None

    def write_schemata(self, name: str, text: str) -> None:
        if name != ROOT:
            self._owned(name, 'write the schemata of')
        self.write(self.path(name, 'schemata'), text)

    def write_mode(self, name: str, mode: str) -> None:
        self._owned(name, 'set the mode of')
        self.write(self.path(name, 'mode'), mode + '\n')

    def write_mb_event(self, name: str, event: str) -> None:
        """The MBM event the software controller follows for ``name``."""
        self._owned(name, 'set the mba_MBps_event of')
        self.write(self.path(name, 'mba_MBps_event'), event + '\n')

    def assign_counter(self, name: str, event: str, domain: int) -> None:
        """Give ``name`` a counter for ``event`` on ``domain``; the
        kernel's reason (no counter free) comes from last_cmd_status.
        """
        self._owned(name, 'assign a counter to')
        self.write(self.path(name, 'mbm_L3_assignments'),
                   '%s:%d=e\n' % (event, domain))

    def add_tasks(self, name: str, tids: Iterable[int]) -> list[int]:
        """Move TIDs into ``name`` one per write, all on one open of the
        file; returns those that exited.
        """
        if name != ROOT:
            self._owned(name, 'move tasks into')
        path = self.path(name, 'tasks')
        gone: list[int] = []
        fd = None
        try:
            for tid in tids:
                value = '%d\n' % tid
                if fd is None:
                    fd = self._open_write(path, value)
                try:
                    self._write_fd(fd, path, value)
                except ResctrlError as exc:
                    if exc.errno == errno.ESRCH:
                        gone.append(tid)
                        continue
                    raise
        finally:
            if fd is not None:
                os.close(fd)
        return gone
