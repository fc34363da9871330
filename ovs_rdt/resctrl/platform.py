"""What the platform is, read from ``info/``, and whether that read is stale.

Read from ``info/`` and the default group once and kept; whether it still
describes the mount: :meth:`PlatformReader.platform_stale`.
"""
from __future__ import annotations

import os

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import MAX_MBA_BW_AMD, UNIT_AMD, UNIT_MBPS, UNIT_PERCENT
from ovs_rdt.core.model import ROOT, Group, MBInfo, Platform
from ovs_rdt.exceptions import ResctrlUnavailable
from ovs_rdt.resctrl.files import Files
from ovs_rdt.resctrl.text import active_mode, mount_entry, parse_domain_values
from ovs_rdt.resctrl.text import parse_resources, parse_schemata, parse_size

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Any


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


class PlatformReader(Files):
    """:meth:`platform`, read once and kept, and its staleness check."""

    def __init__(self, root: str, lock_timeout: float, mounts: str) -> None:
        super().__init__(root, lock_timeout)
        #: Where the mount options are read (``mba_MBps``): injectable.
        self.mounts = mounts
        self._platform: Platform | None = None
        #: The lock acquisition :meth:`platform` last read under (None:
        #: read without the lock).
        self._platform_epoch: int | None = None
        #: While :meth:`platform` reads: info file -> its text (each once).
        self._info_memo: dict[tuple[str, ...], str | None] | None = None
        #: What :meth:`platform` read that may change under the same
        #: domains (:meth:`platform_stale`).
        self._signature: MountState | None = None

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
            cdp=cdp,
            smba=os.path.isdir(os.path.join(self.root, 'info', 'SMBA')),
            io_alloc=io_state, io_alloc_cbm=io_cbm,
            mbm_assign_mode=active_mode(sig.mbm_assign_mode))
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
