"""Assignable MBM counters (``mbm_event`` mode, AMD ABMC), from ``fs/resctrl/monitor.c``.

Each monitoring domain has ``num_mbm_cntrs`` counters.  In ``mbm_event``
mode an MBM event of a group counts only while a counter is assigned to it
(``mbm_L3_assignments``, ``e`` assigned, ``_`` not); reading it otherwise
gives ``Unassigned``.  A new group gets counters for ``mbm_total_bytes`` and
then ``mbm_local_bytes`` in every domain while ``mbm_assign_on_mkdir`` is 1
and counters are left (running out is not an error).  A counter starts from
zero when assigned.  ``info/L3_MON/mbm_assign_mode`` (every 6.18+ kernel)
switches modes; switching frees every counter.
"""
from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Callable, Optional

from ovs_rdt.emulator.context import Model, oserror
from ovs_rdt.emulator.groups import Group
from ovs_rdt.emulator.kparse import ParseError, cstr, kstrtobool, kstrtoull, strim
from ovs_rdt.emulator.monitor import MBM_EVENTS

if TYPE_CHECKING:
    from ovs_rdt.emulator.model import Caller

NOT_ENABLED = 'mbm_event counter assignment mode is not enabled\n'
TRANSACTIONS = ('local_reads', 'remote_reads', 'local_non_temporal_writes',
                'remote_non_temporal_writes', 'local_reads_slow_memory',
                'remote_reads_slow_memory', 'dirty_victim_writes_all')
LOCAL_TRANSACTIONS = ('local_reads', 'local_non_temporal_writes', 'local_reads_slow_memory')

Slot = Optional[tuple[Group, str, float]]        # (group, event, count at assignment)


