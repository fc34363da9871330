"""Hostile input through the public entry points, with Hypothesis.

Structure-aware strategies build the inputs an attacker or a foreign tool
could hand us (domain XML with nested, rebound and look-alike annotations,
DTDs and entities; OvS ``other_config`` knobs; flavor extra specs; config
files; the resctrl files a foreign tool's groups show).  The property is
always the same: the entry point either returns a value that satisfies its
contract or raises the project's own error with one printable line naming
the field; nothing else escapes, nothing hangs (Hypothesis' deadline), and
names from the input never reach a message unescaped.

The budget is the profile the conftest loads (``ci``: fixed and
derandomized; ``long``: ``tox -e stress``).
"""
from __future__ import annotations

import os
import re
import tempfile
from typing import Any, Callable
import uuid as uuidlib

from hypothesis import given, strategies as st

from ovs_rdt.agent import knobs
from ovs_rdt import conf, MAX_WAYS
from ovs_rdt import domain_xml as domain
from ovs_rdt.emulator.kparse import bitmap_list_string
from ovs_rdt.exceptions import RDTError
from ovs_rdt.inputs import cpulists, request
from ovs_rdt.manager import CacheManager
from ovs_rdt.resctrl import Resctrl
from tests.stress import figures
from tests.unit.fakes import make_tree

MAX_MESSAGE = 4096
UUID_RE = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-'
                     r'[0-9a-f]{12}\Z')


def one_line(exc: BaseException) -> str:
    """The message of a rejection: one printable, bounded line."""
    text = str(exc)
    assert text, 'empty message from %r' % type(exc)
    assert len(text) <= MAX_MESSAGE, 'message of %d characters' % len(text)
    assert text.isprintable(), 'unprintable character in %r' % text
    return text


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
    """(True, value) or, for a rejection (checked: one line), (False, None)."""
    try:
        return True, fn(*args)
    except RDTError as exc:
        one_line(exc)
        return False, None


def tried() -> None:
    figures.add('fuzz cases tried')


# -- strategies ---------------------------------------------------------------
# Characters that look like ours but are not: fullwidth and Arabic-Indic
# digits, a Cyrillic "r", zero-width and bidi controls, NUL-like controls.
LOOKALIKES = '0123456789１２３٣۳߃०rрdԁt\u200b\u200e\u202e\ufeff\x00\x01\x1b\n\r\t -_.:/\\"\'&<>'
hostile_text = st.one_of(
    st.text(alphabet=LOOKALIKES, max_size=20),
    st.text(max_size=30),
    st.sampled_from(['', ' ', '0', '1', '3', '64', '65', '-1', '+3', '0x3',
                     '3 ', ' 3', '1_0', '9' * 30, '1e3', 'nan', 'noisy',
                     ' noisy ', 'pool:noisy', 'pool:', 'pmd', 'default',
                     '../../etc', 'a/b', '..']),
    st.integers(min_value=-10, max_value=10 ** 12).map(str),
)
xml_text = hostile_text.map(lambda s: ''.join(
    c for c in s if c in '\t\n\r' or (ord(c) >= 0x20 and c not in '\ufffe\uffff'
                                      and not 0xd800 <= ord(c) < 0xe000)))


def esc(text: str, quote: bool = True) -> str:
    text = text.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')
    return text.replace('"', '&quot;') if quote else text


prefixes = st.sampled_from(['rdt', 'r', 'nova', 'a', 'xml', 'xmlns', ''])
namespaces = st.sampled_from([domain.RDT_NS, domain.RDT_NS + ' ',
                              domain.RDT_NS.upper(), 'urn:ovs-rdt:libvirt:2',
                              'urn:οvs-rdt:libvirt:1', domain.NOVA_NS,
                              domain.NOVA_NS_OLD, ''])


