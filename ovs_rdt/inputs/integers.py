"""Whole numbers and percentages.

A whole number is written in ASCII digits ``0``-``9`` only, leading zeros
allowed: no sign, no ``_``, no spaces, no other script's digits.  Python's
``int()`` takes ``+3``, ``0_3``, `` 3`` and ``٣``; every surface refusing
them alike is the point of this module.
"""
from __future__ import annotations

from ovs_rdt.exceptions import refuse

#: Significant digits kept; a longer number is out of every range.
MAX_DIGITS = 9
#: The largest whole number accepted anywhere.
MAX = 10 ** MAX_DIGITS - 1


def whole(text: str) -> int | None:
    """The value of ``text`` if it is a whole number, else None.

    More than :data:`MAX_DIGITS` significant digits give ``MAX + 1``
    (out of every range), never a conversion of an arbitrary long text.
    """
    if not (text.isascii() and text.isdigit()):
        return None
    digits = text.lstrip('0')
    if len(digits) > MAX_DIGITS:
        return MAX + 1
    return int(digits) if digits else 0


def parse(raw: str, field: str, low: int = 0, high: int = MAX) -> int:
    """A whole number from ``low`` to ``high``; errors name ``field``."""
    value = whole(raw)
    if value is None:
        raise refuse(field, raw, 'is not a whole number')
    if not low <= value <= high:
        raise refuse(field, raw, 'must be from %d to %d' % (low, high))
    return value


def percent(raw: str, field: str) -> int:
    """A percentage: a whole number from 1 to 100."""
    return parse(raw, field, 1, 100)


def mbps(raw: str, field: str) -> int:
    """A memory bandwidth in MiB/s: a whole number from 1 to :data:`MAX`."""
    return parse(raw, field, 1, MAX)
