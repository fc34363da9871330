"""The one exception hierarchy of ovs-rdt.

Every error an operator can see derives from :class:`RDTError`; its ``str()``
is a complete, specific, one-line message naming the field and value at fault
(:func:`refuse` and :func:`show` build them).
"""
from __future__ import annotations


class RDTError(Exception):
    """Base class of every ovs-rdt error."""


class ConfigError(RDTError):
    """A configuration value is invalid (names the option and the value)."""


class InvalidValue(RDTError):
    """A value an operator gave is refused by its rule (:mod:`ovs_rdt.inputs`).

    The message has one shape on every surface: ``FIELD: 'VALUE' why``,
    FIELD being how that surface names it (``rdt:l3_ways``, ``<rdt:l3
    ways>``, ``other_config:rdt-pmd-l3-ways``, ``[pool:hp] l3_ways``).
    """


class AnnotationError(InvalidValue):
    """A domain XML annotation, flavor extra spec or OvS knob is invalid."""


class Refusal(RDTError):
    """A guest cannot be placed as it asks: the hook fails its event with
    this message (libvirt shows it).
    """


class ResctrlError(RDTError):
    """A resctrl file operation failed.

    Carries the file, the value written and the kernel's ``last_cmd_status``.
    """

    def __init__(self, path: str, value: str, errno: int | None,
                 status: str | None = None, reason: str | None = None) -> None:
        self.path = path
        self.value = value
        self.errno = errno
        self.status = status
        self.reason = reason
        detail = status or reason or 'unknown error'
        shown = value.strip().replace('\n', '\\n')
        super().__init__('writing %r to %s failed: %s' % (shown, path, detail))


class ResctrlUnavailable(RDTError):
    """resctrl is not mounted at the configured root, or lacks L3 CAT."""


class ProbeUnavailable(RDTError):
    """``ovs-rdt selftest``'s memory probe cannot be built or run here."""


class NotOwnedError(RDTError):
    """An operation would touch a resctrl group ovs-rdt does not own."""


class AllocationError(RDTError):
    """A cache allocation request cannot be met."""


class InsufficientWays(AllocationError):
    """Not enough free cache ways on a cache domain.

    ``group`` asked ``ways`` on ``domain`` (None: not one group's request,
    e.g. the default group's floor); ``io`` and ``blocking`` are what the
    message adds to the count (I/O's ways, another tool's groups in the
    way), for the allocator to word it with its one free count.
    """

    def __init__(self, message: str, group: str | None = None,
                 domain: int | None = None, ways: int = 0, io: str = '',
                 blocking: str = '') -> None:
        super().__init__(message)
        self.group, self.domain, self.ways = group, domain, ways
        self.io, self.blocking = io, blocking


class OutOfClosids(AllocationError):
    """Every CLOSID of the platform is in use."""


class InvalidMask(AllocationError):
    """A capacity bitmask is not valid on this platform."""


# -- one-line messages naming a value --------------------------------------
def describe(exc: BaseException) -> str:
    """One line for an operator: an OSError with its file (``strerror:
    filename``), anything else as it reads.
    """
    if isinstance(exc, OSError) and exc.strerror:
        return '%s: %s' % (exc.strerror, exc.filename) if exc.filename \
            else exc.strerror
    return str(exc)


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
           error: type[RDTError] = InvalidValue) -> RDTError:
    """The error for ``value`` of ``field``: ``FIELD: 'VALUE' why``."""
    return error('%s: %s %s' % (field, quote(value), why))


def count(number: int, noun: str) -> str:
    """``1 way``, ``3 ways``: a number and its noun, agreeing (every
    message that counts something builds it with this).
    """
    return '%d %s%s' % (number, noun, '' if number == 1 else 's')
