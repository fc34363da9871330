"""The kernel's string parsers and printers, as far as a user can observe.

Line-by-line ports of ``lib/kstrtox.c`` (``kstrtoull``/``kstrtoint``/...),
``lib/bitmap-str.c`` (``bitmap_parse``, ``bitmap_parselist``) and the
``%*pb``/``%*pbl`` printers of ``lib/vsprintf.c``, returning the same errno.
"""
from __future__ import annotations

import errno
import os
from typing import Iterable, Optional


class ParseError(Exception):
    """A kernel parser's negative return value."""

    def __init__(self, err: int) -> None:
        super().__init__(os.strerror(err))
        self.errno = err


_SPACE = frozenset(' \t\n\v\f\r\xa0')
_ULLONG_MAX = (1 << 64) - 1


def strim(text: str) -> str:
    """``strim()``: strip the kernel's isspace() characters on both ends."""
    start, end = 0, len(text)
    while start < end and text[start] in _SPACE:
        start += 1
    while end > start and text[end - 1] in _SPACE:
        end -= 1
    return text[start:end]


def cstr(text: str) -> str:
    """What C string functions see: everything up to the first NUL."""
    nul = text.find('\0')
    return text if nul < 0 else text[:nul]


def _digit(ch: str) -> int:
    if '0' <= ch <= '9':
        return ord(ch) - 48
    low = ch.lower()
    if 'a' <= low <= 'f' and len(low) == 1:
        return ord(low) - 87
    return 99


def _parse_integer(text: str, base: int, pos: int = 0) -> tuple[int, int, bool]:
    """``_parse_integer()``: (value, digits consumed, overflowed)."""
    value, count = 0, 0
    while pos + count < len(text):
        val = _digit(text[pos + count])
        if val >= base:
            break
        value = value * base + val
        count += 1
    return value, count, value > _ULLONG_MAX


def _kstrtoull(text: str, base: int) -> int:
    if base == 0:
        if text[:1] == '0':
            base = 16 if (text[1:2].lower() == 'x' and _digit(text[2:3] or 'z') < 16) else 8
        else:
            base = 10
    if base == 16 and text[:1] == '0' and text[1:2].lower() == 'x':
        text = text[2:]
    value, count, overflow = _parse_integer(text, base)
    if overflow:
        raise ParseError(errno.ERANGE)
    if count == 0:
        raise ParseError(errno.EINVAL)
    rest = text[count:]
    if rest[:1] == '\n':
        rest = rest[1:]
    if rest:
        raise ParseError(errno.EINVAL)
    return value


def kstrtoull(text: str, base: int) -> int:
    if text[:1] == '+':
        text = text[1:]
    return _kstrtoull(text, base)


def kstrtoint(text: str, base: int) -> int:
    if text[:1] == '-':
        value = _kstrtoull(text[1:], base)
        if value > 1 << 63:
            raise ParseError(errno.ERANGE)
        value = -value
    else:
        value = kstrtoull(text, base)
        if value >= 1 << 63:
            raise ParseError(errno.ERANGE)
    if not -(1 << 31) <= value < (1 << 31):
        raise ParseError(errno.ERANGE)
    return value


def kstrtouint(text: str, base: int) -> int:
    value = kstrtoull(text, base)
    if value > 0xffffffff:
        raise ParseError(errno.ERANGE)
    return value


def bitmap_parse(text: str, nbits: int) -> int:
    """``bitmap_parse()`` (the ``cpus`` file): comma-separated 32-bit hex chunks."""
    cut = [i for i in (text.find('\n'), text.find('\0')) if i >= 0]
    s = text[:min(cut)] if cut else text
    end = len(s) - 1
    chunks = (nbits + 31) // 32
    parsed = value = 0

    def boundary(ch: str) -> bool:
        return ch in _SPACE or ch == ','

    while True:
        while end >= 0 and boundary(s[end]):
            end -= 1
        if end < 0:
            break
        if not chunks:
            raise ParseError(errno.EOVERFLOW)
        chunks -= 1
        ret = shift = 0
        while True:
            val = _digit(s[end])
            end -= 1
            if val > 15:
                raise ParseError(errno.EINVAL)
            ret |= val << shift
            if end < 0 or boundary(s[end]):
                break
            shift += 4
            if shift == 32:
                ch = s[end]
                end -= 1
                if _digit(ch) <= 15:
                    raise ParseError(errno.EOVERFLOW)
                break
        value |= ret << (32 * parsed)
        parsed += 1
    if parsed * 32 >= nbits and value >> nbits:
        raise ParseError(errno.EOVERFLOW)
    return value


