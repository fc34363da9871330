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
from ovs_rdt.core.model import MODE_SHAREABLE, ROOT, Group, MBInfo, Platform
from ovs_rdt.exceptions import NotOwnedError, ResctrlError, ResctrlUnavailable
from ovs_rdt import GROUP_PREFIX

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Any, Iterable

_NAME_CHARS = frozenset('abcdefghijklmnopqrstuvwxyz'
                        'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:')


def parse_schemata(text: str, width: int) -> tuple[dict[int, CBM],
                                                   dict[int, int]]:
    """Parse a schemata file into L3 masks and MB values per domain."""
    l3: dict[int, CBM] = {}
    mb: dict[int, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if ':' not in line:
            continue
        res, _, rest = line.partition(':')
        for item in rest.split(';'):
            if '=' not in item:
                continue
            dom, _, val = item.partition('=')
            if res == 'L3':
                l3[int(dom)] = CBM(int(val, 16), width)
            elif res == 'MB':
                mb[int(dom)] = int(val)
    return l3, mb


def parse_size(text: str) -> dict[int, int]:
    """The L3 line of a group's ``size`` file: bytes per domain."""
    out: dict[int, int] = {}
    for line in text.splitlines():
        res, _, rest = line.strip().partition(':')
        if res != 'L3':
            continue
        for item in rest.split(';'):
            dom, _, val = item.partition('=')
            if val:
                out[int(dom)] = int(val)
    return out


def check_group_name(name: str) -> None:
    if name == ROOT:
        return
    if (name in ('.', '..', 'info', 'mon_groups', 'mon_data')
            or not set(name) <= _NAME_CHARS or len(name) > 200):
        raise NotOwnedError('%r is not a valid resctrl group name' % name)


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
                 lock_timeout: float = 30.0) -> None:
        self.root = root.rstrip('/') or '/'
        self.sysfs_cpu_root = sysfs_cpu_root
        self.lock_timeout = lock_timeout
        self._lock_fd: int | None = None
        self._lock_depth = 0
        self._lock_exclusive = False
        self._platform: Platform | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> 'Resctrl':
        """From the ``[resctrl]`` options of a :class:`~ovs_rdt.conf.Settings`."""
        cfg = settings.resctrl
        return cls(cfg.root, cfg.sysfs_cpu_root, cfg.lock_timeout)

    # -- paths and raw I/O ------------------------------------------------
    def path(self, group: str, *parts: str) -> str:
        check_group_name(group)
        return os.path.join(self.root, group, *parts) if group else \
            os.path.join(self.root, *parts)

    def read(self, path: str) -> str:
        # The files are ASCII; UTF-8 is the codec Python starts with (an
        # "ascii" one costs the hook an import at every VM start).
        with open(path, encoding='utf-8') as fh:
            return fh.read()

    def last_cmd_status(self) -> str | None:
        try:
            return self.read(os.path.join(self.root, 'info',
                                          'last_cmd_status')).strip()
        except OSError:
            return None

    def write(self, path: str, value: str) -> None:
        """One write(2) of ``value``; raise ResctrlError on failure."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            reason = ('refusing to follow a symlink' if exc.errno == errno.ELOOP
                      else os.strerror(exc.errno or 0))
            raise ResctrlError(path, value, exc.errno, None, reason) from None
        try:
            os.write(fd, value.encode('ascii'))
        except OSError as exc:
            status = self.last_cmd_status()
            if status == 'ok':
                status = None
            raise ResctrlError(path, value, exc.errno, status,
                               os.strerror(exc.errno or 0)) from None
        finally:
            os.close(fd)

    # -- locking ----------------------------------------------------------
    def lock(self, exclusive: bool = True) -> '_Lock':
        """flock on the root (context manager); re-entrant in this object."""
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

    def _release(self) -> None:
        self._lock_depth -= 1
        if self._lock_depth or self._lock_fd is None:
            return
        fd, self._lock_fd = self._lock_fd, None
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    # -- capabilities -----------------------------------------------------
    def _info(self, *parts: str) -> str | None:
        try:
            return self.read(os.path.join(self.root, 'info', *parts)).strip()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def check(self) -> None:
        if self._info('L3', 'cbm_mask') is None:
            if not os.path.isdir(os.path.join(self.root, 'info')):
                raise ResctrlUnavailable(
                    'resctrl is not mounted at %s (mount it with "mount -t '
                    'resctrl resctrl %s", or run on an emulated platform '
                    'with "ovs-rdt emulate")' % (self.root, self.root))
            raise ResctrlUnavailable('%s has no L3 cache allocation '
                                     '(info/L3 is missing)' % self.root)

    def platform(self, refresh: bool = False) -> Platform:
        """Capabilities from ``info/`` and the root group (cached)."""
        if self._platform is not None and not refresh:
            return self._platform
        self.check()
        cbm_len = int(self._info('L3', 'cbm_mask') or '0', 16).bit_length()
        closids = [int(self._info(res, 'num_closids') or '0')
                   for res in sorted(os.listdir(os.path.join(self.root, 'info')))
                   if self._info(res, 'num_closids') is not None]
        root_l3, root_mb = parse_schemata(self.read(self.path(ROOT, 'schemata')),
                                          cbm_len)
        cache_bytes: dict[int, int] = {}
        try:
            sizes = parse_size(self.read(self.path(ROOT, 'size')))
        except (OSError, ValueError):
            sizes = {}
        for dom, mask in root_l3.items():
            if dom in sizes and mask.count:
                cache_bytes[dom] = sizes[dom] // mask.count * cbm_len
        mb = None
        if self._info('MB', 'min_bandwidth') is not None:
            mb = MBInfo(int(self._info('MB', 'min_bandwidth') or '0'),
                        int(self._info('MB', 'bandwidth_gran') or '1'),
                        self._info('MB', 'delay_linear') == '1',
                        tuple(sorted(root_mb)))
        mon = tuple((self._info('L3_MON', 'mon_features') or '').split())
        self._platform = Platform(
            cbm_len=cbm_len, num_closids=min(closids) if closids else 1,
            domains=tuple(sorted(root_l3)),
            min_cbm_bits=int(self._info('L3', 'min_cbm_bits') or '1'),
            shareable_bits=int(self._info('L3', 'shareable_bits') or '0', 16),
            sparse_masks=self._info('L3', 'sparse_masks') == '1',
            cache_bytes=cache_bytes, mb=mb, mon_features=mon,
            num_rmids=int(self._info('L3_MON', 'num_rmids') or '0'),
            topology=self.cpu_domains)
        return self._platform

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

    # -- groups -----------------------------------------------------------
    def group_names(self) -> list[str]:
        names = [ROOT]
        for entry in sorted(os.listdir(self.root)):
            if entry in ('info', 'mon_groups', 'mon_data'):
                continue
            if os.path.isdir(os.path.join(self.root, entry)) and \
                    not os.path.islink(os.path.join(self.root, entry)):
                names.append(entry)
        return names

    def group(self, name: str, with_tasks: bool = True) -> Group:
        """A group; its members (tasks, CPUs) only ``with_tasks``.

        (Planning needs masks and modes only: the libvirt hook plans at
        every VM start.)
        """
        width = self.platform().cbm_len
        l3, mb = parse_schemata(self.read(self.path(name, 'schemata')), width)
        try:
            mode = self.read(self.path(name, 'mode')).strip()
        except FileNotFoundError:
            mode = MODE_SHAREABLE
        if not with_tasks:
            return Group(name, l3, mb, mode)
        from ovs_rdt.inputs import cpulists
        try:
            cpus = cpulists.parse(self.read(self.path(name, 'cpus_list')),
                                  self.path(name, 'cpus_list'))
        except FileNotFoundError:
            cpus = frozenset()
        return Group(name, l3, mb, mode, self.tasks(name), cpus)

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

    def add_tasks(self, name: str, tids: Iterable[int]) -> list[int]:
        """Move TIDs into ``name`` one per write; returns those that exited."""
        if name != ROOT:
            self._owned(name, 'move tasks into')
        path = self.path(name, 'tasks')
        gone = []
        for tid in tids:
            try:
                self.write(path, '%d\n' % tid)
            except ResctrlError as exc:
                if exc.errno == errno.ESRCH:
                    gone.append(tid)
                    continue
                raise
        return gone

    def read_mon(self, name: str) -> dict[int, dict[str, int]]:
        """mon_data values per domain: {domain: {feature: value}}."""
        base = self.path(name, 'mon_data')
        out: dict[int, dict[str, int]] = {}
        try:
            entries = os.listdir(base)
        except FileNotFoundError:
            return out
        for entry in entries:
            if not entry.startswith('mon_L3_'):
                continue
            dom = int(entry[len('mon_L3_'):])
            vals: dict[str, int] = {}
            for feat in os.listdir(os.path.join(base, entry)):
                try:
                    vals[feat] = int(self.read(os.path.join(base, entry, feat)))
                except (OSError, ValueError):
                    continue
            out[dom] = vals
        return out
