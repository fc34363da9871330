"""ovs_rdt.inputs: the rule of each kind of value, on its own.

The same values through every surface (hook, knobs, Nova, config):
tests/unit/test_inputs_surfaces.py and tests/nova/test_inputs_surfaces.py.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.exceptions import quote
from ovs_rdt.inputs import cpulists, integers, masks, names, request
from ovs_rdt.inputs.request import CacheRequest
from ovs_rdt.inputs import uuids


def refused(func, *args) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidValue) as err:
        func(*args)
    msg = str(err.value)
    assert '\n' not in msg
    return msg


# -- the message shape ---------------------------------------------------------
@pytest.mark.parametrize('value, shown', [
    ('3', "'3'"), ("a'b", "'a\\'b'"), ('a\\b', "'a\\\\b'"),
    ('\n', "'\\x0a'"), ('\u0663', "'\u0663'"), ('\u200b', "'\\u200b'"),
    ('x' * 60, "'" + 'x' * 48 + "...'")])
def test_values_are_quoted_escaped_and_bounded(value: str, shown: str) -> None:
    assert quote(value) == shown


# -- whole numbers -------------------------------------------------------------
@pytest.mark.parametrize('text, value', [
    ('0', 0), ('3', 3), ('03', 3), ('0000000003', 3), ('999999999', 999999999)])
def test_whole_numbers(text: str, value: int) -> None:
    assert integers.whole(text) == value
    assert integers.parse(text, 'f') == value


@pytest.mark.parametrize('text', [
    '', ' 3', '3 ', '+3', '-3', '0_3', '\u0663', '\uff13', '3.0', '0x3',
    '1e3', '\u00b2'])
def test_not_whole_numbers(text: str) -> None:
    assert integers.whole(text) is None
    assert refused(integers.parse, text, 'rdt:l3_ways') == \
        'rdt:l3_ways: %s is not a whole number' % quote(text)


def test_huge_numbers_are_out_of_range_never_converted() -> None:
    assert integers.whole('9' * 10) == integers.MAX + 1
    assert integers.whole('1' * 100000) == integers.MAX + 1
    assert refused(integers.parse, '1' * 50, 'f').endswith(
        "...' must be from 0 to 999999999")


def test_ranges_and_percentages() -> None:
    assert refused(integers.parse, '0', 'f', 1, 64) == \
        "f: '0' must be from 1 to 64"
    assert integers.percent('100', 'p') == 100
    assert refused(integers.percent, '101', 'p') == \
        "p: '101' must be from 1 to 100"
    assert refused(integers.percent, '0', 'p') == \
        "p: '0' must be from 1 to 100"


# -- pool names ------------------------------------------------------------------
GOOD_POOLS = ['hp', 'noisy', 'hp.v2_a-1', '0', 'A' * 64]
BAD_POOLS = ['', ' hp', 'hp ', '-hp', '.hp', '..', '_x', 'a/b', '../etc',
             'two words', 'p\u00e9', 'A' * 65, 'a:b']


@pytest.mark.parametrize('name', GOOD_POOLS + BAD_POOLS)
def test_pool_names_and_the_pattern_agree(name: str) -> None:
    ok = names.is_pool_name(name)
    assert ok == (name in GOOD_POOLS)
    assert ok == bool(re.fullmatch(names.POOL_PATTERN, name))
    if not ok:
        assert refused(names.pool_name, name, 'rdt:pool').startswith(
            'rdt:pool: %s is not a pool name (a letter or digit' % quote(name))


# -- UUIDs ---------------------------------------------------------------------
UUID = '0b0580e0-4511-437a-855b-3e988e147bd5'


@pytest.mark.parametrize('text', [UUID, UUID.upper(), UUID.replace('-', ''),
                                  UUID.upper().replace('-', '')])
def test_uuids(text: str) -> None:
    assert uuids.canonical(text) == UUID
    assert uuids.parse(text, 'u') == UUID
    assert uuids.is_canonical(text) == (text == UUID)


@pytest.mark.parametrize('text', ['', '../../etc', UUID + '0', UUID[:-1] + 'g',
                                  ' ' + UUID, UUID.replace('-', '', 1),
                                  '-' * 4 + 'x' * 32])
def test_not_uuids(text: str) -> None:
    assert uuids.canonical(text) is None
    assert refused(uuids.parse, text, '<uuid>') == \
        '<uuid>: %s is not a UUID' % quote(text)


# -- masks ---------------------------------------------------------------------
def test_hex_masks() -> None:
    assert masks.parse_hex('7f0', 'm', 11) == 0x7f0
    assert masks.parse_hex('0x7F0', 'm', 11) == 0x7f0
    assert masks.parse_hex('000000000000000000007ff', 'm', 11) == 0x7ff
    for text in ('', 'zz', '0x', '7g', ' 7f0', '-1'):
        assert refused(masks.parse_hex, text, 'l3_cbm', 11) == \
            'l3_cbm: %s is not a hexadecimal mask' % quote(text)
    assert refused(masks.parse_hex, '800', '[pool:hp] l3_cbm', 11) == \
        "[pool:hp] l3_cbm: '800' has bits beyond the 11-bit mask 7ff"
    assert 'beyond' in refused(masks.parse_hex, 'f' * 100, 'm', 11)


def test_domain_masks() -> None:
    dm = masks.domain_masks
    assert dm('7f0', 'f', (0, 1), 11) == {0: 0x7f0, 1: 0x7f0}
    assert dm('0=7f0;1=3f', 'f', (0, 1), 11) == {0: 0x7f0, 1: 0x3f}
    assert dm(' 0 = 7f0 , 1=3f; ', 'f', (0, 1), 11) == {0: 0x7f0, 1: 0x3f}
    assert refused(dm, '0=7f0;1', 'f', (0, 1), 11) == \
        "f: '0=7f0;1' has '1', which is not DOMAIN=MASK (e.g. 0=7f0)"
    assert refused(dm, 'x=1', 'f', (0, 1), 11).startswith("f: 'x=1' has 'x=1'")
    assert refused(dm, '2=1', 'f', (0, 1), 11) == \
        "f: '2=1' names cache domain 2, which this platform lacks (it has 0, 1)"
    assert refused(dm, '0=1;0=2', 'f', (0, 1), 11) == \
        "f: '0=1;0=2' gives cache domain 0 twice"
    assert refused(dm, '0=1;1=zz', 'f', (0, 1), 11) == \
        "f on domain 1: 'zz' is not a hexadecimal mask"


def test_key_value_lists() -> None:
    from ovs_rdt.inputs import keyvalues
    assert keyvalues.items(' a = 1 ;b=2,, c ') == [
        ('a = 1', 'a', '1'), ('b=2', 'b', '2'), ('c', 'c', None)]
    assert keyvalues.items('') == []


# -- CPU lists -----------------------------------------------------------------
@pytest.mark.parametrize('text, cpus', [
    ('0-3,8', {0, 1, 2, 3, 8}), ('0-3,^1,8', {0, 2, 3, 8}),
    ('^20,0-3,20', {0, 1, 2, 3, 20}), (' 1 , 2 ', {1, 2}), ('0-3\n', {0, 1, 2, 3}),
    ('', set()), ('\n', set()), ('65535', {65535})])
def test_cpu_lists(text: str, cpus: set) -> None:
    assert cpulists.parse(text, 'f') == cpus
    if cpus:
        assert cpulists.parse(cpulists.to_text(cpus), 'f') == cpus


@pytest.mark.parametrize('text, why', [
    ('x', "is not a CPU list: 'x' is not a CPU id or range"),
    ('0-99999999', "is not a CPU list: '0-99999999' is not a CPU id or range"),
    ('65536', 'is not a CPU id or range'),
    ('+1', 'is not a CPU id or range'), ('\u0663', 'is not a CPU id or range'),
    ('3-1', "is not a CPU list: range '3-1' runs backwards"),
    ('1,^1', 'is an empty CPU set')])
def test_bad_cpusets(text: str, why: str) -> None:
    msg = refused(cpulists.parse_bits, text, '<vcpu cpuset>')
    assert msg.startswith('<vcpu cpuset>: %s ' % quote(text)) and why in msg


def test_cpu_list_text() -> None:
    assert cpulists.to_text([8, 0, 1, 2, 3, 5]) == '0-3,5,8'
    assert cpulists.to_text([]) == ''
    assert cpulists.to_text([7]) == '7'


def test_cpu_masks() -> None:
    assert cpulists.from_mask('0x3', 'm') == {0, 1}
    assert cpulists.from_mask('10', 'm') == {4}
    assert cpulists.from_mask('0x0', 'm') == set()
    assert cpulists.from_mask('8' + '0' * 1000, 'm') == {4003}
    assert 'not a hexadecimal mask' in refused(cpulists.from_mask, 'zz', 'm')


# -- the request ---------------------------------------------------------------
def test_no_rdt_keys() -> None:
    assert request.from_extra_specs(None) is None
    assert request.from_extra_specs({}) is None
    assert request.from_extra_specs({'hw:cpu_policy': 'dedicated'}) is None


@pytest.mark.parametrize('extra, expected', [
    ({'rdt:l3_ways': '3'}, CacheRequest(3)),
    ({'rdt:l3_ways': '64', 'rdt:mb_percent': '50'}, CacheRequest(64, None, 50)),
    ({'rdt:pool': 'noisy', 'hw:mem_page_size': 'large'},
     CacheRequest(None, 'noisy')),
    ({'rdt:pool': 'hp.v2_a-1'}, CacheRequest(None, 'hp.v2_a-1')),
])
def test_valid_requests(extra: dict, expected: CacheRequest) -> None:
    assert request.from_extra_specs(extra) == expected


@pytest.mark.parametrize('extra, message', [
    ({'rdt:l3_ways': 'abc'}, "rdt:l3_ways: 'abc' is not a whole number"),
    ({'rdt:l3_ways': '0'}, "rdt:l3_ways: '0' must be from 1 to 64"),
    ({'rdt:l3_ways': '65'}, "rdt:l3_ways: '65' must be from 1 to 64"),
    ({'rdt:mb_percent': '101', 'rdt:l3_ways': '1'},
     "rdt:mb_percent: '101' must be from 1 to 100"),
    ({'rdt:pool': '../etc'}, "rdt:pool: '../etc' is not a pool name"),
    ({'rdt:l3_way': '3'}, 'rdt:l3_way: unknown ovs-rdt key (known: '
                          'rdt:l3_ways, rdt:l3_kib, rdt:pool, rdt:mb_percent, '
                          'rdt:mb_mbps)'),
    # Several faults: the unknown key, then the fields in order.
    ({'rdt:pool': '-', 'rdt:l3_ways': 'x'}, "rdt:l3_ways: 'x'"),
    ({'rdt:zz': '1', 'rdt:l3_ways': 'x'}, 'rdt:zz: unknown'),
    ({'rdt:l3_ways': '3', 'rdt:pool': 'p'},
     'rdt:l3_ways and rdt:pool exclude each other'),
    ({'rdt:mb_percent': '50'}, 'rdt:mb_percent needs rdt:l3_ways too'),
    ({'rdt:pool': 'p', 'rdt:mb_percent': '50'},
     "rdt:mb_percent cannot go with rdt:pool: a pool's memory bandwidth cap "
     'is its [pool:p] mb_percent'),
])
def test_invalid_requests(extra: dict, message: str) -> None:
    assert refused(request.from_extra_specs, extra).startswith(message)


def test_a_size_in_ways_of_the_host() -> None:
    """l3_kib: the fewest ways of the host's size that hold it."""
    labels = {'l3_kib': 'K'}
    req = request.parse({'l3_kib': '7680'}, labels)
    assert request.l3_ways_on(req, 11, 2560 * 1024) == 3     # Gold 6230
    assert request.l3_ways_on(req, 20, 3072 * 1024) == 3     # E7-8890 v4
    assert request.l3_ways_on(req, 12, 1024 * 1024) == 8     # D-1540
    assert request.l3_ways_on(request.parse({'l3_kib': '6145'}, labels), 20,
                              3072 * 1024) == 3
    assert request.l3_ways_on(request.parse({'l3_ways': '5'}, labels), 11,
                              0) == 5
    assert refused(request.l3_ways_on, req, 6, 1024 * 1024) == \
        "K: '7680' is more than this host's L3 cache: 6 ways of 1024 KiB " \
        '(6144 KiB)'
    assert refused(request.l3_ways_on, req, 11, 0) == \
        "K: '7680' cannot be met on this host: the size of its L3 cache is " \
        'unknown (no cache/index3/size in sysfs)'


