"""One look at every resctrl group for monitoring, under one shared lock.

``ovs-rdt top``, ``ovs-rdt profile`` and the agent's metrics endpoint read
the same things: each control group's masks, tasks and ``mon_data``
values.  :func:`sample` reads them all under one ``LOCK_SH`` on the resctrl
root and nothing else (naming members from ``/proc`` happens after the lock
is released), so a VM start waiting for ``LOCK_EX`` waits for file reads
only.

A ``mon_data`` file that reads ``Unavailable`` or ``Error`` (the kernel's
texts when an RMID cannot be read) is left out of ``mon``, never taken as
zero (see :meth:`~ovs_rdt.resctrl.Resctrl.read_mon`).
"""
from __future__ import annotations

import os
from typing import Iterable, NamedTuple

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import label_of
from ovs_rdt.resctrl.files import GONE
from ovs_rdt.resctrl import Resctrl


class GroupSample(NamedTuple):
    name: str
    """The resctrl group name (``''`` for the root)."""
    ident: int
    """The group directory's inode number: a re-created group has a new one."""
    l3: dict[int, CBM]
    tasks: list[int]
    mon: dict[int, dict[str, int]]
    """``{domain: {event: value}}`` of the readable ``mon_data`` files."""

    @property
    def label(self) -> str:
        return label_of(self.name)


def sample(resctrl: Resctrl, names: Iterable[str] | None = None,
           masks: bool = True) -> list[GroupSample]:
    """Every control group (or those in ``names``), the root first.

    ``masks=False`` skips the schemata, mode and CPU reads (``l3`` empty).
    Groups removed while they are read are left out.
    """
    wanted = None if names is None else set(names)
    out = []
    with resctrl.lock(exclusive=False):
        for name in resctrl.group_names():
            if wanted is not None and name not in wanted:
                continue
            try:
                ident = os.stat(resctrl.path(name)).st_ino
                if masks:
                    grp = resctrl.group(name, with_tasks=True)
                    l3, tasks = grp.l3, grp.tasks
                else:
                    l3, tasks = {}, resctrl.tasks(name)
                mon = resctrl.read_mon(name)
            except OSError as exc:
                if exc.errno in GONE:
                    continue      # removed while we listed
                raise
            out.append(GroupSample(name, ident, l3, tasks, mon))
    return out