@st.composite
def annotation(draw: st.DrawFn) -> str:
    prefix = draw(prefixes)
    ns = draw(namespaces)
    q = (prefix + ':') if prefix else ''
    decl = (' xmlns:%s="%s"' % (prefix, esc(ns)) if prefix
            else ' xmlns="%s"' % esc(ns))
    if draw(st.booleans()):
        decl = ''                       # unbound prefix
    children = []
    for _ in range(draw(st.integers(0, 4))):
        local = draw(st.sampled_from(['l3', 'pool', 'mb', 'rdt', 'L3',
                                      'l３', 'x']))
        attr = draw(st.sampled_from(['ways', 'name', 'percent', 'x',
                                     q + 'ways']))
        rebind = draw(st.sampled_from(
            ['', ' xmlns:%s="urn:other"' % (prefix or 'p'),
             ' xmlns="%s"' % esc(draw(namespaces))]))
        children.append('<%s%s %s="%s"%s/>'
                        % (q, local, attr, esc(draw(xml_text)), rebind))
    body = ''.join(children)
    if draw(st.booleans()):
        body += esc(draw(xml_text), quote=False)
    return '<%srdt%s>%s</%srdt>' % (q, decl, body, q)


@st.composite
def nova_metadata(draw: st.DrawFn) -> str:
    ns = draw(st.sampled_from([domain.NOVA_NS, domain.NOVA_NS_OLD]))
    specs_xml = ''.join(
        '<nova:extraSpec name="%s">%s</nova:extraSpec>'
        % (esc(draw(st.sampled_from(['rdt:l3_ways', 'rdt:pool',
                                     'rdt:mb_percent', 'rdt:x', 'hw:cpu',
                                     'rdt:l3_ways']))),
           esc(draw(xml_text), quote=False))
        for _ in range(draw(st.integers(0, 4))))
    return ('<nova:instance xmlns:nova="%s"><nova:flavor name="%s">'
            '<nova:extraSpecs>%s</nova:extraSpecs></nova:flavor>'
            '</nova:instance>' % (ns, esc(draw(xml_text)), specs_xml))


@st.composite
def domain_xml(draw: st.DrawFn) -> bytes:
    name = draw(st.one_of(st.just('vm1'), xml_text))
    uid = draw(st.one_of(st.uuids().map(str),
                         st.uuids().map(lambda u: u.hex.upper()), xml_text))
    meta = ''.join(draw(st.lists(st.one_of(annotation(), nova_metadata()),
                                 max_size=3)))
    depth = draw(st.sampled_from([0, 0, 3, 255, 256, 300]))
    meta += '<a:x xmlns:a="urn:a">' * min(depth, 1) + \
        '<y>' * depth + '</y>' * depth + '</a:x>' * min(depth, 1)
    vcpu_attrs = draw(st.sampled_from(
        ['', ' placement="static"', ' cpuset="0-1"', ' cpuset="^0,0-65535"',
         ' cpuset="%s"' % esc(draw(xml_text))]))
    big = draw(st.sampled_from([0, 0, 70000]))
    if big:
        vcpu_attrs += ' huge="%s"' % ('x' * big)
    cputune = draw(st.sampled_from(
        ['', '<cputune><vcpupin vcpu="0" cpuset="1"/></cputune>',
         '<cputune><cachetune vcpus="0"/></cputune>',
         '<cputune><vcpupin vcpu="%s" cpuset="%s"/></cputune>'
         % (esc(draw(xml_text)), esc(draw(xml_text)))]))
    doc = ("<domain type='kvm'><name>%s</name><uuid>%s</uuid>"
           '<metadata>%s</metadata><vcpu%s>%s</vcpu>%s</domain>'
           % (esc(name, quote=False), esc(uid, quote=False), meta, vcpu_attrs,
              esc(draw(st.sampled_from(['1', '2', '0', '99999', 'x'])),
                  quote=False), cputune))
    head = draw(st.sampled_from(
        ['', '<?xml version="1.0"?>',
         '<!DOCTYPE d [<!ENTITY e "x">]>',
         '<!DOCTYPE d [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]>',
         '<!DOCTYPE d SYSTEM "http://127.0.0.1:1/x.dtd">',
         '<!DOCTYPE d [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>']))
    data = (head + doc).encode('utf-8')
    if draw(st.integers(0, 9)) == 0:        # a blind mutation
        pos = draw(st.integers(0, len(data)))
        data = data[:pos] + draw(st.binary(max_size=8)) + data[pos:]
    return data


SETTINGS = conf.Settings.defaults()


