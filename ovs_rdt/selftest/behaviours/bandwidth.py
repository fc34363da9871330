"""Memory bandwidth allocation: percent, AMD's units, mba_MBps."""
from __future__ import annotations

import errno

from ovs_rdt.selftest.behaviours.common import MBPS_MAX
from ovs_rdt.selftest.geometry import Geometry, parse
from ovs_rdt.selftest.node import Node, expect


def check_mb(node: Node, geo: Geometry) -> str:
    """MB values: a percentage rounded up to the granularity (Intel), a
    1/8 GB/s count (AMD) or MiB/s under mba_MBps; out of range refused.
    """
    grp = node.mkdir('mb')
    rel = grp + '/schemata'
    d0 = geo.d0
    if geo.mb_unit == 'mbps':
        want = {d0: '800', geo.dl: '5'} if geo.dl != d0 else {d0: '5'}
        node.accepted(rel, 'MB:%s\n' % ';'.join('%d=%s' % kv for kv in want.items()))
        got = parse(node.read(rel))['MB']
        expect(all(got[d] == v for d, v in want.items()), 'MB in MiB/s reads back %s', got)
        for bad in ('%d' % (MBPS_MAX + 1), '1k'):
            node.refused(rel, 'MB:%d=%s\n' % (d0, bad), errno.EINVAL,
                         'Invalid MB value %s\n' % bad)
        note = 'MiB/s taken as written, past 32 bits refused'
        if node.exists(grp + '/mba_MBps_event'):
            event = node.read(grp + '/mba_MBps_event').strip()
            expect(event in ('mbm_local_bytes', 'mbm_total_bytes'),
                   'mba_MBps_event reads %r', event)
            node.accepted(grp + '/mba_MBps_event', 'mbm_total_bytes\n')
            expect(node.read(grp + '/mba_MBps_event') == 'mbm_total_bytes\n',
                   'mba_MBps_event did not change')
            node.refused(grp + '/mba_MBps_event', 'llc_occupancy\n', errno.EINVAL,
                         "Unsupported event id 'llc_occupancy'\n")
            note += '; mba_MBps_event follows mbm_total_bytes on request'
        return note
    notes = []
    for res, (low, gran) in sorted(geo.bw.items()):
        high = 100 if geo.mb_unit == 'percent' else \
            max(int(v) for v in geo.root[res].values())
        if res == 'MB' and not geo.delay_linear and geo.mb_unit == 'percent':
            node.refused(rel, 'MB:%d=%d\n' % (d0, high), errno.EINVAL,
                         'No support for non-linear MB domains\n')
            notes.append('non-linear MB refused')
            continue
        node.refused(rel, '%s:%d=%d\n' % (res, d0, high + 1), errno.EINVAL,
                     'MB value %d out of range [%d,%d]\n' % (high + 1, low, high))
        node.refused(rel, '%s:%d=ten\n' % (res, d0), errno.EINVAL,
                     'Invalid MB value ten\n')
        if low > 0:
            node.refused(rel, '%s:%d=%d\n' % (res, d0, low - 1), errno.EINVAL,
                         'MB value %d out of range [%d,%d]\n' % (low - 1, low, high))
        value = low + 1 if gran > 1 else high // 2
        node.accepted(rel, '%s:%d=%d\n' % (res, d0, value))
        shown = parse(node.read(rel))[res][d0]
        rounded = -(-value // gran) * gran
        expect(shown == str(rounded), '%s:%d=%d reads back %s, expected %d (granularity %d)',
               res, d0, value, shown, rounded, gran)
        notes.append('%s in [%d,%d] by %d' % (res, low, high, gran))
    return ', '.join(notes)
