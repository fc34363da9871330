"""A plan: the target state and the typed steps that reach it (no I/O).

The allocator (:mod:`ovs_rdt.core.allocator`) makes a :class:`Plan`, the
write order (:mod:`ovs_rdt.core.writes`) fills its :class:`Step` list, the
manager applies the steps and, should one fail, undoes the applied ones
from the values each step holds (never by re-reading the text it wrote).
"""
from __future__ import annotations

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.exceptions import count

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Iterator

MKDIR = 'mkdir'
RMDIR = 'rmdir'
SCHEMATA = 'schemata'
MODE = 'mode'
EVENT = 'event'
"""``mba_MBps_event``."""


def domain_text(values: dict[int, CBM] | dict[int, int]) -> str:
    """``0=7f0;1=3f``: per-domain values as schemata writes them, the one
    writer of that form (its reader: :func:`ovs_rdt.resctrl.text.domain_items`).
    """
    return ';'.join('%d=%s' % (d, values[d]) for d in sorted(values))


def mb_line(values: dict[int, int]) -> str:
    return 'MB:' + domain_text(values)


def schemata_line(masks: dict[int, CBM], cdp: bool = False,
                  split: tuple[dict[int, CBM], dict[int, CBM]] | None = None
                  ) -> str:
    """The L3 line; under CDP an ``L3CODE`` and an ``L3DATA`` line, with
    the same masks unless ``split`` gives the two.
    """
    if split is not None:
        return 'L3CODE:%s\nL3DATA:%s' % (domain_text(split[0]), domain_text(split[1]))
    if cdp:
        return 'L3CODE:%s\nL3DATA:%s' % (domain_text(masks), domain_text(masks))
    return 'L3:' + domain_text(masks)


class Step:
    """One write: ``op`` (mkdir, rmdir, schemata, mode, event) on ``group``.

    A schemata write holds its values: ``l3`` (per-domain masks), under
    CDP ``split`` (its own code and data masks, None when both are
    ``l3``), and ``mb`` (per-domain MB values, empty: no MB line).  A mode
    or event write holds ``value``.  :attr:`value` is the text written.
    Iterates as ``(op, group, text)``.
    """

    __slots__ = ('op', 'group', 'l3', 'mb', 'cdp', 'split', '_value')

    def __init__(self, op: str, group: str, value: str = '',
                 l3: dict[int, CBM] | None = None,
                 mb: dict[int, int] | None = None, cdp: bool = False,
                 split: tuple[dict[int, CBM], dict[int, CBM]] | None = None
                 ) -> None:
        self.op = op
        self.group = group
        self._value = value
        self.l3 = l3 or {}
        self.mb = mb or {}
        self.cdp = cdp
        self.split = split

    @classmethod
    def schemata(cls, group: str, l3: dict[int, CBM],
                 mb: dict[int, int] | None = None, cdp: bool = False,
                 split: tuple[dict[int, CBM], dict[int, CBM]] | None = None
                 ) -> 'Step':
        return cls(SCHEMATA, group, l3=dict(l3), mb=dict(mb or {}), cdp=cdp,
                   split=split)

    @property
    def code(self) -> dict[int, CBM]:
        """The ``L3CODE`` masks written (the L3 masks but for a split)."""
        return self.split[0] if self.split is not None else self.l3

    @property
    def data(self) -> dict[int, CBM]:
        """The ``L3DATA`` masks written (the L3 masks but for a split)."""
        return self.split[1] if self.split is not None else self.l3

    @property
    def value(self) -> str:
        """The text written: schemata lines, a mode, an event name."""
        if self.op != SCHEMATA:
            return self._value
        lines = []
        if self.l3 or self.split is not None and any(self.split):
            lines.append(schemata_line(self.l3, self.cdp, self.split))
        if self.mb:
            lines.append(mb_line(self.mb))
        return ''.join(line + '\n' for line in lines)

    def __iter__(self) -> Iterator[str]:
        return iter((self.op, self.group, self.value))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Step, tuple)):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return 'Step(%r, %r, %r)' % tuple(self)

    def __str__(self) -> str:
        """``schemata / L3:0=7f0;1=7f0``: the write on one line (the
        manager's log, ``apply --dry-run``).
        """
        return ' '.join([self.op, self.group or '/'] + self.value.split())


class Move:
    """A group that existed and moves on one domain: it loses ways it had
    room to keep (:func:`ovs_rdt.core.layout.moved`), for ``room`` (the
    other groups new or growing there; none: it grows itself, or fixed
    masks or the default group's floor need its ways).
    """

    __slots__ = ('group', 'domain', 'old', 'new', 'room')

    def __init__(self, group: str, domain: int, old: CBM, new: CBM,
                 room: list[str]) -> None:
        self.group = group
        self.domain = domain
        self.old = old
        self.new = new
        self.room = room

    def __str__(self) -> str:
        if self.room:
            why = 'to make room for ' + ', '.join(self.room)
        elif self.new.count > self.old.count:
            why = 'to grow to %s' % count(self.new.count, 'way')
        else:
            why = ("to make room for fixed masks (l3_cbm, system_l3_cbm, "
                   "other tools' groups) or the default group's floor")
        return 'moves %s on cache domain %d from %s to %s %s' % (
            self.group or 'the default group', self.domain, self.old,
            self.new, why)

    def __repr__(self) -> str:
        return 'Move(%r, %d, %s, %s)' % (self.group, self.domain, self.old,
                                         self.new)


class Plan:
    """The target state and the steps that reach it."""

    def __init__(self) -> None:
        #: group -> domain -> mask, for the root and every group we own.
        self.l3: dict[str, dict[int, CBM]] = {}
        #: group -> domain -> percent, for groups with an MB cap.
        self.mb: dict[str, dict[int, int]] = {}
        self.modes: dict[str, str] = {}
        #: group -> the ``mba_MBps_event`` it asks for (mba_MBps mounts).
        self.events: dict[str, str] = {}
        #: group -> its own code and data masks (CDP; else both are l3's).
        self.split: dict[str, tuple[dict[int, CBM], dict[int, CBM]]] = {}
        self.create: list[str] = []
        self.remove: list[str] = []
        self.steps: list[Step] = []
        #: Groups that existed and move (none when every request fits
        #: where the groups are).
        self.moves: list[Move] = []
        #: domain -> ways a new counted request could still get.
        self.free: dict[int, int] = {}
        #: Why only a removal was planned
        #: (:func:`ovs_rdt.core.allocator.freeing`), else ''.
        self.unplaced = ''
        #: Pools kept as they are though the files size them otherwise
        #: (a plan that is not ``apply``'s never resizes one), in words.
        self.kept: list[str] = []

    def masks_of(self, group: str) -> dict[int, CBM]:
        return self.l3.get(group, {})
