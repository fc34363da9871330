"""What the kernel's resctrl accepts: masks, writes, modes, mkdir (no I/O).

The one model of ``fs/resctrl``'s rules that ovs-rdt checks its own writes
against before making any (:mod:`ovs_rdt.core.writes`).  The emulator keeps
its own copy, written from the kernel, on purpose: it is the test ground.

* A mask is valid when it is ``cbm_len`` bits wide, contiguous unless the
  platform takes sparse masks, and its lowest run of ones is at least
  ``min_cbm_bits`` long (``cbm_validate()``): :func:`validate_mask`.
* A schemata write may not overlap an exclusive (or pseudo-locked) group,
  nor anything at all while its own group is exclusive: other groups and
  ``info/L3/shareable_bits``: :meth:`Kernel.write`.
* ``mode`` becomes exclusive only when the group overlaps nothing:
  :meth:`Kernel.set_mode`.
* ``mkdir`` fails with "No space" when every CLOSID has a group
  (:meth:`Kernel.closids_left`, the default group holds one); it gives the
  new group the lowest run of the ways that are unused or shareable (on
  sparse-mask platforms newer kernels give them all: :func:`new_group_masks`),
  and fails with "No space" too when it has fewer than ``min_cbm_bits``
  ways: :meth:`Kernel.mkdir_fits` (predicts the lowest run, the safe side).
"""
from __future__ import annotations

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import MODE_EXCLUSIVE, MODE_SHAREABLE, Group, Platform
from ovs_rdt.exceptions import InvalidMask, count

#: Modes whose ways no other group may share (the kernel refuses overlaps).
UNSHAREABLE = (MODE_EXCLUSIVE, 'pseudo-locked')


def lowest_run(value: int) -> int:
    """Length of the lowest run of set bits (0 for an empty mask)."""
    if not value:
        return 0
    shifted = value // (value & -value)
    return ((shifted ^ (shifted + 1)) >> 1).bit_length()


def validate_mask(platform: Platform, mask: CBM, field: str) -> None:
    """Raise InvalidMask unless the kernel would accept ``mask``.

    Like ``cbm_validate()``: the minimum is checked on the lowest run of
    ones, which for a sparse mask is less than its way count.
    """
    if mask.width != platform.cbm_len:
        raise InvalidMask('%s %s is not a %d-bit capacity bitmask'
                          % (field, mask, platform.cbm_len))
    if not platform.sparse_masks and not mask.is_contiguous():
        raise InvalidMask('%s %s is not contiguous (this platform does not '
                          'support sparse masks)' % (field, mask))
    if lowest_run(mask.value) < platform.min_cbm_bits:
        if mask.is_contiguous():
            raise InvalidMask('%s %s has %s, fewer than the platform '
                              'minimum %d' % (field, mask,
                                              count(mask.count, 'way'),
                                              platform.min_cbm_bits))
        raise InvalidMask('%s %s starts with a run of %s, fewer than the '
                          'platform minimum %d (the kernel checks the lowest '
                          'run of a sparse mask)'
                          % (field, mask, count(lowest_run(mask.value), 'way'),
                             platform.min_cbm_bits))


def is_valid(platform: Platform, mask: CBM) -> bool:
    """Whether the kernel would accept ``mask`` (:func:`validate_mask`)."""
    try:
        validate_mask(platform, mask, 'mask')
    except InvalidMask:
        return False
    return True


def new_group_mask(platform: Platform, domain: int,
                   others: list[tuple[str, int]], cut: bool = True) -> int:
    """The L3 mask ``mkdir`` gives a new group on ``domain``.

    ``__init_one_rdt_domain()``: ``shareable_bits``, every way of a
    shareable group (the default group's, ours, another tool's) and every
    way no group uses (exclusive and pseudo-locked groups' ways are used,
    a ``pseudo-locksetup`` group's are not looked at), then
    ``cbm_ensure_valid()``: only the lowest run of those (``cut``).  On
    platforms with sparse masks newer kernels keep them all (tip's
    ``cbm_ensure_valid()`` returns the mask as it is when
    ``arch_has_sparse_bitmasks``: ``cut=False``): :func:`new_group_masks`.
    ``others`` is each other group's ``(mode, mask)`` there.  io_alloc's
    CLOSID is no group's and not shareable: its ways are used.
    """
    full = (1 << platform.cbm_len) - 1
    used = platform.hw_shared(domain)
    new = platform.shareable_bits
    for mode, mask in others:
        if mode == 'pseudo-locksetup':
            continue
        used |= mask
        if mode == MODE_SHAREABLE:
            new |= mask
    new = (new | ~used) & full
    if not cut:
        return new
    # The carry of adding the lowest bit runs through the lowest run only.
    return new & ~(new + (new & -new))