# -- the domain XML the hook reads --------------------------------------------
@given(domain_xml())
def test_domain_xml(data: bytes) -> None:
    tried()
    try:
        dom = domain.parse(data)
    except RDTError as exc:
        one_line(exc)
        return
    # What reaches a path: the canonical UUID (checked on first use),
    # never the name.
    ok, uuid = outcome(lambda: dom.uuid)
    assert not ok or UUID_RE.match(uuid), uuid
    ok, name = outcome(lambda: dom.name)
    assert not ok or ('/' not in name and '\0' not in name), name
    for settings in (None, SETTINGS):
        ok, spec = outcome(domain.resolve, dom, settings)
        if not ok:
            continue
        if spec is not None:
            assert spec.l3_ways is None or 1 <= spec.l3_ways <= MAX_WAYS
            assert spec.pool is None or settings is None or \
                spec.pool in settings.pools
            one_line(Exception(spec.describe()))
        try:
            dom.vcpu_cpus()
            dom.vcpu_count()
        except RDTError as exc:
            one_line(exc)


@given(st.binary(max_size=2000))
def test_domain_xml_blind_bytes(data: bytes) -> None:
    tried()
    try:
        domain.parse(data)
    except RDTError as exc:
        one_line(exc)


# -- the OvS knobs the agent reads -------------------------------------------
@given(st.dictionaries(st.sampled_from(knobs.KEYS + ('other',)),
                       hostile_text, max_size=5),
       st.sets(st.sampled_from(['noisy', 'hp', 'a.b']), max_size=2),
       st.sampled_from([None, 11, 20]), st.booleans())
def test_ovs_knobs(other_config: dict[str, str], pools: set[str],
                   cbm_len: int | None, has_mba: bool) -> None:
    tried()
    try:
        placement = knobs.parse(other_config, pools, cbm_len, has_mba)
    except RDTError as exc:
        one_line(exc)
    else:
        if placement.ways is not None:
            assert placement.ways >= 1
            assert cbm_len is None or placement.ways <= cbm_len
        assert placement.pool is None or placement.pool in pools
        for group in (placement.pmd_group, placement.other_group):
            assert '/' not in group and '..' not in group, group
    cores = knobs.parse_cpu_mask(other_config.get(knobs.KEY_CPU_MASK))
    assert all(c >= 0 for c in cores)


# -- the flavor extra specs (Nova filter, API validators, the hook) ----------
EXTRA_KEYS = tuple(request.EXTRA_SPECS) + (
    'rdt:other', 'hw:x', 'rdt:L3_ways', request.WAYS_SPEC,
    request.CLOSIDS_SPEC, 'resources1:CUSTOM_RDT_L3_WAY',
    'resources:CUSTOM_RDT_X')


@given(st.dictionaries(st.sampled_from(EXTRA_KEYS),
                       st.one_of(hostile_text, st.sampled_from(
                           ['0', '1', '3', '12'])), max_size=4))
def test_extra_specs(extra: dict[str, str]) -> None:
    tried()
    ok, spec = outcome(request.from_extra_specs, extra)
    if ok and spec is not None:
        assert not (spec.l3_ways and spec.pool)
        assert not (spec.l3_kib and (spec.pool or spec.l3_ways))
        # the count written once: resources' when given, then alone
        if spec.l3_total is not None:
            assert spec.l3_total >= 1 and extra[request.CLOSIDS_SPEC] \
                .lstrip('0') == '1'
            assert spec.l3_ways is None and spec.l3_kib is None
        assert spec.pool is None or re.fullmatch(r'[A-Za-z0-9][A-Za-z0-9_.-]*',
                                                 spec.pool), spec.pool


# -- the configuration file ---------------------------------------------------
OPTION_NAMES = sorted({o.name for opts in conf.SPEC.values() for o in opts})
SECTIONS = sorted(s for s in conf.SPEC if s != 'pool') + [
    'pool:noisy', 'pool:', 'pool:a/b', 'flavors', 'nova', ' resctrl ',
    'DEFAULT']


