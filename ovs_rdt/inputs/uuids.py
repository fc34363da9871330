"""UUIDs: a domain's ``<uuid>``, QEMU's ``-uuid``, ``ovsrdt-vm-<uuid>``.

Written dashed (``8-4-4-4-12`` hex digits) or as 32 hex digits, in any
case; the canonical form, which group names are built from, is lower-case
and dashed.
"""
from __future__ import annotations

from ovs_rdt.exceptions import refuse

_HEX = frozenset('0123456789abcdef')
_DASHED = [8, 4, 4, 4, 12]


def canonical(text: str) -> str | None:
    """The canonical form of the UUID ``text``, or None if it is not one."""
    low = text.lower()
    if len(low) == 32 and set(low) <= _HEX:
        return '-'.join((low[:8], low[8:12], low[12:16], low[16:20],
                         low[20:]))
    if ([len(part) for part in low.split('-')] == _DASHED
            and set(low.replace('-', '')) <= _HEX):
        return low
    return None


def is_canonical(text: str) -> bool:
    return canonical(text) == text


def parse(raw: str, field: str) -> str:
    """The canonical form of ``raw``; errors name ``field``."""
    uuid = canonical(raw)
    if uuid is None:
        raise refuse(field, raw, 'is not a UUID')
    return uuid
