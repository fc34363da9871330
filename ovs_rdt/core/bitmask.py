"""A capacity bitmask (CBM) type: pure logic, no I/O.

Bit 0 is the lowest cache way.  Masks are formatted the way resctrl prints
them: lower-case hex without ``0x`` (``7f0``).
"""
from __future__ import annotations

from ovs_rdt.exceptions import InvalidMask
from ovs_rdt import MAX_WAYS

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Iterator


class CBM:
    """An immutable capacity bitmask over ``width`` cache ways."""

    __slots__ = ('value', 'width')

    def __init__(self, value: int, width: int) -> None:
        if width <= 0 or width > MAX_WAYS:
            raise InvalidMask('mask width %d out of range 1-%d'
                              % (width, MAX_WAYS))
        if value < 0 or value >> width:
            raise InvalidMask('mask %x has bits beyond the %d-bit capacity mask'
                              % (value, width))
        self.value = value
        self.width = width

    # -- construction -----------------------------------------------------
    @classmethod
    def span(cls, low: int, count: int, width: int) -> 'CBM':
        """``count`` contiguous ways starting at bit ``low``."""
        if count < 0 or low < 0 or low + count > width:
            raise InvalidMask('ways %d-%d are outside a %d-way cache'
                              % (low, low + count - 1, width))
        return cls(((1 << count) - 1) << low, width)

    @classmethod
    def full(cls, width: int) -> 'CBM':
        return cls((1 << width) - 1, width)

    @classmethod
    def empty(cls, width: int) -> 'CBM':
        return cls(0, width)

    # -- queries ----------------------------------------------------------
    @property
    def count(self) -> int:
        """Number of ways set."""
        return bin(self.value).count('1')

    @property
    def low(self) -> int:
        """Lowest set bit, -1 when empty."""
        return (self.value & -self.value).bit_length() - 1

    @property
    def high(self) -> int:
        """Highest set bit, -1 when empty."""
        return self.value.bit_length() - 1

    def is_contiguous(self) -> bool:
        if not self.value:
            return True
        shifted = self.value >> self.low
        return shifted & (shifted + 1) == 0

    def bits(self) -> Iterator[int]:
        v = self.value
        while v:
            low = v & -v
            yield low.bit_length() - 1
            v ^= low

    def runs(self) -> list[tuple[int, int]]:
        """Contiguous runs as ``(low_bit, length)``, lowest first."""
        out: list[tuple[int, int]] = []
        start = -1
        for bit in range(self.width + 1):
            on = bit < self.width and bool(self.value >> bit & 1)
            if on and start < 0:
                start = bit
            elif not on and start >= 0:
                out.append((start, bit - start))
                start = -1
        return out

    def largest_run(self) -> 'CBM':
        """The longest contiguous run (the highest one on a tie)."""
        best = (0, 0)
        for low, length in self.runs():
            if length >= best[1]:
                best = (low, length)
        return CBM.span(best[0], best[1], self.width)

    def overlaps(self, other: 'CBM') -> bool:
        return bool(self.value & other.value)

    # -- algebra ----------------------------------------------------------
    def __or__(self, other: 'CBM') -> 'CBM':
        return CBM(self.value | other.value, max(self.width, other.width))

    def __and__(self, other: 'CBM') -> 'CBM':
        return CBM(self.value & other.value, max(self.width, other.width))

    def __sub__(self, other: 'CBM') -> 'CBM':
        return CBM(self.value & ~other.value, self.width)

    def __invert__(self) -> 'CBM':
        return CBM(~self.value & ((1 << self.width) - 1), self.width)

    def __bool__(self) -> bool:
        return bool(self.value)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, CBM) and self.value == other.value
                and self.width == other.width)

    def __hash__(self) -> int:
        return hash((self.value, self.width))

    def __str__(self) -> str:
        return '%x' % self.value

    def __repr__(self) -> str:
        return 'CBM(0x%x, %d)' % (self.value, self.width)

    def way_map(self, on: str = '#', off: str = '.') -> str:
        """Ways from the highest to bit 0, as the application note's
        Table 4 draws them.
        """
        return ''.join(on if self.value >> b & 1 else off
                       for b in range(self.width - 1, -1, -1))