def new_group_masks(platform: Platform, domain: int,
                    others: list[tuple[str, int]]) -> tuple[int, ...]:
    """Every mask ``mkdir`` may give a new group on ``domain``: the lowest
    run; on sparse-mask platforms also the whole set, as newer kernels
    give it (:func:`new_group_mask`).  ovs-rdt's planning predicts the
    lowest run (:meth:`Kernel.mkdir_fits`: the fewer ways, the safe side).
    """
    cut = new_group_mask(platform, domain, others)
    if not platform.sparse_masks:
        return (cut,)
    whole = new_group_mask(platform, domain, others, cut=False)
    return (cut,) if whole == cut else (cut, whole)


class Kernel:
    """The rules resctrl applies to each write, on a copy of the state.

    Each method answers like the kernel: None when it accepts the write
    (and the copy changes), else why it refuses (and nothing changes).
    """

    def __init__(self, platform: Platform, current: dict[str, Group]) -> None:
        self.platform = platform
        #: group -> domain -> mask value.
        self.l3 = {n: {d: m.value for d, m in g.l3.items()}
                   for n, g in current.items()}
        self.modes = {n: g.mode for n, g in current.items()}

    def overlap(self, name: str, domain: int, value: int,
                exclusive_only: bool) -> str | None:
        """What ``value`` on ``domain`` would collide with, or None."""
        if not exclusive_only and value & self.platform.hw_shared(domain):
            return self.platform.hw_shared_source(domain)
        for other, masks in self.l3.items():
            mode = self.modes[other]
            if other == name or mode == 'pseudo-locksetup':
                continue
            if value & masks.get(domain, 0) and (
                    not exclusive_only or mode in UNSHAREABLE):
                return 'group %s (%s, %x)' % (other or '/', mode,
                                              masks.get(domain, 0))
        return None

    def write(self, name: str, masks: dict[int, CBM]) -> str | None:
        """A schemata write of ``masks`` to group ``name``."""
        exclusive = self.modes.get(name) in UNSHAREABLE
        for domain, mask in sorted(masks.items()):
            hit = self.overlap(name, domain, mask.value, not exclusive)
            if hit is not None:
                return ('L3 %s on domain %d would overlap %s'
                        % (mask, domain, hit))
        self.l3[name].update({d: m.value for d, m in masks.items()})
        return None

    def set_mode(self, name: str, mode: str) -> str | None:
        """A write of ``mode`` to group ``name``."""
        if mode == MODE_EXCLUSIVE:
            for domain, value in sorted(self.l3[name].items()):
                hit = self.overlap(name, domain, value, False)
                if hit is not None:
                    return ('its L3 %x on domain %d overlaps %s'
                            % (value, domain, hit))
        self.modes[name] = mode
        return None

    def closids_left(self) -> int:
        """How many more groups mkdir would create (one CLOSID each)."""
        return self.platform.num_closids - len(self.l3)

    def mkdir_fits(self) -> int | None:
        """The first domain where a new group would get "No space" (with
        the lowest run: a kernel that keeps sparse masks whole gives more).
        """
        plat = self.platform
        for domain in plat.domains:
            new = new_group_mask(plat, domain, [
                (self.modes[n], m.get(domain, 0)) for n, m in self.l3.items()])
            if bin(new).count('1') < plat.min_cbm_bits:
                return domain
        return None

    def mkdir(self, name: str) -> None:
        self.l3[name] = {}
        self.modes[name] = MODE_SHAREABLE

    def rmdir(self, name: str) -> None:
        del self.l3[name]
        del self.modes[name]
