"""What the model's parts (``io_alloc``, ``counters``) may use of it.

The kernel's ``last_cmd_status`` buffer (:class:`LastCmd`: what a command
says, and the errno it fails with) and :class:`Model`, the few members of
:class:`ovs_rdt.emulator.model.ResctrlModel` the parts call: the parts sit
below the model and see no more of it than this.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional, Protocol

if TYPE_CHECKING:
    from ovs_rdt.emulator.groups import Group
    from ovs_rdt.emulator.monitor import Monitor
    from ovs_rdt.emulator.profiles import Profile
    from ovs_rdt.emulator.schemas import Mount, Schema

LAST_CMD_SIZE = 512          # last_cmd_status_buf[512]


def oserror(err: int) -> OSError:
    return OSError(err, os.strerror(err))


class LastCmd:
    """``info/last_cmd_status``: the 512-byte ``seq_buf`` of the last command."""

    __slots__ = ('text',)

    def __init__(self) -> None:
        self.text = ''

    def clear(self) -> None:
        """``rdt_last_cmd_clear()``: a command starts."""
        self.text = ''

    def puts(self, text: str) -> None:
        """``rdt_last_cmd_puts()``."""
        self.text = (self.text + text)[:LAST_CMD_SIZE - 1]

    def fail(self, err: int, text: Optional[str] = None) -> OSError:
        """The error to raise, ``text`` said first."""
        if text is not None:
            self.puts(text)
        return oserror(err)


class Model(Protocol):
    """The model as its parts see it."""

    profile: 'Profile'
    mount: 'Mount'
    diverge: frozenset[str]
    mon: 'Monitor'
    root: 'Group'
    status: LastCmd
    closid_used: list[bool]

    @property
    def closids_supported(self) -> int:
        raise NotImplementedError

    def ctrl_groups(self) -> list['Group']:
        raise NotImplementedError

    def apply(self, closid: int, staged: dict[tuple[str, int], int]) -> None:
        raise NotImplementedError

    def show_doms(self, schema: 'Schema', closid: int) -> str:
        raise NotImplementedError

    def parse_line(self, line: str, res: str, grp: 'Group',
                   staged: dict[tuple[str, int], int],
                   closid: Optional[int] = None,
                   mode: Optional[str] = None) -> None:
        raise NotImplementedError

    def init_one_domain(self, dom: int, closid: int, schema: 'Schema') -> int:
        raise NotImplementedError
