"""The resctrl filesystem layer: plain file I/O below an injectable root.

* Reads capabilities from ``info/`` and groups from their directories.
* Creates and removes only ``ovsrdt-`` groups; writes schemata, mode and
  tasks of our groups, and schemata/tasks of the root.
* Every failed write raises :class:`ResctrlError` with the file, the value
  and the kernel's ``info/last_cmd_status``.
* ``lock()`` is the kernel's documented convention: ``flock`` on the
  resctrl root, ``LOCK_EX`` around read-modify-write, ``LOCK_SH`` for reads.
* Writes refuse to follow symlinks (``O_NOFOLLOW``).
"""
from __future__ import annotations

import errno
import fcntl
import os
import time

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import MAX_MBA_BW_AMD, UNIT_AMD, UNIT_MBPS, UNIT_PERCENT
from ovs_rdt.core.model import MODE_SHAREABLE, ROOT, Group, MBInfo, Platform
from ovs_rdt.exceptions import NotOwnedError, RDTError, ResctrlError
from ovs_rdt.exceptions import ResctrlUnavailable
from ovs_rdt import GROUP_PREFIX

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Any, Iterable

#: What :meth:`Resctrl.read` asks for at a time.
_READ_SIZE = 65536

_NAME_CHARS = frozenset('abcdefghijklmnopqrstuvwxyz'
                        'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:')


#: The schemata resources that hold L3 masks: ``L3``, or ``L3CODE`` and
#: ``L3DATA`` under CDP.
L3_RESOURCES = ('L3', 'L3CODE', 'L3DATA')


def domain_items(text: str) -> dict[int, str]:
    """``0=7f0;1=3f``: domain -> value text, the one reader of that form
    (schemata lines, ``size``, ``io_alloc_cbm``, ``num_mbm_cntrs``,
    ``mbm_L3_assignments``); items without a domain number are skipped.
    """
    out: dict[int, str] = {}
    for item in text.strip().split(';'):
        dom, eq, val = item.partition('=')
        if eq and dom.strip().isdigit():
            out[int(dom)] = val.strip()
    return out


def resource_lines(text: str) -> dict[str, dict[int, str]]:
    """``RES:0=v;1=v`` lines: resource -> domain -> value text (names may
    be padded, as the kernel pads them to the longest name).
    """
    out: dict[str, dict[int, str]] = {}
    for line in text.splitlines():
        res, sep, rest = line.strip().partition(':')
        if sep:
            out.setdefault(res.strip(), {}).update(domain_items(rest))
    return out


def parse_resources(text: str, width: int) -> dict[str, dict[int, CBM]]:
    """The L3 lines of a schemata file: ``{resource: {domain: mask}}``.

    ``L3``, ``L3CODE`` and ``L3DATA``; other lines (``MB``, ``SMBA``,
    ``L2``) are left out.
    """
    return {res: {d: CBM(int(v, 16), width) for d, v in values.items()}
            for res, values in resource_lines(text).items()
            if res in L3_RESOURCES}


def parse_schemata(text: str, width: int) -> tuple[dict[int, CBM],
                                                   dict[int, int]]:
    """Parse a schemata file into L3 masks and MB values per domain.

    Under CDP a domain's L3 mask is its ``L3CODE`` and ``L3DATA`` masks
    together: a way either uses is in use.  ``SMBA`` lines are not ``MB``.
    """
    res = parse_resources(text, width)
    l3: dict[int, CBM] = dict(res.get('L3', {}))
    for kind in ('L3CODE', 'L3DATA'):
        for dom, mask in res.get(kind, {}).items():
            l3[dom] = l3[dom] | mask if dom in l3 else mask
    mb = {d: int(v) for d, v in resource_lines(text).get('MB', {}).items()}
    return l3, mb


