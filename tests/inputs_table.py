"""One table of good and bad values for every surface that takes a request.

A row gives raw values for the request's fields (``l3_ways``, ``pool``,
``mb_percent``, ``mb_mbps``, ``l3_kib``) and what every surface must make
of them: the parsed ``(l3_ways, pool, mb_percent, mb_mbps, l3_kib)``
(:attr:`Row.want`; a row may leave out the trailing Nones), or the one-line
error, written with the
surface's own field names (``{l3_ways}`` is ``<rdt:l3 ways>`` in a domain's
annotation, ``rdt:l3_ways`` for Nova, ``other_config:rdt-pmd-l3-ways`` for
OvS, ``[pool:hp] l3_ways`` in ovs-rdt.conf).  The messages are written out
here, not computed by the code under test.

Used by tests/unit/test_inputs_surfaces.py (the libvirt hook's reader, the
agent's knobs, the configuration) and tests/nova/test_inputs_surfaces.py
(the Nova API validators and the scheduler filter, inside real Nova).
"""
from __future__ import annotations

from typing import NamedTuple

#: Pools configured on the node in every surface's test.
POOLS = ('hp', 'noisy')

NOT_WHOLE = "{l3_ways}: %s is not a whole number"
WAYS_RANGE = "{l3_ways}: %s must be from 1 to 64"
MB_NOT_WHOLE = "{mb_percent}: %s is not a whole number"
MB_RANGE = "{mb_percent}: %s must be from 1 to 100"
NOT_POOL = ('{pool}: %s is not a pool name (a letter or digit, then letters, '
            'digits, "_", "." or "-"; at most 64 characters)')
BOTH = ('{l3_ways} and {pool} exclude each other: ask for a dedicated CLOS or '
        'a shared pool, not both')
MB_ALONE = ('{mb_percent} needs {l3_ways} too: a memory bandwidth cap applies '
            'to a dedicated CLOS')
MB_POOL = ("{mb_percent} cannot go with {pool}: a pool's memory bandwidth cap "
           'is its [pool:%s] mb_percent')
MBPS_NOT_WHOLE = "{mb_mbps}: %s is not a whole number"
MBPS_RANGE = "{mb_mbps}: %s must be from 1 to 999999999"
MBPS_ALONE = ('{mb_mbps} needs {l3_ways} too: a memory bandwidth cap applies '
              'to a dedicated CLOS')
MBPS_POOL = ("{mb_mbps} cannot go with {pool}: a pool's memory bandwidth cap "
             'is its [pool:%s] mb_mbps')
KIB_NOT_WHOLE = "{l3_kib}: %s is not a whole number"
KIB_RANGE = "{l3_kib}: %s must be from 1 to 999999999"
WAYS_KIB = ('{l3_ways} and {l3_kib} exclude each other: ask for a number of '
            'ways or for a size, not both')
KIB_POOL = ('{l3_kib} and {pool} exclude each other: ask for a dedicated CLOS '
            'or a shared pool, not both')
MB_BOTH = ('{mb_percent} and {mb_mbps} exclude each other: a memory bandwidth '
           'cap is a percentage or a bandwidth in MiB/s, as the host takes')


class Row(NamedTuple):
    values: dict[str, str]
    #: The parsed (l3_ways, pool, mb_percent[, mb_mbps[, l3_kib]]), or the
    #: message template.
    expect: tuple | str

    @property
    def ok(self) -> bool:
        return isinstance(self.expect, tuple)

    @property
    def want(self) -> tuple:
        """The parsed ``(l3_ways, pool, mb_percent, mb_mbps, l3_kib)``."""
        assert isinstance(self.expect, tuple)
        return self.expect + (None,) * (5 - len(self.expect))

    def message(self, fields: dict[str, str]) -> str:
        assert isinstance(self.expect, str)
        return self.expect.format(**fields)

    def __repr__(self) -> str:    # the test ids
        return ','.join('%s=%r' % kv for kv in sorted(self.values.items()))


def ways(raw: str, expect: tuple | str) -> Row:
    return Row({'l3_ways': raw}, expect)


def mb(raw: str, expect: tuple | str) -> Row:
    return Row({'l3_ways': '2', 'mb_percent': raw}, expect)


def mbps(raw: str, expect: tuple | str) -> Row:
    return Row({'l3_ways': '2', 'mb_mbps': raw}, expect)


def kib(raw: str, expect: tuple | str) -> Row:
    return Row({'l3_kib': raw}, expect)


def pool(raw: str, expect: tuple | str) -> Row:
    return Row({'pool': raw}, expect)