class Counters:
    def __init__(self, model: 'Model') -> None:
        self.model = model
        prof = model.profile
        self.assignable = prof.mbm_cntrs > 0
        self.enabled = self.assignable          # ABMC hardware boots in mbm_event mode
        self.on_mkdir = True
        self.slots: dict[int, list[Slot]] = {
            d: [None] * prof.mbm_cntrs for d in prof.domains}

    # -- assignment -------------------------------------------------------------
    def _find(self, grp: Group, dom: int, event: str) -> int:
        for i, slot in enumerate(self.slots[dom]):
            if slot is not None and slot[0] is grp and slot[1] == event:
                return i
        return -1

    def _assign(self, grp: Group, dom: int, event: str) -> None:
        """``rdtgroup_alloc_assign_cntr()``."""
        if self._find(grp, dom, event) >= 0:
            return
        slots = self.slots[dom]
        if None not in slots:
            raise self.model.status.fail(
                errno.ENOSPC, 'Failed to allocate counter for %s in domain %d\n'
                % (event, dom))
        self.model.mon.advance()
        slots[slots.index(None)] = (grp, event, self.model.mon.raw(grp.rmid, dom, event))

    def _unassign(self, grp: Group, dom: int, event: str) -> None:
        index = self._find(grp, dom, event)
        if index >= 0:
            # counter-kept: the counter stays taken, by no group
            self.slots[dom][index] = (self.model.root, '', 0.0) \
                if 'counter-kept' in self.model.diverge else None

    def _assign_all(self, grp: Group, event: str) -> None:
        """``rdtgroup_assign_cntr_event(NULL, ...)``: try every domain, keep the last error."""
        error: Optional[OSError] = None
        for dom in self.model.profile.domains:
            try:
                self._assign(grp, dom, event)
            except OSError as exc:
                error = exc
        if error is not None:
            raise error

    def assign_on_mkdir(self, grp: Group) -> None:
        """``rdtgroup_assign_cntrs()``: failures only leave messages."""
        if not (self.enabled and self.on_mkdir):
            return
        for event in MBM_EVENTS:
            try:
                self._assign_all(grp, event)
            except OSError:
                pass

    def unassign_all(self, grp: Group) -> None:
        for slots in self.slots.values():
            for i, slot in enumerate(slots):
                if slot is not None and slot[0] is grp:
                    slots[i] = None

    def read(self, members: list[Group], dom: int, event: str) -> Optional[int]:
        """Bytes counted by the members' assigned counters; None: none assigned."""
        total, seen = 0.0, False
        for grp in members:
            index = self._find(grp, dom, event)
            if index >= 0:
                slot = self.slots[dom][index]
                assert slot is not None
                total += max(self.model.mon.raw(grp.rmid, dom, event) - slot[2], 0.0)
                seen = True
        if not seen:
            return None
        scale = self.model.profile.hw_mon_scale
        return int(total) // scale * scale

    # -- info/L3_MON -------------------------------------------------------------
    def info_files(self) -> dict[str, Callable[[], str]]:
        files: dict[str, Callable[[], str]] = {}
        if self.model.profile.version() >= (6, 18):
            files['mbm_assign_mode'] = self.mode_show
        if self.assignable:
            files.update({'num_mbm_cntrs': self.num_show,
                          'available_mbm_cntrs': self.available_show,
                          'mbm_assign_on_mkdir': self.on_mkdir_show})
        return files

    def info_writers(self) -> dict[str, Callable[[bytes, 'Caller'], None]]:
        writers: dict[str, Callable[[bytes, 'Caller'], None]] = {}
        if self.model.profile.version() >= (6, 18):
            writers['mbm_assign_mode'] = lambda data, _c: self.mode_write(data)
        if self.assignable:
            writers['mbm_assign_on_mkdir'] = lambda data, _c: self.on_mkdir_write(data)
        return writers

    def info_dirs(self) -> list[str]:
        return ['event_configs'] if self.assignable else []

    @staticmethod
    def info_dir_entries(resource: str) -> list[str]:
        if resource == 'event_configs':
            return sorted(MBM_EVENTS)
        return ['event_filter']

    def mode_show(self) -> str:
        if not self.assignable:
            return '[default]\n'
        return '[mbm_event]\ndefault\n' if self.enabled else '[default]\nmbm_event\n'

    def mode_write(self, data: bytes) -> None:
        model = self.model
        model.status.clear()
        if not data or data[-1:] != b'\n':
            raise model.status.fail(errno.EINVAL, 'mbm_assign_mode: Invalid input\n')
        buf = cstr(data[:-1].decode('latin-1'))
        if buf == 'default':
            enable = False
        elif buf == 'mbm_event':
            if not self.assignable:
                raise model.status.fail(errno.EINVAL, 'mbm_event mode is not supported\n')
            enable = True
        else:
            raise model.status.fail(errno.EINVAL, 'Unsupported assign mode\n')
        if enable != self.enabled:
            model.mon.advance()
            self.enabled = enable
            if enable:
                self.on_mkdir = True
            for slots in self.slots.values():
                slots[:] = [None] * len(slots)

    def _doms(self, fmt: Callable[[int], int]) -> str:
        return ';'.join('%d=%d' % (d, fmt(d)) for d in self.model.profile.domains) + '\n'

    def num_show(self) -> str:
        return self._doms(lambda _d: self.model.profile.mbm_cntrs)

    def _check_enabled(self) -> None:
        self.model.status.clear()
        if not self.enabled:
            raise self.model.status.fail(errno.EINVAL, NOT_ENABLED)

    def available_show(self) -> str:
        self._check_enabled()
        return self._doms(lambda d: self.slots[d].count(None))

    def on_mkdir_show(self) -> str:
        self._check_enabled()
        return '%u\n' % int(self.on_mkdir)

    def on_mkdir_write(self, data: bytes) -> None:
        model = self.model
        model.status.clear()
        try:
            value = kstrtobool(cstr(data.decode('latin-1')))
        except ParseError as exc:
            model.status.puts('mbm_assign_on_mkdir: Invalid input\n')
            raise oserror(exc.errno) from None
        if not self.enabled:
            raise model.status.fail(errno.EINVAL, NOT_ENABLED)
        self.on_mkdir = value

    def event_filter_show(self, event: str) -> str:
        self._check_enabled()
        names = TRANSACTIONS if event == 'mbm_total_bytes' else LOCAL_TRANSACTIONS
        return ','.join(names) + '\n'

    # -- mbm_L3_assignments ---------------------------------------------------------
    def assignments_show(self, grp: Group) -> str:
        self._check_enabled()
        lines = []
        for event in MBM_EVENTS:
            lines.append('%s:%s' % (event, ';'.join(
                '%d=%s' % (d, 'e' if self._find(grp, d, event) >= 0 else '_')
                for d in self.model.profile.domains)))
        return '\n'.join(lines) + '\n'

    def assignments_write(self, grp: Group, data: bytes) -> None:
        """``mbm_L3_assignments_write()``: applied as parsed, stops at the first error."""
        model = self.model
        model.status.clear()
        if not data or data[-1:] != b'\n':
            raise model.status.fail(errno.EINVAL, 'mbm_L3_assignments: Invalid input\n')
        if not self.enabled:
            raise model.status.fail(errno.EINVAL, 'mbm_event mode is not enabled\n')
        for token in data[:-1].decode('latin-1').split('\n'):
            event, colon, rest = token.partition(':')
            self._parse_assignment(grp, event, rest if colon else None)

    def _parse_assignment(self, grp: Group, event: str, tok: Optional[str]) -> None:
        model = self.model
        if event not in MBM_EVENTS:
            raise model.status.fail(errno.ENOENT, 'Invalid event %s\n' % event)
        while tok:
            dom_str, semi, rest = tok.partition(';')
            tok = rest if semi else None
            id_str, equal, state = strim(dom_str).partition('=')
            value: Optional[str] = state if equal else None
            if id_str.startswith('*'):
                try:
                    self._modify(grp, None, event, value)
                except OSError:
                    model.status.puts("Assign operation '%s:*=%s' failed\n" % (event, _s(value)))
                    raise
                return
            try:
                dom = kstrtoull(id_str, 10)
            except ParseError:
                raise model.status.fail(errno.EINVAL, 'Missing domain id\n') from None
            if dom not in model.profile.domains and 'assign-any-domain' in model.diverge:
                continue
            if dom not in model.profile.domains:
                raise model.status.fail(errno.EINVAL, 'Invalid domain id %d\n' % dom)
            try:
                self._modify(grp, dom, event, value)
            except OSError:
                model.status.puts("Assign operation '%s:%d=%s' failed\n" % (event, dom, _s(value)))
                raise

    def _modify(self, grp: Group, dom: Optional[int], event: str,
                state: Optional[str]) -> None:
        """``rdtgroup_modify_assign_state()``."""
        if state is None or len(state) != 1 or state not in 'e_':
            raise oserror(errno.EINVAL)
        doms = self.model.profile.domains if dom is None else [dom]
        if state == 'e':
            if dom is None:
                self._assign_all(grp, event)
            else:
                self._assign(grp, dom, event)
        else:
            for one in doms:
                self._unassign(grp, one, event)


def _s(value: Optional[str]) -> str:
    """printf("%s", NULL) in the kernel prints "(null)"."""
    return '(null)' if value is None else value
