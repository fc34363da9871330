"""The rule for every kind of value an operator gives, in one place each.

=================  ===================================================
module             holds the rule for
=================  ===================================================
``integers``       whole numbers (ASCII digits only) and percentages
``names``          pool names
``uuids``          UUIDs (domain UUIDs, QEMU's ``-uuid``, group names)
``masks``          hex masks: CBMs, per-domain ``0=7f0;1=3f``, CPU masks
``cpulists``       CPU lists: libvirt's cpuset syntax, the kernel's lists
``request``        what a VM or OvS asks for: L3 ways, pool, MB percent
=================  ===================================================

Every surface calls these: the libvirt hook's domain reader, the agent's
OvS knobs, the Nova extra-spec validators and scheduler filter, and the
configuration.  So a value is accepted or refused the same everywhere, with
one message shape, ``FIELD: 'VALUE' why`` (:func:`refuse`), FIELD being how
that surface names it: ``rdt:l3_ways: '٣' is not a whole number``,
``other_config:rdt-pmd-l3-ways: '٣' is not a whole number``.

Pure and light: the libvirt hook imports them at every VM start, so they
import no typing, re or logging.  (The resctrl emulator keeps its own,
kernel-strict parsers: it emulates the kernel, not ovs-rdt.)
"""
from __future__ import annotations

from ovs_rdt.exceptions import InvalidValue


def show(value: str, limit: int = 48, quote: str = '"') -> str:
    """``value`` fit for a one-line message: escaped and bounded.

    Backslashes, ``quote`` and unprintable characters are escaped, so the
    text can stand between two ``quote`` characters.
    """
    out = []
    for char in value[:limit]:
        if char == quote or char == '\\':
            out.append('\\' + char)
        elif char.isprintable():
            out.append(char)
        else:
            code = ord(char)
            out.append('\\x%02x' % code if code < 0x100 else
                       '\\u%04x' % code if code < 0x10000 else
                       '\\U%08x' % code)
    return ''.join(out) + ('...' if len(value) > limit else '')


def quote(value: str, limit: int = 48) -> str:
    """``'value'``, escaped and bounded (:func:`show`)."""
    return "'" + show(value, limit, "'") + "'"


def refuse(field: str, value: str, why: str,
           error: type[InvalidValue] = InvalidValue) -> InvalidValue:
    """The error for ``value`` of ``field``: ``FIELD: 'VALUE' why``."""
    return error('%s: %s %s' % (field, quote(value), why))
