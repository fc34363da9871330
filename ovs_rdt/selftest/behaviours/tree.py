"""The tree: info/ files, a group's and a monitor group's files, read-only files."""
from __future__ import annotations

import errno
import os
import stat

from ovs_rdt.core.model import UNIT_MBPS
from ovs_rdt.resctrl.text import parse_domain_values, resource_lines
from ovs_rdt.selftest.behaviours.common import GROUP_FILES, MON_GROUP_FILES
from ovs_rdt.selftest.geometry import Geometry
from ovs_rdt.selftest.node import Mismatch, Node, Skip, expect


def check_info(node: Node, geo: Geometry) -> str:
    """info/ describes every resource of the schemata, and ovs-rdt reads it so."""
    plat = geo.plat
    for res in geo.root:
        expect(res in geo.info, 'schemata has %s but info/ has no %s', res, res)
    for res in geo.info:
        if node.exists('info/%s/num_closids' % res):
            expect(res in geo.root, 'info/%s exists but the schemata has no %s line', res, res)
    expect('last_cmd_status' in geo.info, 'info/last_cmd_status is missing')
    size = sorted(resource_lines(node.read('size')))
    expect(size == sorted(geo.root), 'size has the resources %s, schemata %s',
           size, sorted(geo.root))
    for res in geo.l3:
        files = set(node.listdir('info/' + res))
        want = {'bit_usage', 'cbm_mask', 'min_cbm_bits', 'num_closids', 'shareable_bits'}
        expect(files >= want, 'info/%s lacks %s', res, sorted(want - files))
        usage = parse_domain_values(node.read('info/%s/bit_usage' % res))
        expect(sorted(usage) == geo.ids, 'info/%s/bit_usage has domains %s, schemata %s',
               res, sorted(usage), geo.ids)
        for dom, text in usage.items():
            expect(len(text) == geo.cbm_len and set(text) <= set('0SHXEP'),
                   'info/%s/bit_usage %d=%s: not one of 0SHXEP per way', res, dom, text)
    # ovs-rdt's reader (Resctrl.platform) against the files themselves
    cbm_mask = int(node.read('info/%s/cbm_mask' % geo.l3[0]), 16)
    expect(cbm_mask == geo.full, 'cbm_mask %x is not contiguous from way 0, or ovs-rdt '
           'reads %d ways', cbm_mask, geo.cbm_len)
    closids = {r: int(node.read('info/%s/num_closids' % r)) for r in geo.info
               if node.exists('info/%s/num_closids' % r)}
    for_groups = min(closids.values()) - (plat.io_alloc == 'enabled')
    expect(plat.num_closids == for_groups, 'ovs-rdt counts %d CLOSIDs for groups, the '
           'files say %s (io_alloc %s holds one when enabled)', plat.num_closids, closids,
           plat.io_alloc)
    expect(len(set(closids[r] for r in geo.l3)) == 1,
           'info/L3CODE and info/L3DATA give different num_closids: %s', closids)
    expect(0 <= geo.min_bits <= geo.cbm_len, 'min_cbm_bits %d with %d ways',
           geo.min_bits, geo.cbm_len)
    expect(plat.shareable_bits & ~geo.full == 0, 'shareable_bits %x beyond cbm_mask %x',
           plat.shareable_bits, geo.full)
    for res in ('MB', 'SMBA'):
        if res in geo.root:
            files = set(node.listdir('info/' + res))
            want = {'bandwidth_gran', 'delay_linear', 'min_bandwidth', 'num_closids'}
            expect(files >= want, 'info/%s lacks %s', res, sorted(want - files))
    if geo.mon:
        files = set(node.listdir('info/L3_MON'))
        want = {'max_threshold_occupancy', 'mon_features', 'num_rmids'}
        expect(files >= want, 'info/L3_MON lacks %s', sorted(want - files))
    seen = ('%d ways (cbm_mask %x) x %d domains, %d CLOSIDs, min_cbm_bits %d, '
            'sparse_masks %d%s%s; ovs-rdt reads the same'
            % (geo.cbm_len, geo.full, len(geo.ids), min(closids.values()), geo.min_bits,
               plat.sparse_masks, ', CDP' if plat.cdp else '',
               ', MB in %s' % geo.mb_unit if geo.mb_unit else ''))
    # the domain ids are the CPUs' L3 cache ids (the hook maps vCPUs so)
    caches = sorted(set(node.resctrl.cpus.cpu_domains().values()))
    where = node.resctrl.cpus.cpu_root + '/cpu*/cache/index*/id'
    if not caches:
        raise Skip('not tried: the domains as L3 cache ids (no %s); checked: %s'
                   % (where, seen))
    expect(caches == geo.ids, "the CPUs' L3 cache ids (%s) are %s, the schemata's "
           'domains %s', where, caches, geo.ids)
    return seen + "; the domains are the CPUs' L3 cache ids"