@st.composite
def ini_text(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        lines.append('[%s]' % draw(st.sampled_from(SECTIONS)))
        for _ in range(draw(st.integers(0, 4))):
            key = draw(st.one_of(st.sampled_from(OPTION_NAMES), hostile_text))
            sep = draw(st.sampled_from([' = ', '=', ': ', ' ']))
            value = draw(hostile_text)
            if draw(st.booleans()):
                value = draw(st.sampled_from(['"%s"', "'%s", '%s\n  more',
                                              '%s,%s'])).replace(
                                                  '%s', value, 1)
            lines.append(key + sep + value)
        if draw(st.booleans()):
            lines.append(draw(st.sampled_from(['# c', '; c', '[', '[]', ' x',
                                               'x', '\x00', '\ufeff[DEFAULT]'])))
    return '\n'.join(lines)


@given(ini_text())
def test_config_file(text: str) -> None:
    tried()
    try:
        conf.parse_ini(text, 'fuzz.conf')
    except RDTError as exc:
        one_line(exc)
    with tempfile.NamedTemporaryFile('w', suffix='.conf', encoding='utf-8',
                                     errors='surrogatepass') as fh:
        fh.write(text)
        fh.flush()
        try:
            settings = conf.load_files([fh.name])
        except RDTError as exc:
            one_line(exc)
            return
    assert set(settings.pools) <= set(settings.allocation.pools)


# -- the resctrl files a foreign tool's groups show ---------------------------------
@st.composite
def odd_schemata(draw: st.DrawFn) -> str:
    """What the kernel shows for a foreign group, in odd but real forms.

    The kernel prints schemata itself (a tool cannot make it show garbage),
    so the odd forms are the ones other platforms and modes print: CDP's
    L3CODE/L3DATA, MB in MBps (``mba_MBps``), SMBA, L2 lines, masks that
    overlap ours or are not contiguous (sparse_masks platforms).
    """
    width = 11
    lines = []
    l3 = {d: draw(st.integers(1, (1 << width) - 1)) for d in (0, 1)}
    style = draw(st.sampled_from(['plain', 'cdp', 'padded', 'upper']))
    if style == 'cdp':
        lines += ['L3CODE:' + ';'.join('%d=%x' % kv for kv in l3.items()),
                  'L3DATA:' + ';'.join('%d=%x' % kv for kv in l3.items())]
    elif style == 'padded':
        lines.append('    L3:' + ';'.join('%d=%5x' % kv for kv in l3.items()))
    elif style == 'upper':
        lines.append('L3:' + ';'.join('%d=%X' % kv for kv in l3.items()))
    else:
        lines.append('L3:' + ';'.join('%d=%x' % kv for kv in l3.items()))
    if draw(st.booleans()):
        lines.append('MB:' + ';'.join('%d=%s' % (d, draw(st.sampled_from(
            ['100', '10', '4294967295', '0']))) for d in (0, 1)))
    if draw(st.booleans()):
        lines.append(draw(st.sampled_from(['SMBA:0=100', 'L2:0=ff;1=ff',
                                           'L2CODE:0=f', ''])))
    return '\n'.join(lines) + '\n'


@given(odd_schemata(), st.sampled_from(['shareable', 'exclusive',
                                        'pseudo-locked', 'pseudo-locksetup',
                                        '']),
       st.sampled_from(['COS1', 'ovsrdt-vm-' + str(uuidlib.UUID(int=1)),
                        'ovsrdt-pool-noisy', 'libvirt-x-l3']),
       st.sampled_from(['1 2 3\n', '', 'x\n']))
def test_foreign_group_files(schemata: str, mode: str, name: str,
                             tasks: str) -> None:
    tried()
    with tempfile.TemporaryDirectory() as root:
        make_tree(root)
        group = os.path.join(root, name)
        os.mkdir(group)
        for fname, text in (('schemata', schemata), ('mode', mode + '\n'),
                            ('tasks', tasks), ('cpus_list', '\n')):
            with open(os.path.join(group, fname), 'w') as fh:
                fh.write(text)
        rc = Resctrl(root, os.path.join(root, 'nosysfs'))
        try:
            plan = CacheManager(rc, SETTINGS).preview()
        except RDTError as exc:
            one_line(exc)
            return
        for dom, free in plan.free.items():
            assert 0 <= free <= 11, (dom, free)


@given(st.sets(st.integers(0, 4095), max_size=64))
def test_cpu_lists_we_read(cpus: set[int]) -> None:
    """The kernel's %*pbl lists (cpus_list, shared_cpu_list) read back."""
    tried()
    text = bitmap_list_string(cpus) + '\n'
    assert cpulists.parse(text, 'cpus_list') == cpus
    assert cpulists.parse(cpulists.to_text(cpus), 'cpus_list') == cpus
