"""Memory bandwidth allocation: percent, AMD's units, mba_MBps."""
from __future__ import annotations

import errno

from ovs_rdt.core.model import MBA_MAX_MBPS, UNIT_MBPS, UNIT_PERCENT
from ovs_rdt.resctrl.text import resource_lines
from ovs_rdt.selftest.geometry import Geometry
from ovs_rdt.selftest.node import Node, expect

#: The events an mba_MBps group may follow (``mba_MBps_event``).
MBM_EVENTS = ('mbm_local_bytes', 'mbm_total_bytes')


def check_mb(node: Node, geo: Geometry) -> str:
    """MB values: a percentage rounded up to the granularity (Intel), a
    1/8 GB/s count (AMD) or MiB/s under mba_MBps; out of range refused.
    """
    grp = node.mkdir('mb')
    rel = grp + '/schemata'
    d0 = geo.d0
    mb = geo.plat.mb
    assert mb is not None       # the behaviour needs 'mb'
    if mb.unit == UNIT_MBPS:
        want = {d0: '800', geo.dl: '5'} if geo.dl != d0 else {d0: '5'}
        node.accepted(rel, 'MB:%s\n' % ';'.join('%d=%s' % kv for kv in want.items()))
        got = resource_lines(node.read(rel))['MB']
        expect(all(got[d] == v for d, v in want.items()), 'MB in MiB/s reads back %s', got)
        for bad in ('%d' % (MBA_MAX_MBPS + 1), '1k'):
            node.refused(rel, 'MB:%d=%s\n' % (d0, bad), errno.EINVAL,
                         'Invalid MB value %s\n' % bad)
        note = 'MiB/s taken as written, past 32 bits refused'
        if node.exists(grp + '/mba_MBps_event'):
            event = node.read(grp + '/mba_MBps_event').strip()
            expect(event in MBM_EVENTS, 'mba_MBps_event reads %r', event)
            # the other MBM event if the node counts it (else the kernel
            # refuses it: 'Unsupported event id')
            other = [e for e in MBM_EVENTS if e != event and e in geo.events] or [event]
            node.accepted(grp + '/mba_MBps_event', other[0] + '\n')
            expect(node.read(grp + '/mba_MBps_event') == other[0] + '\n',
                   'mba_MBps_event did not change to %s', other[0])
            node.refused(grp + '/mba_MBps_event', 'llc_occupancy\n', errno.EINVAL,
                         "Unsupported event id 'llc_occupancy'\n")
            note += '; mba_MBps_event follows %s on request' % other[0]
        return note
    notes = []
    for res in ('MB', 'SMBA'):
        if res not in geo.root:
            continue
        info = 'info/%s/' % res
        low, gran = int(node.read(info + 'min_bandwidth')), int(node.read(info + 'bandwidth_gran'))
        high = mb.max_value       # 100, or AMD's (SMBA's is MB's, from the same CPUID)
        if res == 'MB' and not mb.delay_linear and mb.unit == UNIT_PERCENT:
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
        shown = resource_lines(node.read(rel))[res][d0]
        rounded = -(-value // gran) * gran
        expect(shown == str(rounded), '%s:%d=%d reads back %s, expected %d (granularity %d)',
               res, d0, value, shown, rounded, gran)
        notes.append('%s in [%d,%d] by %d' % (res, low, high, gran))
    return ', '.join(notes)
