"""The pure kernel model behind the resctrl emulator (no FUSE here).

It follows Linux's ``fs/resctrl`` (6.15+; ``rdtgroup.c``, ``ctrlmondata.c``,
``monitor.c``) and ``lib/bitmap-str.c``/``lib/kstrtox.c`` line by line for
what a user can observe: file names and modes, file contents, the order of
validation, every ``info/last_cmd_status`` text and every errno.

Tasks are the host's real threads (``/proc``): a TID can be written to a
``tasks`` file when it exists on the host, exited ones drop out lazily, and a
thread that was never moved inherits the group its creator (thread-group
leader, or parent process) was in when it was born, like ``fork``/``clone``.

Monitoring model (documented in ``doc/emulator.md``):

* every task has a cache footprint in bytes: the entry for its TID /
  ``comm:<name>`` in the ``--footprints`` JSON file (re-read when its mtime
  changes), else its ``default`` or ``--default-footprint``, else 2 MiB or,
  outside the default group and while it runs, its process's resident
  memory if more (:class:`~ovs_rdt.emulator.monitor.Footprints`).  An
  integer is spread evenly over all L3 domains (tasks have no CPU here); an
  object
  ``{"<domain>": bytes}`` places it explicitly;
* per domain, a CLOSID's demand is the sum of its tasks' footprints, spread
  evenly over the ways of its CBM; each way (``l3_size / cbm_len`` bytes) is
  shared by the CLOSIDs using it in proportion to their per-way demand, never
  more than they ask.  ``llc_occupancy`` is the resulting bytes (a monitor
  group gets its share of its CLOSID by demand), rounded down to the
  ``mon_scale`` (64 bytes) the hardware counts in;
* the part of the demand that does not fit misses: memory traffic
  ``= misses x 50 per second``, capped by the group's MB percent of the
  socket's peak bandwidth and by that peak itself.  ``mbm_total_bytes``
  integrates it from group creation (piecewise constant between events; host
  process changes are noticed at most 0.5 s late); ``mbm_local_bytes`` is 80%
  of it on multi-socket profiles and all of it on single-socket ones.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
import errno
import time
from typing import Callable, Optional

from ovs_rdt.emulator.groups import (CTRL, EXCLUSIVE, LOCKSETUP, MON, SHAREABLE,
                                     Group, TaskTable)
from ovs_rdt.emulator.host import Host, ProcHost
from ovs_rdt.emulator.kparse import (ParseError, bitmap_list_string, bitmap_parse,
                                     bitmap_parselist, bitmap_string, cstr, kstrtoint,
                                     kstrtouint, kstrtoull, strim)
from ovs_rdt.emulator.context import LastCmd, oserror
from ovs_rdt.emulator.counters import Counters
from ovs_rdt.emulator.io_alloc import IoAlloc
from ovs_rdt.emulator.monitor import EVENTS, MBM_EVENTS, Footprints, Monitor
from ovs_rdt.emulator.profiles import Profile
from ovs_rdt.emulator.schemas import (MBA_MAX_MBPS, Mount, Schema, build_schemas,
                                      name_width)

ATOMIC_WRITE_LEN = 4096      # kernfs .atomic_write_len = PAGE_SIZE
CTRL_FILES = ('cpus', 'cpus_list', 'mode', 'schemata', 'size', 'tasks')
MON_FILES = ('cpus', 'cpus_list', 'tasks')


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _weight(mask: int) -> int:
    return bin(mask).count('1')


@dataclass(frozen=True)
class Caller:
    """Who is doing a file operation (from the FUSE request)."""

    uid: int = 0
    gid: int = 0
    pid: int = 0


ROOT, INFO, INFO_RES, GROUP_DIR, MON_GROUPS, MON_DATA, MON_DOM, MON_SUB, FILE = (
    'root', 'info', 'info_res', 'group', 'mon_groups', 'mon_data', 'mon_dom', 'mon_sub',
    'file')
INFO_DIR = 'info_dir'            # info/L3_MON/event_configs and below
IO_CLOSID_MODE = 'io_alloc'      # rdtgroup_mode_by_closid(): RDT_NUM_MODES


@dataclass(eq=False)
class Node:
    role: str
    name: str
    group: Optional[Group] = None
    perm: int = 0o444
    show: Optional[Callable[[], str]] = None
    write: Optional[Callable[[bytes, Caller], None]] = None
    resource: str = ''
    domain: int = -1
    sub: int = -1                # SNC node of a mon_sub_L3_YY directory

    @property
    def is_dir(self) -> bool:
        return self.role != FILE

    @property
    def alive(self) -> bool:
        return self.group is None or self.group.alive


# --------------------------------------------------------------------------
# The filesystem state
# --------------------------------------------------------------------------
class ResctrlModel:
    """One mounted resctrl filesystem on an emulated platform."""

    def __init__(self, profile: Profile, host: Optional[Host] = None,
                 footprints: Optional[Footprints] = None,
                 clock: Callable[[], float] = time.monotonic,
                 mount: Mount = Mount(),
                 diverge: frozenset[str] = frozenset()) -> None:
        profile.validate()
        self.profile = profile
        self.mount = mount
        #: Kernel divergences to emulate (``divergences.DIVERGENCES``); the
        #: FUSE layer updates them from the faults file.
        self.diverge = diverge
        self.schema_list = build_schemas(profile, mount)
        self.schema_by_name = {s.name: s for s in self.schema_list}
        self.host: Host = host if host is not None else ProcHost()
        self.footprints = footprints if footprints is not None else Footprints()
        self.clock = clock
        self.mounted_at = time.time()
        doms = profile.domains
        self.ctrl: dict[str, list[dict[int, int]]] = {
            s.name: [{d: self.default_ctrl(s) for d in doms} for _ in range(s.num_closid)]
            for s in self.schema_list}
        self.mbps: list[dict[int, int]] = (
            [{d: MBA_MAX_MBPS for d in doms} for _ in range(profile.mb_num_closids)]
            if mount.mba_sc else [])
        self.root = Group('', CTRL, 0, 0, ctime=self.mounted_at,
                          cpus=set(range(profile.num_cpus)))
        self.groups: dict[str, Group] = {}
        self.closid_used = [False] * min(s.num_closid for s in self.schema_list)
        self.closid_used[0] = True
        self.rmid_free = deque(range(1, profile.mon_num_rmids))
        self.status = LastCmd()
        self.threshold = profile.max_threshold_occupancy()
        self.tasks = TaskTable(self.host, self.root)
        self.mon = Monitor(self)
        self.io = IoAlloc(self)
        self.counters = Counters(self)
        if mount.mba_sc:
            self.root.mba_event = self.mba_default_event
        self.counters.assign_on_mkdir(self.root)
        self.status.clear()                        # rdt_get_tree() clears it

    # -- resources ----------------------------------------------------------
    def default_ctrl(self, schema: Schema) -> int:
        """``resctrl_get_default_ctrl()``: every way, or the maximum bandwidth."""
        return self.profile.cbm_mask if schema.is_cache else self.profile.mb_max

    @property
    def closids_supported(self) -> int:
        return len(self.closid_used)

    @property
    def mba_default_event(self) -> str:
        return 'mbm_local_bytes'          # mba_mbps_default_event: local if enabled

    def cache_schemas(self) -> list[Schema]:
        return [s for s in self.schema_list if s.is_cache]

    def cache_mask(self, closid: int, dom: int) -> int:
        """The ways a CLOSID may fill (CODE | DATA under CDP)."""
        mask = 0
        for schema in self.cache_schemas():
            mask |= self.ctrl[schema.name][closid][dom]
        return mask

    def bw_cap(self, closid: int, dom: int, peak: float) -> float:
        """Bytes/s the MB control lets a CLOSID move on a domain."""
        prof = self.profile
        if not prof.mba:
            return peak
        if self.mount.mba_sc:
            return min(peak, float(self.mbps[closid][dom]) * 1024 * 1024)
        value = self.ctrl['MB'][closid][dom]
        if prof.vendor == 'amd':
            return min(peak, value * 1e9 / 8)       # units of 1/8 GB/s
        return peak * value / 100.0

    # -- helpers -------------------------------------------------------------
    def ctrl_groups(self) -> list[Group]:
        return [self.root] + list(self.groups.values())

    def _modes(self) -> dict[int, str]:
        """closid -> mode of every allocated CLOSID (``rdtgroup_mode_by_closid``).

        The io_alloc CLOSID is allocated but has no group (RDT_NUM_MODES).
        """
        modes = {grp.closid: grp.mode for grp in self.ctrl_groups()}
        if self.io.enabled:
            modes[self.io.closid] = IO_CLOSID_MODE
        return modes

    @property
    def name_width(self) -> int:
        return name_width(self.profile, self.schema_list)

    def ctrl_value(self, schema: Schema, closid: int, dom: int) -> int:
        """What ``schemata`` shows: the MBps target under mba_MBps."""
        if schema.name == 'MB' and self.mount.mba_sc:
            return self.mbps[closid][dom]
        return self.ctrl[schema.name][closid][dom]

    def show_doms(self, schema: Schema, closid: int) -> str:
        fmt = '%d=%x' if schema.is_cache else '%d=%u'
        return ';'.join(fmt % (d, self.ctrl_value(schema, closid, d))
                        for d in self.profile.domains) + '\n'

    # -- schemata --------------------------------------------------------------
    def schemata_show(self, grp: Group) -> str:
        lines = []
        for schema in self.schema_list:
            if grp.closid < schema.num_closid:
                lines.append('%*s:%s' % (self.name_width, schema.name,
                                         self.show_doms(schema, grp.closid)))
        return ''.join(lines)

    def size_show(self, grp: Group) -> str:
        lines = []
        per_bit = self.profile.l3_size // self.profile.cbm_len
        for schema in self.schema_list:
            vals = {}
            for dom in self.profile.domains:
                val = self.ctrl_value(schema, grp.closid, dom)
                if schema.is_cache and 'size-all-ways' in self.diverge:
                    val = self.profile.cbm_mask
                vals[dom] = _weight(val) * per_bit if schema.is_cache else val
            lines.append('%*s:%s\n' % (self.name_width, schema.name,
                                       ';'.join('%d=%u' % (d, vals[d]) for d in sorted(vals))))
        return ''.join(lines)

    def schemata_write(self, grp: Group, data: bytes, _caller: Caller) -> None:
        if not data or data[-1:] != b'\n':
            raise oserror(errno.EINVAL)
        text = cstr(data[:-1].decode('latin-1'))
        self.status.clear()
        staged: dict[tuple[str, int], int] = {}
        for tok in text.split('\n'):
            resname, colon, rest = tok.partition(':')
            resname = strim(resname)
            if not colon:
                raise self.status.fail(errno.EINVAL, "Missing ':'\n")
            if not rest:
                raise self.status.fail(errno.EINVAL, "Missing '%s' value\n" % resname)
            schema = self.schema_by_name.get(resname)
            try:
                if schema is None or grp.closid >= schema.num_closid:
                    raise self.status.fail(errno.EINVAL,
                                           "Unknown or unsupported resource name '%s'\n" % resname)
                self.parse_line(rest, resname, grp, staged)
            except OSError:
                if 'partial-write' in self.diverge:
                    self.apply(grp.closid, staged)
                raise
        self.apply(grp.closid, self._diverging(grp.closid, staged))

    def _diverging(self, closid: int, staged: dict[tuple[str, int], int]
                   ) -> dict[tuple[str, int], int]:
        """What ``schemata-reset`` and ``cdp-together`` make of a write."""
        if 'cdp-together' in self.diverge:
            for (res, dom), val in list(staged.items()):
                peer = self.schema_by_name[res].peer
                if peer:
                    staged[(peer, dom)] = val
        if 'schemata-reset' in self.diverge:
            for schema in self.schema_list:
                if closid < schema.num_closid and not (schema.name == 'MB' and
                                                       self.mount.mba_sc):
                    for dom in self.profile.domains:
                        staged.setdefault((schema.name, dom), self.default_ctrl(schema))
        return staged

    def apply(self, closid: int, staged: dict[tuple[str, int], int]) -> None:
        """``resctrl_arch_update_domains()`` for the staged values."""
        changes = {(res, dom): val for (res, dom), val in staged.items()
                   if self.ctrl[res][closid][dom] != val}
        if changes:
            self.mon.advance()
            for (res, dom), val in changes.items():
                self.ctrl[res][closid][dom] = val
            self.mon.controls_changed()

    def parse_line(self, line: str, res: str, grp: Group,
                   staged: dict[tuple[str, int], int],
                   closid: Optional[int] = None, mode: Optional[str] = None) -> None:
        """``parse_line()``; io_alloc_cbm passes its own CLOSID and mode."""
        closid = grp.closid if closid is None else closid
        mode = grp.mode if mode is None else mode
        schema = self.schema_by_name[res]
        mba_sc = res == 'MB' and self.mount.mba_sc
        while line:
            dom, semi, rest = line.partition(';')
            line = rest if semi else ''
            ident, equal, val = dom.partition('=')
            try:
                if not equal:
                    raise ParseError(errno.EINVAL)
                dom_id = kstrtoull(ident, 10)
            except ParseError:
                raise self.status.fail(errno.EINVAL,
                                       "Missing '=' or non-numeric domain\n") from None
            if dom_id not in self.profile.domains:
                raise oserror(errno.EINVAL)          # no message in parse_line()
            if (res, dom_id) in staged:
                raise self.status.fail(errno.EINVAL, 'Duplicate domain %d\n' % dom_id)
            val = strim(val)
            if schema.is_cache:
                staged[(res, dom_id)] = self._parse_cbm(val, closid, mode, dom_id, schema)
            elif mba_sc:
                # parse_bw() under mba_sc: written at once, never staged, so a
                # repeated domain is not a duplicate and later errors keep it
                self.mbps[closid][dom_id] = self._parse_bw(val)
                self.mon.controls_changed()
            else:
                staged[(res, dom_id)] = self._parse_bw(val)

    def _parse_cbm(self, buf: str, closid: int, mode: str, dom: int, schema: Schema) -> int:
        prof = self.profile
        try:
            val = kstrtoull(buf, 16)
        except ParseError:
            raise self.status.fail(errno.EINVAL,
                                   'Non-hex character in the mask %s\n' % buf) from None
        if (prof.min_cbm_bits > 0 and val == 0) or val > prof.cbm_mask:
            raise self.status.fail(errno.EINVAL, 'Invalid mask\n' if 'status-text' in self.diverge
                                   else 'Mask out of range\n')
        first = (val & -val).bit_length() - 1 if val else prof.cbm_len
        zero = first
        while zero < prof.cbm_len and val >> zero & 1:
            zero += 1
        if val >> zero and (not prof.sparse_masks and 'sparse-masks' not in self.diverge
                            or prof.sparse_masks and 'sparse-refused' in self.diverge):
            raise self.status.fail(errno.EINVAL, 'The mask %x has non-consecutive 1-bits\n' % val)
        if zero - first < prof.min_cbm_bits:
            raise self.status.fail(errno.EINVAL,
                                   'Need at least %d bits in the mask\n' % prof.min_cbm_bits)
        if 'overlap-taken' in self.diverge:
            return val
        if self._cbm_overlaps(val, dom, closid, True, schema):
            raise self.status.fail(errno.EINVAL, 'Overlaps with exclusive group\n')
        if (self._cbm_overlaps(val, dom, closid, False, schema)
                and mode in (EXCLUSIVE, LOCKSETUP)):
            raise self.status.fail(errno.EINVAL, 'Overlaps with other group\n')
        return val

    def _parse_bw(self, buf: str) -> int:
        """``bw_validate()``: no range check under mba_MBps (MiB/s)."""
        prof = self.profile
        if not prof.delay_linear and prof.arch_needs_linear and \
                'nonlinear-mb' not in self.diverge:
            raise self.status.fail(errno.EINVAL, 'No support for non-linear MB domains\n')
        try:
            bw = kstrtouint(buf, 10)
        except ParseError:
            raise self.status.fail(errno.EINVAL, 'Invalid MB value %s\n' % buf) from None
        if self.mount.mba_sc and 'mbps-percent' not in self.diverge:
            return bw
        top = 100 if self.mount.mba_sc else prof.mb_max      # mbps-percent: as percent
        if bw > top and 'mb-range' in self.diverge:
            return top
        if bw < prof.min_bandwidth or bw > top:
            raise self.status.fail(errno.EINVAL, 'MB value %u out of range [%d,%d]\n'
                                   % (bw, prof.min_bandwidth, top))
        gran = prof.bandwidth_gran
        if self.mount.mba_sc or 'mb-granularity' in self.diverge:
            return bw
        return -(-bw // gran) * gran

    def _cbm_overlaps(self, cbm: int, dom: int, closid: int, exclusive: bool,
                      schema: Schema) -> bool:
        """``rdtgroup_cbm_overlaps()``: the schema's own type, then its CDP peer."""
        peer = None if 'cdp-no-peer' in self.diverge else schema.peer
        for name in (schema.name, peer):
            if name and self._cbm_overlaps_type(cbm, dom, closid, exclusive, name):
                return True
        return False

    def _cbm_overlaps_type(self, cbm: int, dom: int, closid: int, exclusive: bool,
                           name: str) -> bool:
        """``__rdtgroup_cbm_overlaps()``."""
        if not exclusive and cbm & self.profile.shareable_bits:
            return True
        for i, mode in self._modes().items():
            if i == closid or mode == LOCKSETUP:
                continue
            if cbm & self.ctrl[name][i][dom]:
                if exclusive:
                    if mode == EXCLUSIVE:
                        return True
                    continue
                return True
        return False

    def bit_usage_show(self, schema: Schema) -> str:
        prof = self.profile
        parts = []
        for dom in prof.domains:
            sw = excl = 0
            hw_shareable = prof.shareable_bits
            for i, mode in self._modes().items():
                if mode == SHAREABLE:
                    sw |= self.ctrl[schema.name][i][dom]
                elif mode == EXCLUSIVE and 'exclusive-unmarked' in self.diverge:
                    sw |= self.ctrl[schema.name][i][dom]
                elif mode == EXCLUSIVE:
                    excl |= self.ctrl[schema.name][i][dom]
                elif mode == IO_CLOSID_MODE and 'io-alloc-unmarked' not in self.diverge:
                    hw_shareable |= self.ctrl[schema.name][i][dom]
            chars = []
            for bit in range(prof.cbm_len - 1, -1, -1):
                hwb = hw_shareable >> bit & 1
                swb, exb = sw >> bit & 1, excl >> bit & 1
                chars.append('X' if hwb and swb else 'H' if hwb else 'S' if swb
                             else 'E' if exb else '0')
            parts.append('%d=%s' % (dom, ''.join(chars)))
        return ';'.join(parts) + '\n'

    # -- mode ------------------------------------------------------------------
    def mode_write(self, grp: Group, data: bytes, _caller: Caller) -> None:
        if not data or data[-1:] != b'\n':
            raise oserror(errno.EINVAL)
        buf = cstr(data[:-1].decode('latin-1'))
        self.status.clear()
        if buf == grp.mode:
            return
        if buf == SHAREABLE:
            grp.mode = SHAREABLE
        elif buf == EXCLUSIVE and 'exclusive-overlap' in self.diverge:
            grp.mode = EXCLUSIVE
        elif buf == EXCLUSIVE:
            for schema in self.cache_schemas():
                for dom in self.profile.domains:
                    if self._cbm_overlaps(self.ctrl[schema.name][grp.closid][dom], dom,
                                          grp.closid, False, schema):
                        raise self.status.fail(errno.EINVAL, 'Schemata overlaps\n')
            grp.mode = EXCLUSIVE
        elif buf == LOCKSETUP:
            if grp is self.root:
                raise self.status.fail(errno.EINVAL, 'Cannot pseudo-lock default group\n')
            raise self.status.fail(errno.EINVAL, 'Pseudo-locking not supported\n')
        else:
            raise self.status.fail(errno.EINVAL, 'Unknown or unsupported mode\n')

    # -- tasks -----------------------------------------------------------------
    def _in_group(self, grp: Group, member: Group) -> bool:
        if grp.kind == MON:
            return member is grp
        return member.closid == grp.closid

    def tasks_show(self, grp: Group) -> str:
        snap = self.tasks.snapshot()
        tids = sorted((tgid, tid) for tid, (tgid, member) in snap.items()
                      if self._in_group(grp, member))
        return ''.join('%d\n' % tid for _tgid, tid in tids)

    def tasks_write(self, grp: Group, data: bytes, caller: Caller) -> None:
        self.status.clear()
        buf: Optional[str] = cstr(data.decode('latin-1'))
        while buf and buf[0] != '\n':
            tok, comma, rest = buf.partition(',')
            buf = rest if comma else None
            pid_str = strim(tok)
            try:
                pid = kstrtoint(pid_str, 0)
            except ParseError:
                raise self.status.fail(errno.EINVAL,
                                       'Task list parsing error pid %s\n' % pid_str) from None
            if pid < 0:
                raise self.status.fail(errno.EINVAL, 'Invalid pid %d\n' % pid)
            try:
                self._move_task(pid, grp, caller)
            except OSError as exc:
                self.status.puts('Error while processing task %d\n' % pid)
                raise exc

    def _move_task(self, pid: int, grp: Group, caller: Caller) -> None:
        tid = pid or caller.pid
        info = self.host.info(tid)
        if info is None:
            raise self.status.fail(errno.EINVAL if 'no-task-errno' in self.diverge
                                   else errno.ESRCH, 'No task %d\n' % pid)
        if caller.uid != 0:
            uids = self.host.uids(tid)
            if uids is None or caller.uid not in (uids[0], uids[2]):
                raise self.status.fail(errno.EPERM, 'No permission to move task %d\n' % tid)
        cur = self.tasks.current(tid, info)
        if cur is grp:
            return
        if grp.kind == MON and cur.closid != grp.closid and \
                'mon-move-across' not in self.diverge:
            raise self.status.fail(errno.EINVAL, "Can't move task to different control group\n")
        if 'tasks-stay' in self.diverge:
            return
        self.mon.advance()
        self.tasks.move(tid, info, grp)
        self.mon.task_moved(tid, cur.rmid, grp.rmid)

    # -- cpus ------------------------------------------------------------------
    def cpus_show(self, grp: Group, as_list: bool) -> str:
        if as_list:
            return bitmap_list_string(grp.cpus) + '\n'
        mask = sum(1 << c for c in grp.cpus)
        return bitmap_string(mask, self.profile.nr_cpu_ids) + '\n'

    def cpus_write(self, grp: Group, data: bytes, as_list: bool) -> None:
        self.status.clear()
        text = data.decode('latin-1')
        nbits = self.profile.nr_cpu_ids
        try:
            mask = bitmap_parselist(text, nbits) if as_list else bitmap_parse(text, nbits)
        except ParseError as exc:
            raise self.status.fail(exc.errno, 'Bad CPU list/mask\n') from None
        new = set(_bits(mask))
        if any(c >= self.profile.num_cpus for c in new):
            raise self.status.fail(errno.EINVAL, 'Can only assign online CPUs\n')
        if grp.kind == CTRL:
            self._cpus_ctrl_write(grp, new)
        else:
            self._cpus_mon_write(grp, new)

    def _cpus_ctrl_write(self, grp: Group, new: set[int]) -> None:
        dropped = grp.cpus - new
        if dropped:
            if grp is self.root:
                raise self.status.fail(errno.EINVAL, "Can't drop CPUs from default group\n")
            self.root.cpus |= dropped
        added = new - grp.cpus
        if added:
            for other in self.ctrl_groups():
                if other is not grp and other.cpus & added:
                    other.cpus -= added
                    for child in other.mon_groups.values():
                        child.cpus &= other.cpus
        grp.cpus = set(new)
        for child in grp.mon_groups.values():
            child.cpus = set()

    def _cpus_mon_write(self, grp: Group, new: set[int]) -> None:
        parent = grp.ctrl
        if new - parent.cpus:
            raise self.status.fail(errno.EINVAL,
                                   'Can only add CPUs to mongroup that belong to parent\n')
        parent.cpus |= grp.cpus - new
        added = new - grp.cpus
        for sibling in parent.mon_groups.values():
            if sibling is not grp:
                sibling.cpus -= added
        grp.cpus = set(new)

    # -- directories -------------------------------------------------------------
    def mkdir(self, path: str, perm: int, caller: Caller) -> None:
        parent_path, _, name = path.rstrip('/').rpartition('/')
        if '\n' in name:
            raise oserror(errno.EINVAL)
        parent = self.lookup(parent_path)
        if not parent.is_dir:
            raise oserror(errno.ENOTDIR)
        if name in self.entries(parent):
            raise oserror(errno.EEXIST)
        if parent.role == ROOT:
            self._mkdir_ctrl(name, perm, caller)
            return
        prgrp = parent.group
        if prgrp is None or parent.role in (INFO, INFO_RES):
            raise oserror(errno.ENODEV)
        self.status.clear()
        if parent.name != 'mon_groups' or name == 'mon_groups' or parent.role != MON_GROUPS:
            raise oserror(errno.EPERM)
        rmid = self._alloc_rmid()
        self.mon.advance()
        grp = Group(name, MON, prgrp.closid, rmid, parent=prgrp, perm=perm,
                    uid=caller.uid, gid=caller.gid, ctime=time.time())
        prgrp.mon_groups[name] = grp
        self.mon.rmid_allocated(rmid)
        self.counters.assign_on_mkdir(grp)

    def _alloc_rmid(self) -> int:
        if not self.rmid_free:
            raise self.status.fail(errno.ENOSPC, 'Out of RMIDs\n')
        return self.rmid_free.popleft()

    def _mkdir_ctrl(self, name: str, perm: int, caller: Caller) -> None:
        self.status.clear()
        used = list(self.closid_used)
        if 'io-alloc-closid' in self.diverge and self.io.enabled:
            used[self.io.closid] = False
        try:
            closid = used.index(False)
        except ValueError:
            raise self.status.fail(errno.ENOSPC, 'Out of CLOSIDs\n') from None
        rmid = self._alloc_rmid()
        self.closid_used[closid] = True
        try:
            staged = self.init_cat(closid)
        except OSError:
            self.closid_used[closid] = False
            self.rmid_free.append(rmid)
            raise
        self.mon.advance()
        low = self.profile.min_bandwidth if 'new-group-mb' in self.diverge else None
        for schema in self.schema_list:
            if not schema.is_cache:                     # rdtgroup_init_mba()
                for dom in self.profile.domains:
                    if schema.name == 'MB' and self.mount.mba_sc:
                        self.mbps[closid][dom] = MBA_MAX_MBPS if low is None else low
                    else:
                        staged[(schema.name, dom)] = self.default_ctrl(schema) \
                            if low is None else low
        for (res, dom), val in staged.items():
            self.ctrl[res][closid][dom] = val
        grp = Group(name, CTRL, closid, rmid, perm=perm, uid=caller.uid,
                    gid=caller.gid, ctime=time.time())
        if self.mount.mba_sc:
            grp.mba_event = self.mba_default_event
        self.groups[name] = grp
        self.mon.rmid_allocated(rmid)
        self.counters.assign_on_mkdir(grp)
        self._diverging_mkdir(grp, caller)

    def _diverging_mkdir(self, grp: Group, caller: Caller) -> None:
        """What the mkdir divergences make of a new control group."""
        root = self.root
        if 'new-group-mode' in self.diverge:
            grp.mode = EXCLUSIVE
        if 'new-group-cpus' in self.diverge and root.cpus:
            grp.cpus = {min(root.cpus)}
            root.cpus -= grp.cpus
        if 'mkdir-drops-cpu' in self.diverge and len(root.cpus) > 1:
            root.cpus.discard(max(root.cpus))
        if 'mkdir-moves-caller' in self.diverge:
            self._move_task(0, grp, caller)

    def init_cat(self, closid: int) -> dict[tuple[str, int], int]:
        """``rdtgroup_init_cat()`` for every cache schema: staged values."""
        staged: dict[tuple[str, int], int] = {}
        for schema in self.cache_schemas():
            for dom in self.profile.domains:
                val = self.init_one_domain(dom, closid, schema)
                if _weight(val) < self.profile.min_cbm_bits:
                    raise self.status.fail(errno.ENOSPC,
                                           'No space on %s:%d\n' % (schema.name, dom))
                staged[(schema.name, dom)] = val
        return staged

    def init_one_domain(self, dom: int, closid: int, schema: Schema) -> int:
        """``__init_one_rdt_domain()`` + ``cbm_ensure_valid()``; CDP counts the peer."""
        prof = self.profile
        new = used = prof.shareable_bits
        for i, mode in self._modes().items():
            if i == closid or mode == LOCKSETUP:
                continue
            val = self.ctrl[schema.name][i][dom]
            if schema.peer:
                val |= self.ctrl[schema.peer][i][dom]
            used |= val
            if mode == SHAREABLE or 'mkdir-takes-exclusive' in self.diverge:
                new |= val
        new |= (used ^ prof.cbm_mask) & prof.cbm_mask
        if new and 'new-group-one-way' in self.diverge:
            return new & -new
        if not new or (prof.sparse_masks and prof.sparse_new_group):
            return new  # cbm_ensure_valid(): one run, but on tip with sparse masks
        first = (new & -new).bit_length() - 1
        zero = first
        while zero < prof.cbm_len and new >> zero & 1:
            zero += 1
        return new & ((1 << zero) - 1)

    def rmdir(self, path: str) -> None:
        node = self.lookup(path)
        if not node.is_dir:
            raise oserror(errno.ENOTDIR)
        if node.role == ROOT:
            raise oserror(errno.EBUSY)
        grp = node.group
        if grp is None or node.role != GROUP_DIR:
            raise oserror(errno.EPERM)
        self.mon.advance()
        if grp.kind == CTRL:
            for child in grp.mon_groups.values():
                self.counters.unassign_all(child)
                child.alive, child.moved_to = False, self.root
                self._free_rmid(child.rmid, self.root.rmid)
            self.counters.unassign_all(grp)
            grp.alive, grp.moved_to = False, self.root
            if 'rmdir-loses-tasks' in self.diverge:
                grp.moved_to = None
            self.root.cpus |= grp.cpus
            self._free_rmid(grp.rmid, self.root.rmid)
            self.closid_used[grp.closid] = False
            del self.groups[grp.name]
        else:
            parent = grp.ctrl
            self.counters.unassign_all(grp)
            grp.alive, grp.moved_to = False, parent
            self._free_rmid(grp.rmid, parent.rmid)
            del parent.mon_groups[grp.name]

    def _free_rmid(self, rmid: int, heir: int) -> None:
        self.rmid_free.append(rmid)
        self.mon.rmid_freed(rmid, heir)

    def rename(self, old: str, new: str) -> None:
        """``rdtgroup_rename()``: only MON groups, only between mon_groups dirs."""
        src = self.lookup(old)
        new_parent_path, _, new_name = new.rstrip('/').rpartition('/')
        dst_parent = self.lookup(new_parent_path)
        if src.role in (INFO, INFO_RES, ROOT) or (src.role == FILE and src.group is None):
            raise oserror(errno.ENOENT)
        if dst_parent.group is None or dst_parent.role in (INFO, INFO_RES):
            raise oserror(errno.ENOENT)
        self.status.clear()
        if not src.is_dir or not dst_parent.is_dir:
            raise self.status.fail(errno.EPERM, 'Source and destination must be directories')
        grp = src.group
        if grp is None or src.role != GROUP_DIR or grp.kind != MON:
            raise self.status.fail(errno.EPERM, 'Source must be a MON group\n')
        if dst_parent.role != MON_GROUPS or new_name == 'mon_groups':
            raise self.status.fail(errno.EPERM, 'Destination must be a mon_groups subdirectory\n')
        new_parent = dst_parent.group
        assert new_parent is not None
        if grp.cpus and grp.parent is not new_parent:
            raise self.status.fail(errno.EPERM, 'Cannot move a MON group that monitors CPUs\n')
        if new_name in new_parent.mon_groups and new_parent.mon_groups[new_name] is not grp:
            raise oserror(errno.EEXIST)
        self.mon.advance()
        assert grp.parent is not None
        del grp.parent.mon_groups[grp.name]
        grp.parent, grp.name = new_parent, new_name
        new_parent.mon_groups[new_name] = grp
        self.mon.controls_changed()

    # -- info ------------------------------------------------------------------
    def last_cmd_show(self) -> str:
        return self.status.text or 'ok\n'

    def threshold_write(self, data: bytes, _caller: Caller) -> None:
        try:
            nbytes = kstrtouint(cstr(data.decode('latin-1')), 0)
        except ParseError as exc:
            raise oserror(exc.errno) from None
        if nbytes > self.profile.realloc_limit:
            raise oserror(errno.EINVAL)
        self.threshold = self.profile.round_mon_val(nbytes)

    def _info_files(self, res: str) -> dict[str, Callable[[], str]]:
        prof = self.profile
        schema = self.schema_by_name.get(res)
        if schema is not None and schema.is_cache:
            files = {
                'bit_usage': lambda: self.bit_usage_show(schema),
                'cbm_mask': lambda: '%x\n' % (prof.cbm_mask & ~int(
                    'cbm-mask-gap' in self.diverge)),
                'min_cbm_bits': lambda: '%u\n' % prof.min_cbm_bits,
                'num_closids': lambda: '%u\n' % self.shown_closids(schema),
                'shareable_bits': lambda: '%x\n' % prof.shareable_bits,
                'sparse_masks': lambda: '%u\n' % int(prof.sparse_masks),
            }
            if prof.io_alloc:
                files.update(self.io.info_files(schema))
            if 'info-files' in self.diverge:
                del files['bit_usage']
            return files
        if schema is not None:
            files = {
                'bandwidth_gran': lambda: '%u\n' % prof.bandwidth_gran,
                'delay_linear': lambda: '%u\n' % int(prof.delay_linear),
                'min_bandwidth': lambda: '%u\n' % prof.min_bandwidth,
                'num_closids': lambda: '%u\n' % self.shown_closids(schema),
            }
            if prof.thread_throttle_mode:
                files['thread_throttle_mode'] = lambda: '%s\n' % prof.thread_throttle_mode
            return files
        files = {
            'max_threshold_occupancy': lambda: '%u\n' % self.threshold,
            'mon_features': lambda: ''.join(e + '\n' for e in EVENTS),
            'num_rmids': lambda: '%d\n' % prof.mon_num_rmids,
        }
        files.update(self.counters.info_files())
        return files

    def shown_closids(self, schema: Schema) -> int:
        """``info/RES/num_closids`` (one too many under ``num-closids``)."""
        return schema.num_closid + ('num-closids' in self.diverge)

    def _info_writers(self) -> dict[str, Callable[[bytes, Caller], None]]:
        writers: dict[str, Callable[[bytes, Caller], None]] = {
            'max_threshold_occupancy': self.threshold_write}
        writers.update(self.counters.info_writers())
        return writers

    # -- the tree ----------------------------------------------------------------
    def _group_files(self, grp: Group) -> list[str]:
        """``rdtgroup_add_files()`` with the group's RFTYPE flags."""
        names = list(MON_FILES) if grp.kind == MON else list(CTRL_FILES)
        if grp.kind == CTRL and self.mount.mba_sc:
            names.append('mba_MBps_event')        # RFTYPE_CTRL_BASE | RFTYPE_MON_BASE
        if self.counters.assignable:
            names.append('mbm_L3_assignments')    # RFTYPE_MON_BASE
        if self.mount.debug:
            names.append('mon_hw_id')
            if grp.kind == CTRL:
                names.append('ctrl_hw_id')
        return names

    def _group_file(self, grp: Group, name: str) -> Node:
        if name in ('cpus', 'cpus_list'):
            as_list = name == 'cpus_list'
            return Node(FILE, name, grp, 0o644, lambda: self.cpus_show(grp, as_list),
                        lambda data, _c: self.cpus_write(grp, data, as_list))
        if name == 'tasks':
            return Node(FILE, name, grp, 0o644, lambda: self.tasks_show(grp),
                        lambda data, c: self.tasks_write(grp, data, c))
        if name == 'schemata':
            return Node(FILE, name, grp, 0o644, lambda: self.schemata_show(grp),
                        lambda data, c: self.schemata_write(grp, data, c))
        if name == 'mode':
            return Node(FILE, name, grp, 0o644, lambda: grp.mode + '\n',
                        lambda data, c: self.mode_write(grp, data, c))
        if name == 'mba_MBps_event':
            return Node(FILE, name, grp, 0o644, lambda: self.mba_event_show(grp),
                        lambda data, _c: self.mba_event_write(grp, data))
        if name == 'mbm_L3_assignments':
            return Node(FILE, name, grp, 0o644, lambda: self.counters.assignments_show(grp),
                        lambda data, _c: self.counters.assignments_write(grp, data))
        if name in ('mon_hw_id', 'ctrl_hw_id'):
            value = grp.rmid if name == 'mon_hw_id' else grp.closid
            return Node(FILE, name, grp, 0o444, lambda: '%u\n' % value)
        return Node(FILE, name, grp, 0o644 if 'size-writable' in self.diverge else 0o444,
                    lambda: self.size_show(grp))

    def mba_event_show(self, grp: Group) -> str:
        return grp.mba_event + '\n'

    def mba_event_write(self, grp: Group, data: bytes) -> None:
        """``rdtgroup_mba_mbps_event_write()``."""
        if not data or data[-1:] != b'\n':
            raise oserror(errno.EINVAL)
        buf = cstr(data[:-1].decode('latin-1'))
        self.status.clear()
        if buf not in MBM_EVENTS:
            raise self.status.fail(errno.EINVAL, "Unsupported event id '%s'\n" % buf)
        if 'mba-event-stays' in self.diverge:
            return
        self.mon.advance()
        grp.mba_event = buf
        self.mon.controls_changed()

    def _mon_file(self, grp: Group, dom: int, event: str, node: int) -> Node:
        return Node(FILE, event, grp, 0o444,
                    lambda: self.mon_show(grp, dom, event, node))

    def mon_show(self, grp: Group, dom: int, event: str, node: int) -> str:
        """``rdtgroup_mondata_show()``: a count, or why there is none."""
        members = [grp] if grp.kind == MON or 'ctrl-counts-own' in self.diverge \
            else [grp] + list(grp.mon_groups.values())
        fmt = '0x%x\n' if 'counter-hex' in self.diverge else '%d\n'
        if event in MBM_EVENTS and 'mbm-frozen' in self.diverge:
            return fmt % 0
        if event == 'llc_occupancy' and 'occupancy-stuck' in self.diverge:
            return fmt % self.profile.round_mon_val(self.profile.way_size)
        if event in MBM_EVENTS and self.counters.enabled:
            self.mon.refresh()
            value = self.counters.read(members, dom, event)
            if value is None:
                return fmt % 0 if 'unassigned-zero' in self.diverge else 'Unassigned\n'
            return fmt % value
        return fmt % self.mon.read(grp, dom, event, node)

    def mon_subdirs(self, dom: int) -> list[str]:
        """SNC: ``mon_sub_L3_YY`` for each node sharing L3 ``dom``."""
        if self.profile.snc_nodes == 1:
            return []
        return ['mon_sub_L3_%02d' % n for n in self.profile.nodes
                if self.profile.l3_of_node(n) == dom]

    def entries(self, node: Node) -> list[str]:
        """Names in a directory (kernfs order is not sorted; we sort)."""
        grp = node.group
        if node.role == ROOT:
            return sorted(self._group_files(self.root) + ['info', 'mon_data', 'mon_groups']
                          + list(self.groups))
        if node.role == INFO:
            return [s.name for s in self.schema_list] + ['L3_MON', 'last_cmd_status']
        if node.role == INFO_RES:
            names = list(self._info_files(node.resource))
            if node.resource == 'L3_MON':
                names += self.counters.info_dirs()
            return sorted(names)
        if node.role == INFO_DIR:
            return self.counters.info_dir_entries(node.resource)
        assert grp is not None
        if node.role == GROUP_DIR:
            extra = ['mon_data'] if grp.kind == MON else ['mon_data', 'mon_groups']
            return sorted(self._group_files(grp) + extra)
        if node.role == MON_GROUPS:
            return sorted(grp.mon_groups)
        if node.role == MON_DATA:
            doms = list(self.profile.domains)
            if 'mon-data-dirs' in self.diverge and grp is not self.root:
                doms = doms[:-1]
            return ['mon_L3_%02d' % d for d in doms]
        if node.role == MON_DOM:
            return list(EVENTS) + self.mon_subdirs(node.domain)
        if node.role == MON_SUB:
            return list(EVENTS)
        return []

    def _child(self, node: Node, name: str) -> Node:
        if not node.is_dir:
            raise oserror(errno.ENOTDIR)
        if name not in self.entries(node):
            raise oserror(errno.ENOENT)
        grp = node.group
        if node.role == INFO:
            if name == 'last_cmd_status':
                return Node(FILE, name, None, 0o444, self.last_cmd_show)
            return Node(INFO_RES, name, None, 0o755, resource=name)
        if node.role == INFO_RES:
            if name in self.counters.info_dirs():
                return Node(INFO_DIR, name, None, 0o755, resource=name)
            show = self._info_files(node.resource)[name]
            writer = (self.io.writers(self.schema_by_name[node.resource]).get(name)
                      if node.resource in self.schema_by_name
                      else self._info_writers().get(name))
            return Node(FILE, name, None, 0o644 if writer else 0o444, show, writer)
        if node.role == INFO_DIR:
            if node.resource == 'event_configs':
                return Node(INFO_DIR, name, None, 0o755, resource=name)
            event = node.resource
            return Node(FILE, name, None, 0o444,
                        lambda: self.counters.event_filter_show(event))
        if node.role == ROOT:
            if name == 'info':
                return Node(INFO, name, None, 0o755)
            if name in self.groups:
                sub = self.groups[name]
                return Node(GROUP_DIR, name, sub, sub.perm)
            grp = self.root
        assert grp is not None
        if node.role in (ROOT, GROUP_DIR):
            if name == 'mon_groups':
                return Node(MON_GROUPS, name, grp, grp.perm)
            if name == 'mon_data':
                return Node(MON_DATA, name, grp, grp.perm)
            return self._group_file(grp, name)
        if node.role == MON_GROUPS:
            sub = grp.mon_groups[name]
            return Node(GROUP_DIR, name, sub, sub.perm)
        if node.role == MON_DATA:
            return Node(MON_DOM, name, grp, grp.perm, domain=int(name[-2:]))
        if node.role == MON_DOM and name.startswith('mon_sub_L3_'):
            return Node(MON_SUB, name, grp, grp.perm, domain=node.domain, sub=int(name[-2:]))
        return self._mon_file(grp, node.domain, name, node.sub)

    def lookup(self, path: str) -> Node:
        node = Node(ROOT, '', self.root, 0o755)
        for part in path.split('/'):
            if part:
                node = self._child(node, part)
        return node

    def owner(self, node: Node) -> tuple[int, int]:
        grp = node.group
        return (grp.uid, grp.gid) if grp is not None else (0, 0)

    def ctime(self, node: Node) -> float:
        grp = node.group
        return grp.ctime if grp is not None and grp.ctime else self.mounted_at

    def check_write(self, node: Node, data: bytes) -> None:
        """kernfs_fop_write_iter(): the group must be live; one page at most."""
        if not node.alive and 'removed-group-files' not in self.diverge:
            raise oserror(errno.ENODEV)
        if len(data) > ATOMIC_WRITE_LEN:
            raise oserror(errno.E2BIG)
