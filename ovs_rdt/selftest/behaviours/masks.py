"""Cache masks: schemata writes refused and taken, a new group's masks,
exclusive mode, CDP's code and data, io_alloc's ways.
"""
from __future__ import annotations

import errno
import os

from ovs_rdt.core import kernel
from ovs_rdt.core.model import UNIT_PERCENT
from ovs_rdt.resctrl.text import parse_domain_values, resource_lines
from ovs_rdt.selftest.behaviours.common import masks_for, masks_text, run_in, unshareable, used
from ovs_rdt.selftest.geometry import Geometry, GroupState
from ovs_rdt.selftest.node import Mismatch, Node, Skip, expect


def check_schemata_refused(node: Node, geo: Geometry) -> str:
    """Bad schemata writes fail with EINVAL and the kernel's reason; nothing changes."""
    grp = node.mkdir('bad')
    rel = grp + '/schemata'
    before = node.read(rel)
    res, d0, full = geo.l3[0], geo.d0, geo.full
    fine = masks_for(node, geo, max(geo.min_bits, 1))[d0]       # off exclusive ways
    unknown = 'L2' if 'L2' not in geo.root else 'L9'
    cases = [
        ('%s:%d=%x' % (res, d0, full + 1), 'Mask out of range\n'),
        ('%s:%d=xyz' % (res, d0), 'Non-hex character in the mask xyz\n'),
        (res, "Missing ':'\n"),
        (res + ':', "Missing '%s' value\n" % res),
        ('%s:x=%x' % (res, full), "Missing '=' or non-numeric domain\n"),
        ('%s:%d=%x;%d=%x' % (res, d0, fine, d0, fine), 'Duplicate domain %d\n' % d0),
        ('%s:%d=%x' % (res, geo.dl + 1, full), 'ok\n'),    # unknown domain: no message
        ('%s:0=1' % unknown, "Unknown or unsupported resource name '%s'\n" % unknown),
    ]
    cases += [('%s:0=1' % r, "Unknown or unsupported resource name '%s'\n" % r)
              for r in ('MB', 'SMBA', 'L3') if r not in geo.root]
    if not geo.plat.sparse_masks:
        cases.append(('%s:%d=5' % (res, d0), 'The mask 5 has non-consecutive 1-bits\n'))
    if geo.min_bits == 1:
        cases.append(('%s:%d=0' % (res, d0), 'Mask out of range\n'))
    elif geo.min_bits > 1:
        cases.append(('%s:%d=%x' % (res, d0, (1 << (geo.min_bits - 1)) - 1),
                      'Need at least %d bits in the mask\n' % geo.min_bits))
    for data, text in cases:
        node.refused(rel, data + '\n', errno.EINVAL, text)
    # no trailing newline: EINVAL before the command status is cleared
    node.refused(rel, '%s:%d=xyz\n' % (res, d0), errno.EINVAL,
                 'Non-hex character in the mask xyz\n')
    node.refused(rel, '%s:%d=%x' % (res, d0, full), errno.EINVAL,
                 'Non-hex character in the mask xyz\n')
    # one bad line refuses the whole write
    node.refused(rel, '%s:%d=%x\n%s:0=1\n' % (res, d0, fine, unknown), errno.EINVAL,
                 "Unknown or unsupported resource name '%s'\n" % unknown)
    expect(node.read(rel) == before, 'refused writes changed the schemata from %r to %r',
           before, node.read(rel))
    return '%d bad writes refused with the expected texts' % (len(cases) + 3)


