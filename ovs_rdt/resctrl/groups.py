"""Reading control groups: their names, masks, modes, tasks and CPUs.

Any group, whatever tool made it and whatever its name.
"""
from __future__ import annotations

import os

from ovs_rdt.core.model import MODE_SHAREABLE, ROOT, UNIT_MBPS, Group
from ovs_rdt.resctrl.platform import PlatformReader
from ovs_rdt.resctrl.text import parse_resources, parse_schemata


class Groups(PlatformReader):
    """The groups below the root, read (with the lock shared, unless held)."""

    def group_names(self) -> list[str]:
        # scandir: the directory entries' types come with the listing
        # (kernfs and FUSE fill d_type), no stat per entry.
        with os.scandir(self.root) as entries:
            found = [entry.name for entry in entries
                     if entry.name not in ('info', 'mon_groups', 'mon_data')
                     and entry.is_dir(follow_symlinks=False)]
        return [ROOT] + sorted(found)

    def group(self, name: str, with_tasks: bool = True) -> Group:
        """A group; its members (tasks, CPUs) only ``with_tasks``.

        (Planning needs masks and modes only: the libvirt hook plans at
        every VM start.)
        """
        width = self.platform().cbm_len
        text = self.read(self.path(name, 'schemata'))
        l3, mb = parse_schemata(text, width)
        split = parse_resources(text, width)
        code, data = split.get('L3CODE'), split.get('L3DATA')
        try:
            mode = self.read(self.path(name, 'mode')).strip()
        except FileNotFoundError:
            mode = MODE_SHAREABLE
        event = self._mb_event(name)
        if not with_tasks:
            return Group(name, l3, mb, mode, l3code=code, l3data=data,
                         mb_event=event)
        from ovs_rdt.inputs import cpulists
        try:
            cpus = cpulists.parse(self.read(self.path(name, 'cpus_list')),
                                  self.path(name, 'cpus_list'))
        except FileNotFoundError:
            cpus = frozenset()
        return Group(name, l3, mb, mode, self.tasks(name), cpus, code, data,
                     event)

    def _mb_event(self, name: str) -> str | None:
        """The group's ``mba_MBps_event``: only mba_MBps mounts have one
        (Linux 6.14 and later; earlier kernels follow mbm_local_bytes).
        """
        mba = self.platform().mb
        if mba is None or mba.unit != UNIT_MBPS:
            return None
        try:
            return self.read(self.path(name, 'mba_MBps_event')).strip() or None
        except FileNotFoundError:
            return None

    def groups(self, with_tasks: bool = False) -> list[Group]:
        """Every control group, the root first."""
        with self.lock(exclusive=self._lock_exclusive and self._lock_depth > 0):
            out = []
            for name in self.group_names():
                try:
                    out.append(self.group(name, with_tasks))
                except FileNotFoundError:
                    continue  # removed while we listed
            return out

    def tasks(self, name: str) -> list[int]:
        text = self.read(self.path(name, 'tasks'))
        return [int(t) for t in text.split()]
