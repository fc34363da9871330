"""Monitoring: counts under a load, Sub-NUMA sums, assignable counters."""
from __future__ import annotations

import errno
import time

from ovs_rdt.resctrl.text import parse_domain_values, resource_lines
from ovs_rdt.selftest.behaviours.common import (SETTLE, MiB, count_or_none, masks_for,
                                                masks_text, mon_total)
from ovs_rdt.selftest.geometry import Geometry
from ovs_rdt.selftest.node import Node, Skip, expect


def check_mon_data_counts(node: Node, geo: Geometry) -> str:
    """Monitoring files read counts; under a load MBM grows and occupancy
    rises above what the group held idle.
    """
    grp = node.mkdir('mon')
    m = node.mkmon(grp, 'm')
    for rel in (grp, m):
        for dom in geo.ids:
            for event in geo.events:
                path = '%s/mon_data/mon_L3_%02d/%s' % (rel, dom, event)
                count_or_none(node.read(path), path)
    ways = max(geo.min_bits, 1)
    masks = masks_for(node, geo, ways, load=True)
    node.accepted(grp + '/schemata', geo.l3_line(masks))
    occupancy = 'llc_occupancy' in geo.events
    idle = mon_total(node, m, 'llc_occupancy', geo) if occupancy else None
    biggest = max(geo.way_bytes(d) for d in geo.ids) * ways
    load = node.load(min(max(4 * biggest, 64 * MiB), 1024 * MiB))
    node.accepted(grp + '/tasks', '%d\n' % load)
    node.accepted(m + '/tasks', '%d\n' % load)
    notes, untried = ['a memory load in ways %s' % masks_text(masks)], []
    deadline = time.monotonic() + SETTLE
    if 'mbm_total_bytes' in geo.events:
        first = later = mon_total(node, m, 'mbm_total_bytes', geo)
        while first is not None:        # read again at least once, however slow
            time.sleep(0.1)
            later = mon_total(node, m, 'mbm_total_bytes', geo)
            if later is None or later > first or time.monotonic() > deadline:
                break
        if first is None or later is None:
            untried.append('mbm_total_bytes growing (it reads %r)' % node.read(
                '%s/mon_data/mon_L3_%02d/mbm_total_bytes' % (m, geo.d0)).strip())
        else:
            expect(later > first, 'mbm_total_bytes stayed at %d under a memory load',
                   first)
            whole = mon_total(node, grp, 'mbm_total_bytes', geo)
            expect(whole is not None and whole >= later, 'the control group counts %s '
                   'bytes, less than its monitor group\'s %d', whole, later)
            notes.append('mbm_total_bytes grows under load, the control group counts '
                         'its monitor group\'s')
    if occupancy:
        loaded = mon_total(node, m, 'llc_occupancy', geo)
        while idle is not None and loaded is not None and loaded <= idle and \
                time.monotonic() < deadline:
            time.sleep(0.1)
            loaded = mon_total(node, m, 'llc_occupancy', geo)
        if idle is None or loaded is None:
            untried.append('llc_occupancy rising (it reads %r)' % node.read(
                '%s/mon_data/mon_L3_%02d/llc_occupancy' % (m, geo.d0)).strip())
        else:
            expect(loaded > idle, 'llc_occupancy stayed at %d bytes under a memory load '
                   '(%d idle)', loaded, idle)
            notes.append('llc_occupancy %d KiB under load, %d KiB idle' % (
                loaded // 1024, idle // 1024))
    if untried:
        raise Skip('not tried: %s; checked: %s' % (', '.join(untried), ', '.join(notes)))
    return ', '.join(notes)


def check_snc(node: Node, geo: Geometry) -> str:
    """Under SNC each mon_L3_XX count is the sum of its mon_sub_L3_YY."""
    notes = []
    for dom in geo.ids:
        here = 'mon_data/mon_L3_%02d' % dom
        subs = [n for n in node.listdir(here) if n.startswith('mon_sub_L3_')]
        expect(len(subs) == geo.snc, '%s has %d SNC nodes, %s has %d', here, len(subs),
               'mon_data/mon_L3_%02d' % geo.d0, geo.snc)
        for event in ('llc_occupancy',):
            if event not in geo.events:
                continue
            before = count_or_none(node.read('%s/%s' % (here, event)), here)
            parts = [count_or_none(node.read('%s/%s/%s' % (here, s, event)), here)
                     for s in subs]
            after = count_or_none(node.read('%s/%s' % (here, event)), here)
            if before is None or after is None or None in parts:
                continue
            total = sum(p or 0 for p in parts)
            slack = max(before, after) // 20 + 64 * geo.snc
            expect(min(before, after) - slack <= total <= max(before, after) + slack,
                   '%s/%s reads %d..%d, its SNC nodes sum to %d', here, event,
                   before, after, total)
            notes.append(str(total))
    if not notes:
        raise Skip('not tried: the sums (the default group\'s llc_occupancy gives no '
                   'count); checked: %d SNC nodes per L3 domain' % geo.snc)
    return '%d SNC nodes per L3 domain; the default group\'s occupancy is their sum' % (
        geo.snc)


def check_mbm_assign(node: Node, geo: Geometry) -> str:
    """Assignable MBM counters: a group's assignments, 'Unassigned' reads
    and the kernel's refusals, on a group of ours.
    """
    grp = node.mkdir('cntr')
    rel = grp + '/mbm_L3_assignments'
    lines = resource_lines(node.read(rel))
    expect(set(lines) >= {'mbm_total_bytes', 'mbm_local_bytes'} and
           all(sorted(v) == geo.ids and set(v.values()) <= {'e', '_'}
               for v in lines.values()), '%s reads %r', rel, node.read(rel))
    bad = geo.dl + 1
    for data, err, text in (
            ('bogus:%d=e\n' % geo.d0, errno.ENOENT, 'Invalid event bogus\n'),
            ('mbm_total_bytes:%d=e\n' % bad, errno.EINVAL, 'Invalid domain id %d\n' % bad),
            ('mbm_total_bytes:x=e\n', errno.EINVAL, 'Missing domain id\n'),
            ('mbm_total_bytes:%d=q\n' % geo.d0, errno.EINVAL,
             "Assign operation 'mbm_total_bytes:%d=q' failed\n" % geo.d0),
            ('mbm_local_bytes:*\n', errno.EINVAL,
             "Assign operation 'mbm_local_bytes:*=(null)' failed\n"),
            ('mbm_total_bytes:%d=_' % geo.d0, errno.EINVAL,
             'mbm_L3_assignments: Invalid input\n')):
        node.refused(rel, data, err, text)
    avail = 'info/L3_MON/available_mbm_cntrs'
    before = {d: int(v) for d, v in parse_domain_values(node.read(avail)).items()}
    node.accepted(rel, 'mbm_total_bytes:*=_\n')
    after = {d: int(v) for d, v in parse_domain_values(node.read(avail)).items()}
    had = lines['mbm_total_bytes']
    expect(after == {d: before[d] + (had[d] == 'e') for d in before},
           'unassigning freed counters %s -> %s', before, after)
    path = '%s/mon_data/mon_L3_%02d/mbm_total_bytes' % (grp, geo.d0)
    expect(node.read(path) == 'Unassigned\n', '%s reads %r with no counter', path,
           node.read(path))
    if after.get(geo.d0):
        node.accepted(rel, 'mbm_total_bytes:%d=e\n' % geo.d0)
        expect(node.read(path).strip().isdigit(), '%s reads %r with a counter', path,
               node.read(path))
    return 'assignments, Unassigned reads and %d refusals as expected' % 6
