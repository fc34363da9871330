"""Pool names.

What ``[pool:NAME]``, ``rdt:pool``, ``<rdt:pool name>`` and
``other_config:rdt-pmd-pool`` may hold, and so what ``ovsrdt-pool-NAME``
(a resctrl directory) is made of: a letter or digit first (never ``.``,
``..`` or an option-like ``-x``), then letters, digits, ``_``, ``.`` and
``-``; at most 64 characters.
"""
from __future__ import annotations

from ovs_rdt.exceptions import refuse

POOL_NAME_MAX = 64
#: The same rule as a regular expression (Nova's API documents it).
POOL_PATTERN = r'[A-Za-z0-9][A-Za-z0-9_.-]{0,63}'
POOL_RULE = ('a letter or digit, then letters, digits, "_", "." or "-"; at '
             'most %d characters' % POOL_NAME_MAX)

_ALNUM = frozenset('abcdefghijklmnopqrstuvwxyz'
                   'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789')
_CHARS = _ALNUM | frozenset('_.-')


def is_pool_name(text: str) -> bool:
    return (0 < len(text) <= POOL_NAME_MAX and text[0] in _ALNUM
            and set(text) <= _CHARS)


def pool_name(raw: str, field: str) -> str:
    """``raw`` if it is a pool name; errors name ``field``."""
    if not is_pool_name(raw):
        raise refuse(field, raw, 'is not a pool name (%s)' % POOL_RULE)
    return raw