def parse_domain_values(text: str) -> dict[int, str]:
    """``0=ffff;1=ffff`` (``io_alloc_cbm``, ``num_mbm_cntrs``) per domain."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        out.update(domain_items(line))
    return out


def mount_entry(mounts_text: str, root: str) -> tuple[str, list[str]] | None:
    """``(fstype, options)`` of the last mount at ``root`` in a
    ``/proc/mounts`` text (``resctrl``; ``fuse.resctrl`` for the emulator);
    None when nothing is mounted there.
    """
    found = None
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        # Spaces and the like are octal escapes in /proc/mounts.
        where = fields[1].replace('\\040', ' ').replace('\\011', '\t')
        if where.rstrip('/') == root.rstrip('/'):
            found = (fields[2], fields[3].split(','))   # the last one wins
    return found


def parse_size(text: str, resource: str = 'L3') -> dict[int, int]:
    """The ``resource`` line of a group's ``size`` file: bytes per domain.

    Under CDP the kernel prints ``L3CODE`` and ``L3DATA`` lines there
    (one per schema, ``rdtgroup_size_show()``), no ``L3`` line.
    """
    return {d: int(v) for d, v in
            resource_lines(text).get(resource, {}).items() if v}


#: What reading a file of a group removed meanwhile gives: ENOENT (the
#: path; or the kernel's ``show`` racing the removal), ENODEV (a file open
#: before: ``kernfs_get_active()`` fails on a removed node), ESTALE (a FUSE
#: mount, the emulator: the node went between the lookup and its use).
GONE = (errno.ENOENT, errno.ENODEV, errno.ESTALE)


def gone(exc: OSError) -> OSError:
    """``exc``, as FileNotFoundError when it says the file's group went
    (:data:`GONE`): what every reader of resctrl takes as "gone".
    """
    if exc.errno in GONE and not isinstance(exc, FileNotFoundError):
        return FileNotFoundError(exc.errno, os.strerror(exc.errno),
                                 exc.filename)
    return exc


def check_group_name(name: str) -> None:
    """A name ovs-rdt gives a group it makes or writes (never a check on
    what it reads: the kernel takes any name without a newline).
    """
    if name == ROOT:
        return
    if (name in ('.', '..', 'info', 'mon_groups', 'mon_data')
            or not set(name) <= _NAME_CHARS or len(name) > 200):
        raise NotOwnedError('%r is not a valid resctrl group name' % name)


class MountState:
    """What can change on a mount while its cache domains stay the same,
    read by :meth:`Resctrl.platform` once and compared by
    :meth:`Resctrl.platform_stale`.

    ``cdp``; ``event``: the default group has ``mba_MBps_event`` (an
    mba_MBps mount on Linux 6.14 and later); ``mba_mbps_option``:
    ``mba_MBps`` is in the mount options (None: not read, the event file
    told or there is no MBA); ``io_alloc``: ``(io_alloc, io_alloc_cbm)``
    text per L3 type; ``mbm_assign_mode``: that file's text.
    """

    __slots__ = ('cdp', 'event', 'mba_mbps_option', 'io_alloc',
                 'mbm_assign_mode')

    def __init__(self, cdp: bool, event: bool, mba_mbps_option: bool | None,
                 io_alloc: tuple[tuple[str | None, str | None], ...],
                 mbm_assign_mode: str | None) -> None:
        self.cdp = cdp
        self.event = event
        self.mba_mbps_option = mba_mbps_option
        self.io_alloc = io_alloc
        self.mbm_assign_mode = mbm_assign_mode

    def _key(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MountState):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


class _Lock:
    """``with resctrl.lock():`` (contextlib costs the hook milliseconds)."""

    __slots__ = ('rc', 'exclusive')

    def __init__(self, rc: 'Resctrl', exclusive: bool) -> None:
        self.rc = rc
        self.exclusive = exclusive

    def __enter__(self) -> None:
        self.rc._acquire(self.exclusive)

    def __exit__(self, *exc: object) -> None:
        self.rc._release()


class Resctrl:
    """resctrl below ``root`` (``/sys/fs/resctrl`` on a real node)."""

    def __init__(self, root: str = '/sys/fs/resctrl',
                 sysfs_cpu_root: str = '/sys/devices/system/cpu',
                 lock_timeout: float = 30.0,
                 mounts: str = '/proc/mounts',
                 sysfs_node_root: str | None = None) -> None:
        self.root = root.rstrip('/') or '/'
        self.sysfs_cpu_root = sysfs_cpu_root
        #: Where nodeN/cpulist are read; None: beside or inside the CPU root.
        self.sysfs_node_root = sysfs_node_root
        #: Where the mount options are read (``mba_MBps``): injectable.
        self.mounts = mounts
        self.lock_timeout = lock_timeout
        self._lock_fd: int | None = None
        self._lock_depth = 0
        self._lock_exclusive = False
        #: Counts the lock's acquisitions (depth 0 -> 1).
        self._lock_epoch = 0
        self._platform: Platform | None = None
        #: The lock acquisition :meth:`platform` last read under (None:
        #: read without the lock).
        self._platform_epoch: int | None = None
        #: While :meth:`platform` reads: info file -> its text (each once).
        self._info_memo: dict[tuple[str, ...], str | None] | None = None
        #: What :meth:`platform` read that may change under the same
        #: domains (:meth:`platform_stale`).
        self._signature: MountState | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> 'Resctrl':
        """From the ``[resctrl]`` options of a :class:`~ovs_rdt.conf.Settings`."""
        cfg = settings.resctrl
        return cls(cfg.root, cfg.sysfs_cpu_root, cfg.lock_timeout,
                   sysfs_node_root=cfg.sysfs_node_root)

    # -- paths and raw I/O ------------------------------------------------
    def path(self, group: str, *parts: str) -> str:
        """A group's directory (or a file in it).  Any name: a group
        another tool made is read whatever the kernel let it be called;
        the names ovs-rdt makes are checked where it makes them
        (:meth:`_owned`).
        """
        return os.path.join(self.root, group, *parts) if group else \
            os.path.join(self.root, *parts)

    def read(self, path: str) -> str:
        """The whole file, in as few system calls as a read can take.

        (open() would add an fstat, an isatty ioctl and a seek, each a
        round trip to a FUSE mount; the hook reads ~50 files per event.)
        The files are ASCII; UTF-8 is the codec Python starts with (an
        "ascii" one costs the hook an import at every VM start).

        A read that returns less than it asked for has the whole file: every
        resctrl (and sysfs) file is one kernfs ``seq_show`` record, which
        ``seq_read_iter`` hands out whole up to the reader's size, and the
        emulator's ``direct_io`` reads return what is left up to the size.
        Only a full read is followed by another (a ``tasks`` list longer
        than the buffer); a read for end of file after every short one would
        be one more FUSE round trip per file, ~50 per event.

        A file of a group removed meanwhile (another tool's may go at any
        read) raises FileNotFoundError, however it is said (:func:`gone`).
        """
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                chunk = os.read(fd, _READ_SIZE)
                if len(chunk) < _READ_SIZE:
                    return chunk.decode('utf-8')
                chunks = [chunk]
                while chunk:
                    chunk = os.read(fd, _READ_SIZE)
                    chunks.append(chunk)
            finally:
                os.close(fd)
        except OSError as exc:
            raise gone(exc) from None
        return b''.join(chunks).decode('utf-8')

    def last_cmd_status(self) -> str | None:
        try:
            return self.read(os.path.join(self.root, 'info',
                                          'last_cmd_status')).strip()
        except OSError:
            return None

    def write(self, path: str, value: str) -> None:
        """One write(2) of ``value``; raise ResctrlError on failure."""
        fd = self._open_write(path, value)
        try:
            self._write_fd(fd, path, value)
        finally:
            os.close(fd)

    @staticmethod
    def _open_write(path: str, value: str) -> int:
        try:
            return os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            reason = ('refusing to follow a symlink' if exc.errno == errno.ELOOP
                      else os.strerror(exc.errno or 0))
            raise ResctrlError(path, value, exc.errno, None, reason) from None

    def _write_fd(self, fd: int, path: str, value: str) -> None:
        """One write(2) on an open file: each is one command to the kernel
        (kernfs calls the file's write handler per write, whatever the
        offset), with its own ``last_cmd_status``.
        """
        try:
            os.write(fd, value.encode('ascii'))
        except OSError as exc:
            status = self.last_cmd_status()
            if status == 'ok':
                status = None
            raise ResctrlError(path, value, exc.errno, status,
                               os.strerror(exc.errno or 0)) from None

    # -- locking ----------------------------------------------------------
    def lock(self, exclusive: bool = True) -> '_Lock':
        """flock on the root (context manager); re-entrant in this object.

        Written here rather than taken from a lock library: the kernel
        documents the resctrl lock (Documentation/filesystems/resctrl.rst,
        "Locking between applications") as ``flock(2)`` on the resctrl
        root directory itself.  Lock libraries lock a file of their own (no
        file can be created in resctrl) or take POSIX ``fcntl`` record
        locks, which do not exclude an ``flock`` holder; and the libvirt
        hook, a new process at every event, imports no dependency for it.
        """
        return _Lock(self, exclusive)

    def _acquire(self, exclusive: bool) -> None:
        if self._lock_depth:
            if exclusive and not self._lock_exclusive:
                raise RuntimeError('cannot upgrade a shared resctrl lock')
            self._lock_depth += 1
            return
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise ResctrlUnavailable('cannot open resctrl root %s: %s'
                                     % (self.root, exc.strerror)) from None
        op = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.001
        try:
            while True:
                try:
                    fcntl.flock(fd, op | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise ResctrlUnavailable(
                            'timed out after %ss waiting for the lock on %s'
                            % (self.lock_timeout, self.root)) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd, self._lock_depth = fd, 1
        self._lock_exclusive = exclusive
        self._lock_epoch += 1

    def _release(self) -> None:
        self._lock_depth -= 1
        if self._lock_depth or self._lock_fd is None:
            return
        fd, self._lock_fd = self._lock_fd, None
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    # -- capabilities -----------------------------------------------------
    def _info(self, *parts: str) -> str | None:
        memo = self._info_memo
        if memo is not None and parts in memo:
            return memo[parts]
        try:
            text: str | None = self.read(
                os.path.join(self.root, 'info', *parts)).strip()
        except (FileNotFoundError, NotADirectoryError):
            text = None
        if memo is not None:
            memo[parts] = text
        return text

    def _l3_info(self) -> str | None:
        """``L3``, or ``L3CODE`` under CDP; None without L3 CAT."""
        for res in ('L3', 'L3CODE'):
            if self._info(res, 'cbm_mask') is not None:
                return res
        return None

    def check(self) -> None:
        if self._l3_info() is None:
            if not os.path.isdir(os.path.join(self.root, 'info')):
                raise ResctrlUnavailable(
                    'resctrl is not mounted at %s (mount it with "mount -t '
                    'resctrl resctrl %s", or run on an emulated platform '
                    'with "ovs-rdt emulate")' % (self.root, self.root))
            raise ResctrlUnavailable('%s has no L3 cache allocation '
                                     '(neither info/L3 nor info/L3CODE)'
                                     % self.root)

    def mount_entry(self) -> tuple[str, list[str]] | None:
        """``(fstype, options)`` of the mount at the root, from ``mounts``."""
        try:
            with open(self.mounts, encoding='utf-8') as fh:
                text = fh.read()
        except OSError:
            return None
        return mount_entry(text, os.path.realpath(self.root))

    def mount_options(self) -> list[str] | None:
        """The options of the resctrl mount at the root (the kernel shows
        ``cdp``, ``mba_MBps``, ``debug`` there: ``rdtgroup_show_options()``);
        None when no resctrl is mounted there.
        """
        entry = self.mount_entry()
        return entry[1] if entry is not None and entry[0] == 'resctrl' else None

    @staticmethod
    def _mb_unit(delay_linear: bool, min_bandwidth: int, mbps: bool) -> str:
        """What the ``MB:`` values mean here (see :data:`UNIT_PERCENT`).

        * ``delay_linear`` 0 and ``min_bandwidth`` 0: AMD (never linear,
          no minimum).  A non-linear Intel MBA keeps its percentages, but
          the kernel refuses every value there (``arch_needs_linear``;
          today's kernels do not even enable it): the allocator then
          takes no cap (:func:`ovs_rdt.core.allocator.plan`).
        * ``mbps``: mounted with ``mba_MBps`` (:meth:`_mount_signature`).
        """
        if not delay_linear and not min_bandwidth:
            return UNIT_AMD
        return UNIT_MBPS if mbps else UNIT_PERCENT

    @staticmethod
    def _active_mode(text: str | None) -> str | None:
        """The active mode of ``info/L3_MON/mbm_assign_mode`` (``[mbm_event]``)."""
        words = (text or '').split()
        for word in words:
            if word.startswith('[') and word.endswith(']'):
                return word[1:-1]
        return words[0] if words else None

    def platform(self, refresh: bool = False) -> Platform:
        """Capabilities from ``info/`` and the root group (cached).

        Each ``info/`` file is read once however many facts come from it
        (the libvirt hook reads the platform at every VM start).
        """
        if self._platform is not None and not refresh:
            return self._platform
        self._info_memo = {}
        try:
            self._read_platform()
        finally:
            self._info_memo = None
        self._platform_epoch = self._lock_epoch if self._lock_depth else None
        assert self._platform is not None
        return self._platform

    def _describes(self, platform: Platform, signature: MountState,
                   root_l3: Any, cdp: bool) -> bool:
        """The root's domains (``root_l3``: a socket's CPUs taken offline)
        and the mount's signature (CDP, mba_MBps, io_alloc, the MBM
        counter mode) are those ``platform`` was read with.
        """
        return (tuple(sorted(root_l3)) == platform.domains
                and self._mount_signature(cdp) == signature)

    def _read_platform(self) -> Platform:
        self.check()
        res = self._l3_info() or 'L3'
        cdp = res == 'L3CODE'
        cbm_len = int(self._info(res, 'cbm_mask') or '0', 16).bit_length()
        closids = [int(text or '0') for text in (
            self._info(name, 'num_closids')
            for name in sorted(os.listdir(os.path.join(self.root, 'info'))))
            if text is not None]
        root_text = self.read(self.path(ROOT, 'schemata'))
        root_l3, root_mb = parse_schemata(root_text, cbm_len)
        cache_bytes: dict[int, int] = {}
        try:
            # ``L3``, or under CDP ``L3CODE`` with the code mask it sizes.
            sizes = parse_size(self.read(self.path(ROOT, 'size')), res)
        except (OSError, ValueError):
            sizes = {}
        for dom, mask in parse_resources(root_text, cbm_len).get(
                res, root_l3).items():
            if dom in sizes and mask.count:
                cache_bytes[dom] = sizes[dom] // mask.count * cbm_len
        sig = self._mount_signature(cdp)
        mb = None
        if self._info('MB', 'min_bandwidth') is not None:
            linear = self._info('MB', 'delay_linear') != '0'
            min_bw = int(self._info('MB', 'min_bandwidth') or '0')
            unit = self._mb_unit(linear, min_bw, sig.event or bool(
                sig.mba_mbps_option))
            # AMD's "no limit" is the value a fresh mount gives every
            # group (1 << the CPUID bandwidth width: 2048 on Zen 4/5).  The
            # root's value now shows a wider one; a cap someone put on the
            # root never lowers it below the kernel's MAX_MBA_BW_AMD.
            top = max([MAX_MBA_BW_AMD, *root_mb.values()]) \
                if unit == UNIT_AMD else None
            mb = MBInfo(min_bw, int(self._info('MB', 'bandwidth_gran') or '1'),
                        linear, tuple(sorted(root_mb)), unit, top, sig.event)
        shareable = 0
        io_state = None
        io_cbm: dict[int, CBM] = {}
        for name, (state, cbm_text) in zip(self._l3_types(cdp), sig.io_alloc):
            shareable |= int(self._info(name, 'shareable_bits') or '0', 16)
            if state is None:
                continue
            io_state = state.split()[0] if state.split() else state
            if io_state != 'enabled':
                continue
            for dom, val in parse_domain_values(cbm_text or '').items():
                mask = CBM(int(val, 16), cbm_len)
                io_cbm[dom] = io_cbm[dom] | mask if dom in io_cbm else mask
        num_closids = min(closids) if closids else 1
        if io_state == 'enabled':
            # The io_alloc CLOSID belongs to no group: mkdir cannot get it.
            num_closids -= 1
        mon = tuple((self._info('L3_MON', 'mon_features') or '').split())
        self._platform = Platform(
            cbm_len=cbm_len, num_closids=num_closids,
            domains=tuple(sorted(root_l3)),
            min_cbm_bits=int(self._info(res, 'min_cbm_bits') or '1'),
            shareable_bits=shareable,
            sparse_masks=self._info(res, 'sparse_masks') == '1',
            cache_bytes=cache_bytes, mb=mb, mon_features=mon,
            num_rmids=int(self._info('L3_MON', 'num_rmids') or '0'),
            topology=self.cpu_domains, cdp=cdp,
            smba=os.path.isdir(os.path.join(self.root, 'info', 'SMBA')),
            io_alloc=io_state, io_alloc_cbm=io_cbm,
            mbm_assign_mode=self._active_mode(sig.mbm_assign_mode))
        self._signature = sig
        return self._platform

    @staticmethod
    def _l3_types(cdp: bool) -> tuple[str, ...]:
        return ('L3CODE', 'L3DATA') if cdp else ('L3',)

    def _mount_signature(self, cdp: bool) -> MountState:
        """CDP and ``mba_MBps`` (a remount), io_alloc and the MBM counter
        mode (written at any time): what can change while the cache
        domains stay the same.  :meth:`platform` reads them here, once;
        :meth:`platform_stale` compares them.

        (:class:`MountState`).  The event file tells an mba_MBps mount on
        6.14 and later; before, only the mount options do
        (``rdtgroup_show_options()``).
        """
        io = []
        for name in self._l3_types(cdp):
            state = self._info(name, 'io_alloc')
            # io_alloc_cbm is EINVAL unless io_alloc is enabled.
            io.append((state, self._info(name, 'io_alloc_cbm')
                       if state and state.startswith('enabled') else None))
        event = os.path.exists(self.path(ROOT, 'mba_MBps_event'))
        # Before Linux 6.14 only the mount options tell mba_MBps (read
        # where MBA is, without the event file: /proc/mounts can be long).
        options = None
        if not event and os.path.isdir(os.path.join(self.root, 'info', 'MB')):
            options = 'mba_MBps' in (self.mount_options() or ())
        return MountState(cdp, event, options, tuple(io),
                          self._info('L3_MON', 'mbm_assign_mode'))

    def platform_stale(self, root: Group) -> bool:
        """Whether the cached platform no longer describes the mount.

        ``root`` is the default group as just read: its domains (a socket's
        CPUs taken offline), its ``L3CODE`` lines (remounted with or without
        ``-o cdp``); then the root's ``mba_MBps_event`` and the io_alloc
        files, which an operator may change while an agent runs.
        """
        plat = self._platform
        if plat is None:
            return False
        if self._lock_depth and self._platform_epoch == self._lock_epoch:
            return False        # read under this very hold of the lock
        assert self._signature is not None
        return not self._describes(plat, self._signature, root.l3,
                                   bool(root.l3code))

    def cpu_domains(self) -> dict[int, int]:
        """CPU id -> L3 cache id, from sysfs (empty when unreadable)."""
        out: dict[int, int] = {}
        try:
            names = os.listdir(self.sysfs_cpu_root)
        except OSError:
            return out
        for name in names:
            if not name.startswith('cpu') or not name[3:].isdigit():
                continue
            cache = os.path.join(self.sysfs_cpu_root, name, 'cache')
            for index in ('index3', 'index2', 'index1', 'index0', 'index4'):
                try:
                    if self.read(os.path.join(cache, index, 'level')).strip() != '3':
                        continue
                    out[int(name[3:])] = int(self.read(
                        os.path.join(cache, index, 'id')).strip())
                    break
                except (OSError, ValueError):
                    continue
        return out

    def node_root(self) -> str:
        """The NUMA node directory: ``sysfs_node_root``, else derived.

        The emulator's ``--sysfs-dir`` tree has ``node/`` inside the CPU
        root; Linux has ``/sys/devices/system/node`` beside
        ``/sys/devices/system/cpu``.
        """
        if self.sysfs_node_root:
            return self.sysfs_node_root
        inside = os.path.join(self.sysfs_cpu_root, 'node')
        if os.path.isdir(inside):
            return inside
        return os.path.join(
            os.path.dirname(os.path.normpath(self.sysfs_cpu_root)), 'node')

    def cpu_nodes(self) -> dict[int, int]:
        """CPU id -> NUMA node id, from ``nodeN/cpulist`` (empty when
        unreadable; a node whose list cannot be read or parsed is skipped).
        """
        from ovs_rdt.inputs import cpulists

        root = self.node_root()
        out: dict[int, int] = {}
        try:
            names = os.listdir(root)
        except OSError:
            return out
        for name in names:
            if not name.startswith('node') or not name[4:].isdigit():
                continue
            path = os.path.join(root, name, 'cpulist')
            try:
                cpus = cpulists.parse(self.read(path).strip(), path)
            except (OSError, RDTError):
                continue
            for cpu in cpus:
                out[cpu] = int(name[4:])
        return out

    def numa_l3(self) -> dict[int, frozenset[int]]:
        """NUMA node -> its L3 cache domains (:mod:`ovs_rdt.core.topology`);
        empty when sysfs has no nodes or no caches.
        """
        from ovs_rdt.core import topology

        return topology.from_cpus(self.cpu_nodes(), self.cpu_domains())

    # -- groups -----------------------------------------------------------
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

    # -- mutations (callers hold lock(exclusive=True)) ---------------------
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

    def unassigned(self, name: str, event: str) -> list[int]:
        """The L3 domains where ``name`` has no counter for ``event``.

        Only with assignable counters (``mbm_assign_mode`` ``mbm_event``):
        its ``mbm_L3_assignments`` reads ``EVENT:0=e;1=_``; else none.
        """
        try:
            text = self.read(self.path(name, 'mbm_L3_assignments'))
        except OSError:         # absent, or EINVAL outside mbm_event mode
            return []
        return sorted(d for d, state in
                      resource_lines(text).get(event, {}).items()
                      if state == '_')

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

    def read_mon(self, name: str) -> dict[int, dict[str, int]]:
        """mon_data values per domain: {domain: {feature: value}}.

        Only numbers count: ``Unavailable``, ``Error`` and, with
        assignable counters (``mbm_assign_mode`` ``mbm_event``), an event
        with no counter behind it, ``Unassigned``, are left out, never
        taken as zero.  Sub-NUMA directories (``mon_sub_L3_NN``) are not
        events: the ``mon_L3_NN`` files already sum them.
        """
        base = self.path(name, 'mon_data')
        out: dict[int, dict[str, int]] = {}
        try:
            entries = os.listdir(base)
        except OSError as exc:
            if exc.errno in GONE:
                return out
            raise
        for entry in entries:
            if not entry.startswith('mon_L3_'):
                continue
            dom = int(entry[len('mon_L3_'):])
            vals: dict[str, int] = {}
            try:
                feats = os.listdir(os.path.join(base, entry))
            except OSError as exc:
                raise gone(exc) from None
            for feat in feats:
                try:
                    text = self.read(os.path.join(base, entry, feat)).strip()
                except OSError:
                    continue        # a directory, or gone
                if text.isascii() and text.isdigit():
                    vals[feat] = int(text)
            out[dom] = vals
        return out
