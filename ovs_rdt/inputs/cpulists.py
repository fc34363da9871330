"""CPU lists: libvirt's cpuset syntax, the kernel's lists, CPU masks.

``0-3,8,^2``: CPU ids and ranges separated by ``,``, ``^`` excluding,
parts applied in order as libvirt's ``virBitmapParse`` does (``^2,0-3``
holds 2).  What the kernel prints (``cpus_list``: ``0-3,8``, empty for no
CPU) is the same syntax without ``^``.  Sets are built as bit masks, so the
cost follows the text, never the CPU ids (``0-65535`` on each of thousands
of ``<vcpupin>``).
"""
from __future__ import annotations

from ovs_rdt.exceptions import quote, refuse
from ovs_rdt.inputs.integers import whole

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Iterable

#: The highest CPU id accepted.
MAX_CPU = 65535


def parse_bits(raw: str, field: str, empty_ok: bool = False) -> int:
    """The CPUs of ``raw`` as a bit mask; errors name ``field``."""
    bits = 0
    for part in raw.split(','):
        part = part.strip()
        if not part:
            continue
        neg = part.startswith('^')
        lo_s, dash, hi_s = (part[1:] if neg else part).partition('-')
        lo = whole(lo_s.strip())
        hi = whole(hi_s.strip()) if dash else lo
        if lo is None or hi is None or hi > MAX_CPU:
            raise refuse(field, raw, 'is not a CPU list: %s is not a CPU id '
                         'or range' % quote(part))
        if hi < lo:
            raise refuse(field, raw, 'is not a CPU list: range %s runs '
                         'backwards' % quote(part))
        mask = ((1 << (hi - lo + 1)) - 1) << lo
        bits = bits & ~mask if neg else bits | mask
    if not bits and not empty_ok:
        raise refuse(field, raw, 'is an empty CPU set')
    return bits


def to_set(bits: int) -> frozenset[int]:
    """The CPU ids of a bit mask."""
    text = bin(bits)[:1:-1]          # bit 0 first, without "0b"
    return frozenset(i for i, c in enumerate(text) if c == '1')


def parse(raw: str, field: str, empty_ok: bool = True) -> frozenset[int]:
    """The CPUs of ``raw`` (``0-3,8``) as a set."""
    return to_set(parse_bits(raw, field, empty_ok))


def from_mask(raw: str, field: str) -> frozenset[int]:
    """The CPUs of a hex CPU mask (``pmd-cpu-mask=0x3``: CPUs 0 and 1)."""
    from ovs_rdt.inputs.masks import parse_hex
    return to_set(parse_hex(raw, field, MAX_CPU + 1))


def to_text(cpus: Iterable[int]) -> str:
    """{0, 1, 2, 3, 8} -> ``0-3,8``, as the kernel prints it."""
    out: list[str] = []
    run: list[int] = []
    for cpu in sorted(set(cpus)) + [-2]:      # -2 ends the last run
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else
                       '%d-%d' % (run[0], run[-1]))
        run = [cpu]
    return ','.join(out)
