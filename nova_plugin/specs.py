"""The ``rdt:`` flavor extra specs: names, bounds and parsing.

Pure (no nova, no oslo): shared by the scheduler filter and the API
validators, and kept to the rules the libvirt hook applies on the node
(``libvirt_hooks.domain.spec_from_pairs``): unknown ``rdt:`` keys are
errors, ``rdt:l3_ways`` and ``rdt:pool`` exclude each other, and
``rdt:mb_percent`` only goes with ``rdt:l3_ways``.
"""
from __future__ import annotations

import re
from typing import Mapping, NamedTuple

from ovs_rdt.exceptions import AnnotationError

PREFIX = 'rdt:'
L3_WAYS = 'rdt:l3_ways'
POOL = 'rdt:pool'
MB_PERCENT = 'rdt:mb_percent'
KEYS = (L3_WAYS, POOL, MB_PERCENT)

L3_WAYS_MIN = 1
L3_WAYS_MAX = 64
MB_PERCENT_MIN = 1
MB_PERCENT_MAX = 100
#: A pool name: what ``[pool:NAME]`` and ``ovsrdt-pool-NAME`` can hold.
POOL_PATTERN = r'[A-Za-z0-9][A-Za-z0-9_.-]{0,63}'


class RDTSpec(NamedTuple):
    """What a flavor asks for; at most one of l3_ways and pool is set."""

    l3_ways: int | None = None
    pool: str | None = None
    mb_percent: int | None = None


def _int(key: str, raw: str, low: int, high: int) -> int:
    text = str(raw).strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise AnnotationError('extra spec %s=%r: not a whole number from %d '
                              'to %d' % (key, raw, low, high))
    value = int(text)
    if not low <= value <= high:
        raise AnnotationError('extra spec %s=%r: must be from %d to %d'
                              % (key, raw, low, high))
    return value


def _pool(raw: str) -> str:
    name = str(raw).strip()
    if not re.fullmatch(POOL_PATTERN, name):
        raise AnnotationError('extra spec %s=%r: not a pool name (%s)'
                              % (POOL, raw, POOL_PATTERN))
    return name


def parse(extra_specs: Mapping[str, str] | None,
          strict: bool = True) -> RDTSpec | None:
    """The ``rdt:`` part of ``extra_specs``; None when there is none.

    Raises :class:`AnnotationError` naming the key and value at fault.
    ``strict=False`` ignores unknown ``rdt:`` keys instead of refusing them.
    """
    if not extra_specs:
        return None
    found = [k for k in extra_specs if k.startswith(PREFIX)]
    if not found:
        return None
    l3_ways = pool = mb = None
    for key in found:
        raw = extra_specs[key]
        if key == L3_WAYS:
            l3_ways = _int(key, raw, L3_WAYS_MIN, L3_WAYS_MAX)
        elif key == POOL:
            pool = _pool(raw)
        elif key == MB_PERCENT:
            mb = _int(key, raw, MB_PERCENT_MIN, MB_PERCENT_MAX)
        elif strict:
            raise AnnotationError('extra spec %s: unknown ovs-rdt key (known: '
                                  '%s)' % (key, ', '.join(KEYS)))
    if l3_ways is not None and pool is not None:
        raise AnnotationError('extra specs %s and %s exclude each other: ask '
                              'for a dedicated CLOS or a shared pool, not both'
                              % (L3_WAYS, POOL))
    if mb is not None and l3_ways is None:
        raise AnnotationError('extra spec %s needs %s too: a bandwidth cap '
                              'applies to a dedicated CLOS' % (MB_PERCENT,
                                                               L3_WAYS))
    return RDTSpec(l3_ways, pool, mb)