def bitmap_parselist(text: str, nbits: int) -> int:
    """``bitmap_parselist()`` (the ``cpus_list`` file): ``0-3,8,16-31:2/4,N``."""
    s = cstr(text)
    value = 0
    lastbit = nbits - 1

    def ch(pos: int) -> str:
        return s[pos] if pos < len(s) else '\0'

    def end_of_str(c: str) -> bool:
        return c in ('\0', '\n')

    def end_of_region(c: str) -> bool:
        return c in _SPACE or c == ',' or end_of_str(c)

    def getnum(pos: int) -> tuple[int, int]:
        if ch(pos) == 'N':
            return lastbit, pos + 1
        num, count, overflow = _parse_integer(s, 10, pos)
        if not count:
            raise ParseError(errno.EINVAL)
        if overflow or num > 0xffffffff:
            raise ParseError(errno.EOVERFLOW)
        return num, pos + count

    pos: Optional[int] = 0
    while pos is not None:
        while ch(pos) in _SPACE or ch(pos) == ',':
            pos += 1
        if end_of_str(ch(pos)):
            return value
        if s[pos:pos + 3].lower() == 'all':
            start, end, pos = 0, lastbit, pos + 3
        else:
            start, pos = getnum(pos)
            end = start
            if not end_of_region(ch(pos)):
                if ch(pos) != '-':
                    raise ParseError(errno.EINVAL)
                end, pos = getnum(pos + 1)
        if end_of_region(ch(pos)):
            off = group_len = end + 1
            nxt: Optional[int] = None if end_of_str(ch(pos)) else pos
        else:
            if ch(pos) != ':':
                raise ParseError(errno.EINVAL)
            off, pos = getnum(pos + 1)
            if ch(pos) != '/':
                raise ParseError(errno.EINVAL)
            group_len, nxt = getnum(pos + 1)
        if start > end or group_len == 0 or off > group_len:
            raise ParseError(errno.EINVAL)
        if end >= nbits:
            raise ParseError(errno.ERANGE)
        for first in range(start, end + 1, group_len):
            for bit in range(first, first + min(end - first + 1, off)):
                value |= 1 << bit
        pos = nxt
    return value


def bitmap_string(mask: int, nbits: int) -> str:
    """``%*pb``: 32-bit hex chunks, most significant first, zero padded."""
    chunks = []
    chunksz = nbits % 32 or 32
    index = (nbits + 31) // 32 * 32 - 32
    while index >= 0:
        val = (mask >> index) & ((1 << chunksz) - 1)
        chunks.append('%0*x' % ((chunksz + 3) // 4, val))
        chunksz = 32
        index -= 32
    return ','.join(chunks)


def bitmap_list_string(bits: Iterable[int]) -> str:
    """``%*pbl``: ``0-3,8``."""
    out: list[str] = []
    run: list[int] = []
    for bit in sorted(set(bits)):
        if run and bit == run[-1] + 1:
            run.append(bit)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else '%d-%d' % (run[0], run[-1]))
        run = [bit]
    if run:
        out.append(str(run[0]) if len(run) == 1 else '%d-%d' % (run[0], run[-1]))
    return ','.join(out)


def kstrtobool(text: str) -> bool:
    """``kstrtobool()``: only the first one or two characters count."""
    first = text[:1]
    if first in ('y', 'Y', 't', 'T', '1'):
        return True
    if first in ('n', 'N', 'f', 'F', '0'):
        return False
    if first in ('o', 'O'):
        if text[1:2] in ('n', 'N'):
            return True
        if text[1:2] in ('f', 'F'):
            return False
    raise ParseError(errno.EINVAL)