def check_mon_data(node: Node, rel: str, geo: Geometry) -> None:
    """mon_L3_XX per L3 id with the events; under SNC mon_sub_L3_YY, even split."""
    names = node.listdir(rel)
    expect(names == ['mon_L3_%02d' % d for d in geo.ids], '%s lists %s', rel, names)
    subs: list[list[str]] = []
    for dom in geo.ids:
        here = '%s/mon_L3_%02d' % (rel, dom)
        names = node.listdir(here)
        files = [n for n in names if not n.startswith('mon_sub_L3_')]
        expect(set(files) >= set(geo.events), '%s has %s, not the events %s',
               here, files, geo.events)
        subs.append([n for n in names if n.startswith('mon_sub_L3_')])
        for sub in subs[-1]:
            inner = node.listdir('%s/%s' % (here, sub))
            expect(set(inner) >= set(geo.events), '%s/%s has %s', here, sub, inner)
    flat = [s for per in subs for s in per]
    expect(flat == ['mon_sub_L3_%02d' % n for n in range(len(flat))],
           'the SNC nodes of %s are %s, not numbered from 0', rel, flat)
    expect(len({len(per) for per in subs}) == 1 and len(subs[0]) != 1,
           'the SNC nodes of %s are not split evenly between L3 domains: %s', rel, subs)


def check_tree(node: Node, geo: Geometry) -> str:
    """A new group, and a monitor group in it, have the files ovs-rdt uses,
    start shareable and empty: no task, no CPU.
    """
    extra = set()
    if geo.has('mbm_event') or node.exists('mbm_L3_assignments'):
        extra.add('mbm_L3_assignments')
    root = set(node.listdir(''))
    want = set(GROUP_FILES) | {'info'}
    expect(root >= want, 'the root lacks %s', sorted(want - root))
    grp = node.mkdir('tree')
    mon = node.mkmon(grp, 'm')
    want = set(GROUP_FILES) | extra
    if geo.mb_unit == UNIT_MBPS and node.exists('mba_MBps_event'):
        want.add('mba_MBps_event')
    files = set(node.listdir(grp))
    expect(files >= want, 'a new group lacks %s', sorted(want - files))
    files = set(node.listdir(mon))
    want = set(MON_GROUP_FILES) | extra
    expect(files >= want, 'a new monitor group lacks %s', sorted(want - files))
    expect('mba_MBps_event' not in files, 'a monitor group has mba_MBps_event')
    if geo.mon:
        for rel in ('mon_data', grp + '/mon_data', mon + '/mon_data'):
            check_mon_data(node, rel, geo)
    expect(node.read(grp + '/mode') == 'shareable\n', 'a new group is %r, not shareable',
           node.read(grp + '/mode'))
    for rel, what in ((grp, 'a new group'), (mon, 'a new monitor group')):
        # empty: no task, no CPU (an empty mask is all zeros, an empty list '')
        for name, empty in (('tasks', ''), ('cpus_list', '\n'), ('cpus', None)):
            text = node.read('%s/%s' % (rel, name))
            expect(text == empty if empty is not None else not text.strip('0,\n'),
                   '%s has %s %r', what, name, text)
    expect(stat.S_ISDIR(os.stat(node.path(grp + '/mon_groups')).st_mode),
           'mon_groups is not a directory')
    return ('group and monitor group files%s%s; a new group starts shareable, it and '
            'its monitor group with no task and no CPU' % (
                ', mon_data per L3 domain' if geo.mon else '',
                ' with %d SNC nodes each' % geo.snc if geo.snc > 1 else ''))


def check_read_only(node: Node, geo: Geometry) -> str:
    """Read-only files refuse to be opened for writing (EACCES), even by root."""
    grp = node.mkdir('ro')
    mon = node.mkmon(grp, 'm')
    writable, refused = set(), set()
    tops = ['', 'info', grp, mon]
    if geo.mon:
        tops.append('mon_data/mon_L3_%02d' % geo.d0)
    for top in tops:
        for base, dirs, files in os.walk(node.path(top)):
            if top == '':
                dirs[:] = []
            for name in files:
                path = os.path.join(base, name)
                rel = os.path.relpath(path, node.root)
                mode = stat.S_IMODE(os.stat(path).st_mode)
                expect(mode in (0o444, 0o644), '%s has mode %o', rel, mode)
                if mode == 0o644:
                    writable.add(rel)
                    continue
                try:
                    os.close(os.open(path, os.O_WRONLY))
                except OSError as exc:
                    expect(exc.errno == errno.EACCES, 'opening %s to write: %s, expected '
                           'EACCES', rel, os.strerror(exc.errno or 0))
                    refused.add(rel)
                    continue
                raise Mismatch('%s (mode %o) was opened for writing' % (rel, mode))
    want = {'schemata', 'tasks', 'cpus', 'cpus_list', 'mode', grp + '/schemata',
            mon + '/tasks'}
    if geo.mon:
        want.add('info/L3_MON/max_threshold_occupancy')
    expect(writable >= want, 'not writable: %s', sorted(want - writable))
    want = {'size', 'info/last_cmd_status', 'info/%s/cbm_mask' % geo.l3[0], grp + '/size'}
    if geo.mon:
        want |= {'info/L3_MON/num_rmids', 'mon_data/mon_L3_%02d/llc_occupancy' % geo.d0}
    expect(refused >= want, 'not read-only: %s', sorted(want - refused))
    expect(node.status() == 'ok\n', 'opening files changed last_cmd_status to %r',
           node.status())
    return '%d read-only files refuse writers, %d are writable' % (
        len(refused), len(writable))