def test_the_host_checks() -> None:
    req = request.parse({'l3_ways': '12', 'mb_percent': '5'},
                        {'l3_ways': 'W', 'mb_percent': 'M'})
    request.check_host(req, None, None, 1)
    assert refused(request.check_host, req, None, 11, 1) == \
        "W: '12' is more than the 11 ways of this host's L3 cache"
    assert refused(request.check_host, req, None, 20, None) == \
        "M: '5' cannot be met: this host has no memory bandwidth allocation " \
        '(no info/MB in resctrl)'
    assert refused(request.check_host, req, None, 20, 10) == \
        "M: '5' is below this host's minimum memory bandwidth, 10%"
    pool = request.parse({'pool': 'gold'}, {'pool': 'P'})
    assert refused(request.check_host, pool, ['hp'], 11, 1) == \
        "P: 'gold' names no pool configured on this host (configured: hp; " \
        'see [allocation] pools)'
    request.check_host(pool, ['gold'], 11, 1)


def test_describe() -> None:
    assert request.parse({'l3_ways': '2', 'mb_percent': '50'}, {},
                         'X').describe() == \
        '2 L3 ways, memory bandwidth 50% (from X)'
    assert CacheRequest(pool='hp').describe() == 'pool hp'


def test_the_rules_import_nothing_heavy() -> None:
    """The libvirt hook imports them at every VM start."""
    code = ('import sys; import ovs_rdt.inputs.request, ovs_rdt.inputs.masks, '
            'ovs_rdt.inputs.cpulists, ovs_rdt.inputs.uuids; '
            'print(sorted(m for m in sys.modules if m.split(".")[0] in '
            '("typing", "re", "logging", "nova", "oslo_config", "oslo_log", '
            '"configparser")))')
    repo = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    code = 'import sys; sys.path.insert(0, %r); %s' % (repo, code)
    out = subprocess.run([sys.executable, '-I', '-S', '-c', code],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == '[]'
