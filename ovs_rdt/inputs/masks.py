"""Hexadecimal masks: capacity bitmasks (CBMs) and CPU masks.

A mask is hex digits (either case), ``0x`` optional: ``7f0``, ``0x7F0``.
Configured CBMs (``[pool:NAME] l3_cbm``, ``[allocation] system_l3_cbm``)
are one mask for every cache domain or one per domain, ``0=7f0;1=3f``
(``,`` separates too; spaces around items and ``=`` are fine).
"""
from __future__ import annotations

from ovs_rdt.exceptions import quote, refuse
from ovs_rdt.inputs.integers import whole
from ovs_rdt.inputs import keyvalues

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Iterable

_HEX = frozenset('0123456789abcdefABCDEF')


def parse_hex(raw: str, field: str, width: int = 64) -> int:
    """A mask of at most ``width`` bits; errors name ``field``."""
    text = raw[2:] if raw[:2] in ('0x', '0X') else raw
    if not text or not set(text) <= _HEX:
        raise refuse(field, raw, 'is not a hexadecimal mask')
    digits = text.lstrip('0') or '0'
    value = int(digits, 16) if len(digits) <= (width + 3) // 4 else -1
    if value < 0 or value >> width:
        raise refuse(field, raw, 'has bits beyond the %d-bit mask %x'
                     % (width, (1 << width) - 1) if width <= 64 else
                     'has bits beyond bit %d' % (width - 1))
    return value


def domain_masks(raw: str, field: str, domains: Iterable[int],
                 width: int) -> dict[int, int]:
    """``7f0`` (the same on every one of ``domains``) or ``0=7f0;1=3f``."""
    known = tuple(domains)
    if '=' not in raw:
        mask = parse_hex(raw, field, width)
        return {dom: mask for dom in known}
    out: dict[int, int] = {}
    for item, dom_s, mask_s in keyvalues.items(raw):
        dom = whole(dom_s)
        if mask_s is None or dom is None:
            raise refuse(field, raw, 'has %s, which is not DOMAIN=MASK (e.g. '
                         '0=7f0)' % quote(item))
        if dom not in known:
            raise refuse(field, raw, 'names cache domain %d, which this '
                         'platform lacks (it has %s)'
                         % (dom, ', '.join(map(str, known)) or 'none'))
        if dom in out:
            raise refuse(field, raw, 'gives cache domain %d twice' % dom)
        out[dom] = parse_hex(mask_s, '%s on domain %d' % (field, dom), width)
    return out