def _not_default(node: Node, geo: Geometry, res: str) -> int | None:
    """A value for bandwidth resource ``res`` other than a new group's (its
    maximum), or None where the kernel takes none (non-linear Intel MB).
    """
    mb = geo.plat.mb
    if mb is None or mb.unit == UNIT_PERCENT and not mb.delay_linear:
        return None
    info = 'info/%s/' % res
    low, gran = int(node.read(info + 'min_bandwidth')), int(node.read(info + 'bandwidth_gran'))
    return max(low, mb.max_value // 2 // gran * gran)


def check_schemata_accepted(node: Node, geo: Geometry) -> str:
    """A write changes only the domains and resources it names; sparse and
    empty masks where the platform allows them; size follows the ways.
    """
    grp = node.mkdir('good')
    rel = grp + '/schemata'
    ways = max(geo.min_bits, 2)
    groups = geo.groups(node, grp)
    first, second = {}, {}
    for dom in geo.ids:
        free = geo.full & ~unshareable(groups, dom)
        first[dom] = run_in(free, ways, geo.cbm_len) or 0
        second[dom] = run_in(free & ~first[dom], ways, geo.cbm_len) or \
            run_in(free, ways + 1, geo.cbm_len) or 0
        if not first[dom] or not second[dom] or first[dom] == geo.full:
            raise Skip('not tried: writes that change what they name only (no two runs of '
                       '%d ways free of exclusive groups on domain %d)' % (ways, dom))
    # every domain of every resource to something a reset would change ...
    want = {res: {d: '%x' % first[d] for d in geo.ids} for res in geo.l3}
    for res in ('MB', 'SMBA'):
        value = _not_default(node, geo, res) if res in geo.root else None
        if value is not None:
            want[res] = {d: '%d' % value for d in geo.ids}
    node.accepted(rel, ''.join('%s:%s\n' % (res, ';'.join('%d=%s' % kv for kv in doms.items()))
                               for res, doms in want.items()))
    _reads(node, rel, want, 'after writing every domain')
    # ... then one domain of one resource
    res = geo.l3[0]
    node.accepted(rel, '%s:%d=%x\n' % (res, geo.dl, second[geo.dl]))
    want[res][geo.dl] = '%x' % second[geo.dl]
    _reads(node, rel, want, 'after writing %s:%d=%x alone' % (res, geo.dl, second[geo.dl]))
    expect(node.status() == 'ok\n', 'an accepted write left last_cmd_status %r',
           node.status())
    kept = sum(len(doms) for doms in want.values()) - 1
    notes = ['one domain written, the other %d domain value%s kept' % (kept, 's' * (kept > 1))
             if kept else 'the only domain of the only resource written (nothing else '
             'a write could change)']
    free = geo.full & ~unshareable(groups, geo.d0)
    if geo.plat.sparse_masks:
        ways = max(geo.min_bits, 1)
        low = run_in(free, ways, geo.cbm_len)
        # a second run one free way above the first: a sparse mask
        high = run_in(free & ~((1 << (low.bit_length() + 1)) - 1), ways, geo.cbm_len) \
            if low else None
        if low and high:
            sparse = low | high
            node.accepted(rel, '%s:%d=%x\n' % (res, geo.d0, sparse))
            want[res][geo.d0] = '%x' % sparse
            notes.append('sparse mask %x taken' % sparse)
    if geo.min_bits == 0:
        node.accepted(rel, '%s:%d=0\n' % (res, geo.d0))
        want[res][geo.d0] = '0'
        notes.append('empty mask taken')
    _reads(node, rel, want, 'at the end')
    # size: bytes per way times the ways; other resources as in schemata
    shown = resource_lines(node.read(rel))
    size = resource_lines(node.read(grp + '/size'))
    for name in geo.l3:
        for dom, text in shown[name].items():
            way = geo.way_bytes(dom)
            if way:
                expect(int(size[name][dom]) == way * bin(int(text, 16)).count('1'),
                       'size %s:%d=%s for mask %s (%d bytes a way)', name, dom,
                       size[name][dom], text, way)
    expect({r: v for r, v in size.items() if r not in geo.l3} ==
           {r: v for r, v in shown.items() if r not in geo.l3},
           'size %r does not repeat the bandwidth values of %r', size, shown)
    return ', '.join(notes) + ', size follows the ways'


def _reads(node: Node, rel: str, want: dict[str, dict[int, str]], when: str) -> None:
    """``rel`` reads ``want`` (its resources at least), else what differs."""
    got = resource_lines(node.read(rel))
    wrong = ['%s:%d=%s (expected %s)' % (res, dom, got.get(res, {}).get(dom), value)
             for res, doms in want.items() for dom, value in doms.items()
             if got.get(res, {}).get(dom) != value]
    expect(not wrong, '%s the schemata reads %s%s', when, ', '.join(wrong[:4]),
           ' and %d more' % (len(wrong) - 4) if len(wrong) > 4 else '')


def check_new_group(node: Node, geo: Geometry) -> str:
    """mkdir gives the masks ovs-rdt predicts: the lowest run of the
    shareable and unused ways, or on sparse-mask platforms all of them, as
    newer kernels give (``ovs_rdt.core.kernel.new_group_masks``); every
    bandwidth at its maximum.
    """
    groups = geo.groups(node)
    grp = node.mkdir('new')
    got = resource_lines(node.read(grp + '/schemata'))
    cut = {d: kernel.new_group_mask(geo.plat, d, _others(groups, d)) for d in geo.ids}
    whole = {d: kernel.new_group_mask(geo.plat, d, _others(groups, d), cut=False)
             for d in geo.ids}
    wants = [cut, whole] if geo.plat.sparse_masks and whole != cut else [cut]
    for res in geo.l3:
        have = {d: int(v, 16) for d, v in got[res].items()}
        expect(have in wants, 'a new group has %s %s, ovs-rdt predicts %s', res,
               masks_text(have), ' or '.join(masks_text(w) for w in wants))
    mb = geo.plat.mb
    for res in ('MB', 'SMBA'):
        if res not in geo.root or mb is None:
            continue
        # the maximum: 100%, U32_MAX MiB/s; AMD's 2048 or, with a wider
        # CPUID width, more (SMBA's is MB's)
        values = set(got[res].values())
        expect(len(values) == 1 and all(v.isdigit() and int(v) >= mb.max_value
                                        for v in values),
               'a new group has %s:%s, not the maximum %d', res,
               ';'.join('%d=%s' % kv for kv in sorted(got[res].items())), mb.max_value)
    return 'L3 %s as ovs-rdt predicts%s' % (
        masks_text(have), ' (the whole sparse set)' if have == whole != cut else '')


def _others(groups: list[GroupState], dom: int) -> list[tuple[str, int]]:
    return [(g.mode, g.l3.get(dom, 0)) for g in groups]


def _no_free(geo: Geometry, groups: list[GroupState], ways: int, dom: int) -> str:
    """Why ``ways`` ways free of every group are not there on ``dom``."""
    if any(not g.name and g.l3.get(dom) == geo.full for g in groups):
        return 'the default group holds every way on domain %d' % dom
    return 'no %d way%s free of every group on domain %d' % (
        ways, 's' if ways > 1 else '', dom)


def check_exclusive(node: Node, geo: Geometry) -> str:
    """Exclusive mode: refused over another group's ways, then kept apart."""
    a = node.mkdir('excl-a')
    ways = max(geo.min_bits, 1)
    groups = geo.groups(node, a)
    notes = []
    # Over a shareable group's ways (the default group's, usually): refused.
    over = {}
    for dom in geo.ids:
        for grp in groups:
            if grp.mode == 'shareable':
                mask = run_in(grp.l3.get(dom, 0) & ~unshareable(groups, dom), ways,
                              geo.cbm_len)
                if mask:
                    over[dom] = mask
                    break
    if len(over) == len(geo.ids):
        node.accepted(a + '/schemata', geo.l3_line(over))
        node.refused(a + '/mode', 'exclusive\n', errno.EINVAL, 'Schemata overlaps\n')
        expect(node.read(a + '/mode') == 'shareable\n', 'a refused mode changed it to %r',
               node.read(a + '/mode'))
        notes.append("refused over shared ways ('Schemata overlaps')")
    node.refused(a + '/mode', 'private\n', errno.EINVAL, 'Unknown or unsupported mode\n')
    notes.append("an unknown mode refused ('Unknown or unsupported mode')")
    # On ways no one uses: exclusive, and every other group kept off them.
    free = {}
    for dom in geo.ids:
        mask = run_in(geo.full & ~used(groups, dom, geo), ways, geo.cbm_len)
        if mask is None:
            raise Skip('not tried: exclusive mode itself (%s); checked: %s' % (
                _no_free(geo, groups, ways, dom), '; '.join(notes)))
        free[dom] = mask
    node.accepted(a + '/schemata', geo.l3_line(free))
    node.accepted(a + '/mode', 'exclusive\n')
    expect(node.read(a + '/mode') == 'exclusive\n', 'mode reads %r after exclusive',
           node.read(a + '/mode'))
    for res in geo.l3:
        usage = parse_domain_values(node.read('info/%s/bit_usage' % res))
        for dom, mask in free.items():
            text = usage[dom]
            marks = {text[geo.cbm_len - 1 - bit] for bit in range(geo.cbm_len)
                     if mask >> bit & 1}
            expect(marks == {'E'}, 'info/%s/bit_usage %d=%s: ways %x of an exclusive '
                   'group are not E', res, dom, text, mask)
    b = node.mkdir('excl-b')
    mine = geo.masks(node.read(b + '/schemata'))
    for dom, mask in free.items():
        expect(not mine.get(dom, 0) & mask, 'a new group got %x on domain %d, over the '
               'exclusive ways %x', mine.get(dom, 0), dom, mask)
    node.refused(b + '/schemata', '%s:%d=%x\n' % (geo.l3[-1], geo.dl, free[geo.dl]),
                 errno.EINVAL, 'Overlaps with exclusive group\n')
    notes.append("exclusive on free ways, marked E, kept off a new group's; 'Overlaps "
                 "with exclusive group' as expected")
    if mine.get(geo.d0):
        node.refused(a + '/schemata', '%s:%d=%x\n' % (geo.l3[0], geo.d0, mine[geo.d0]),
                     errno.EINVAL, 'Overlaps with other group\n')
        notes[-1] += ", and 'Overlaps with other group'"
    else:
        raise Skip("not tried: 'Overlaps with other group' (a new group has no way on "
                   'domain %d); checked: %s' % (geo.d0, '; '.join(notes)))
    node.accepted(a + '/mode', 'shareable\n')
    return '; '.join(notes)


def check_cdp(node: Node, geo: Geometry) -> str:
    """CDP: CODE and DATA masks apart; an exclusive group's DATA ways are
    refused to another group's CODE (the peer type is checked too).
    """
    expect('L3' not in geo.root and 'L3' not in geo.info,
           'an L3 line or info/L3 under CDP')
    grp = node.mkdir('cdp')
    node.refused(grp + '/schemata', 'L3:%d=1\n' % geo.d0, errno.EINVAL,
                 "Unknown or unsupported resource name 'L3'\n")
    ways = max(geo.min_bits, 1)
    groups = geo.groups(node, grp)
    code_mask, data_mask = {}, {}
    for dom in geo.ids:
        free = geo.full & ~used(groups, dom, geo)
        first = run_in(free, ways, geo.cbm_len)
        second = run_in(free & ~(first or 0), ways, geo.cbm_len) if first else None
        if not first or not second:
            node.accepted(grp + '/schemata', 'L3CODE:%d=%x\n' % (
                dom, masks_for(node, geo, ways)[dom]))
            raise Skip('not tried: CODE and DATA apart, the peer rule of exclusive groups '
                       '(%s); checked: no L3 line, L3CODE written alone'
                       % _no_free(geo, groups, 2 * ways, dom))
        code_mask[dom], data_mask[dom] = first, second
    node.accepted(grp + '/schemata', 'L3CODE:%s\nL3DATA:%s\n' % (
        masks_text(code_mask), masks_text(data_mask)))
    got = resource_lines(node.read(grp + '/schemata'))
    expect({d: int(v, 16) for d, v in got['L3CODE'].items()} == code_mask and
           {d: int(v, 16) for d, v in got['L3DATA'].items()} == data_mask,
           'CODE and DATA read back as %s', got)
    node.accepted(grp + '/mode', 'exclusive\n')     # its own CODE and DATA never compared
    other = node.mkdir('cdp-b')
    node.refused(other + '/schemata', 'L3CODE:%d=%x\n' % (geo.d0, data_mask[geo.d0]),
                 errno.EINVAL, 'Overlaps with exclusive group\n')
    node.refused(other + '/schemata', 'L3DATA:%d=%x\n' % (geo.dl, code_mask[geo.dl]),
                 errno.EINVAL, 'Overlaps with exclusive group\n')
    node.accepted(grp + '/mode', 'shareable\n')
    return 'L3 refused; CODE and DATA apart; the peer type counts for exclusive groups'


def check_io_alloc(node: Node, geo: Geometry) -> str:
    """io_alloc: its CBM readable only while enabled; its ways marked H/X."""
    res = geo.l3[0]
    base = 'info/%s/' % res
    if geo.plat.io_alloc == 'disabled':
        try:
            node.read(base + 'io_alloc_cbm')
        except OSError as exc:
            expect(exc.errno == errno.EINVAL, 'reading io_alloc_cbm while disabled: %s',
                   os.strerror(exc.errno or 0))
            said = node.status()
            expect(said == 'io_alloc is not enabled on %s\n' % res,
                   "last_cmd_status %r, expected 'io_alloc is not enabled on %s'", said, res)
            return 'disabled; io_alloc_cbm refused to readers as expected'
        raise Mismatch('io_alloc_cbm reads while io_alloc is disabled')
    expect(sorted(geo.io_cbm) == geo.ids, 'io_alloc_cbm has domains %s, schemata %s',
           sorted(geo.io_cbm), geo.ids)
    for name in geo.l3:
        usage = parse_domain_values(node.read('info/%s/bit_usage' % name))
        for dom, mask in geo.io_cbm.items():
            marks = {usage[dom][geo.cbm_len - 1 - bit] for bit in range(geo.cbm_len)
                     if mask >> bit & 1}
            expect(marks <= {'H', 'X'}, 'info/%s/bit_usage %d=%s: the I/O ways %x are '
                   'not H or X', name, dom, usage[dom], mask)
    return 'enabled on %s; bit_usage marks those ways H/X' % masks_text(geo.io_cbm)