ROWS = [
    # -- whole numbers: ASCII digits only --------------------------------
    ways('3', (3, None, None)),
    ways('03', (3, None, None)),
    ways('0000000003', (3, None, None)),
    ways('64', (64, None, None)),
    ways('1', (1, None, None)),
    ways('0', WAYS_RANGE % "'0'"),
    ways('65', WAYS_RANGE % "'65'"),
    ways('99999999999', WAYS_RANGE % "'99999999999'"),
    ways('\u0663', NOT_WHOLE % "'\u0663'"),          # Arabic-Indic 3
    ways('\uff13', NOT_WHOLE % "'\uff13'"),          # full-width 3
    ways('+3', NOT_WHOLE % "'+3'"),
    ways('0_3', NOT_WHOLE % "'0_3'"),
    ways(' 3', NOT_WHOLE % "' 3'"),
    ways('3 ', NOT_WHOLE % "'3 '"),
    ways('3\n', NOT_WHOLE % "'3\\x0a'"),
    ways('-1', NOT_WHOLE % "'-1'"),
    ways('3.0', NOT_WHOLE % "'3.0'"),
    ways('0x3', NOT_WHOLE % "'0x3'"),
    ways('abc', NOT_WHOLE % "'abc'"),
    ways('', NOT_WHOLE % "''"),
    ways("3'", NOT_WHOLE % "'3\\''"),
    # -- percentages ----------------------------------------------------
    mb('50', (2, None, 50)),
    mb('100', (2, None, 100)),
    mb('1', (2, None, 1)),
    mb('0', MB_RANGE % "'0'"),
    mb('101', MB_RANGE % "'101'"),
    mb('\u0665\u0660', MB_NOT_WHOLE % "'\u0665\u0660'"),
    mb('+50', MB_NOT_WHOLE % "'+50'"),
    mb('50%', MB_NOT_WHOLE % "'50%'"),
    mb(' 50', MB_NOT_WHOLE % "' 50'"),
    # -- bandwidths in MiB/s (mba_MBps, AMD) ----------------------------
    mbps('2500', (2, None, None, 2500)),
    mbps('1', (2, None, None, 1)),
    mbps('00100', (2, None, None, 100)),
    mbps('999999999', (2, None, None, 999999999)),
    mbps('0', MBPS_RANGE % "'0'"),
    mbps('4294967295', MBPS_RANGE % "'4294967295'"),
    mbps('2.5', MBPS_NOT_WHOLE % "'2.5'"),
    mbps('+100', MBPS_NOT_WHOLE % "'+100'"),
    mbps('100MB', MBPS_NOT_WHOLE % "'100MB'"),
    mbps('\u0661\u0660\u0660', MBPS_NOT_WHOLE % "'\u0661\u0660\u0660'"),
    # -- L3 sizes in KiB (a dedicated CLOS by size) ----------------------
    kib('7680', (None, None, None, None, 7680)),
    kib('1', (None, None, None, None, 1)),
    kib('999999999', (None, None, None, None, 999999999)),
    kib('0', KIB_RANGE % "'0'"),
    kib('1000000000', KIB_RANGE % "'1000000000'"),
    kib('7.5', KIB_NOT_WHOLE % "'7.5'"),
    kib('7680K', KIB_NOT_WHOLE % "'7680K'"),
    kib('+7680', KIB_NOT_WHOLE % "'+7680'"),
    kib('\u0667', KIB_NOT_WHOLE % "'\u0667'"),
    # -- pool names -----------------------------------------------------
    pool('hp', (None, 'hp', None)),
    pool('noisy', (None, 'noisy', None)),
    pool('', NOT_POOL % "''"),
    pool(' hp', NOT_POOL % "' hp'"),
    pool('-hp', NOT_POOL % "'-hp'"),
    pool('.hp', NOT_POOL % "'.hp'"),
    pool('../etc', NOT_POOL % "'../etc'"),
    pool('h p', NOT_POOL % "'h p'"),
    pool('h\u00e9', NOT_POOL % "'h\u00e9'"),
    # -- the request as a whole -----------------------------------------
    Row({'l3_ways': '3', 'pool': 'hp'}, BOTH),
    Row({'l3_ways': '3', 'l3_kib': '7680'}, WAYS_KIB),
    Row({'l3_kib': '7680', 'pool': 'hp'}, KIB_POOL),
    Row({'l3_kib': '5120', 'mb_percent': '50'}, (None, None, 50, None, 5120)),
    Row({'mb_percent': '50'}, MB_ALONE),
    Row({'pool': 'hp', 'mb_percent': '50'}, MB_POOL % 'hp'),
    Row({'mb_mbps': '500'}, MBPS_ALONE),
    Row({'pool': 'hp', 'mb_mbps': '500'}, MBPS_POOL % 'hp'),
    Row({'l3_ways': '2', 'mb_percent': '50', 'mb_mbps': '500'}, MB_BOTH),
    Row({'l3_ways': '2', 'mb_percent': '50', 'mb_mbps': 'x'},
        MBPS_NOT_WHOLE % "'x'"),
    # several faults: the fields in order, then the combination
    Row({'l3_ways': 'x', 'pool': '-'}, NOT_WHOLE % "'x'"),
    Row({'pool': '-', 'mb_percent': 'x'}, NOT_POOL % "'-'"),
    Row({'l3_ways': '3', 'pool': 'hp', 'mb_percent': '0'}, MB_RANGE % "'0'"),
]

#: The rows about one value on its own (Nova's API checks key by key).
ONE_VALUE_ROWS = [row for row in ROWS
                  if len(row.values) == 1
                  and row.expect not in (MB_ALONE, MBPS_ALONE)]
