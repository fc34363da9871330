"""Sizing from measured footprints (the application note's Table 3 -> 4).

``ovs-rdt profile`` samples every group's ``llc_occupancy``; this module
turns the samples into a plan: the peak footprint per group and cache
domain, the ways that hold it (``ceil(peak / way size)``) and the
configuration or annotation lines to paste.  Pure: no I/O.
"""
from __future__ import annotations

from ovs_rdt.core.ways import ways_for_bytes
from ovs_rdt.core.model import PMD_GROUP, ROOT, label_of, vm_uuid
from ovs_rdt.exceptions import count
from ovs_rdt import POOL_GROUP_PREFIX

#: A peak within this share of the group's current allocation filled it:
#: the footprint may be larger than what the allocation let it show.
FILLED = 0.9


def ways_for(peak: int, way_bytes: int) -> int:
    """The ways that hold ``peak`` bytes (:func:`ways.ways_for_bytes`)."""
    return ways_for_bytes(peak, way_bytes)


class Peaks:
    """Peak occupancy per group and domain, and of all groups together."""

    def __init__(self) -> None:
        self.samples = 0
        #: group -> domain -> peak bytes
        self.peak: dict[str, dict[int, int]] = {}
        #: domain -> peak of the sum over the groups at one sample
        self.together: dict[int, int] = {}

    def add(self, occupancy: dict[str, dict[int, int]]) -> None:
        """One sample: group -> domain -> llc_occupancy bytes."""
        self.samples += 1
        sums: dict[int, int] = {}
        for group, doms in occupancy.items():
            mine = self.peak.setdefault(group, {})
            for dom, value in doms.items():
                mine[dom] = max(mine.get(dom, 0), value)
                sums[dom] = sums.get(dom, 0) + value
        for dom, value in sums.items():
            self.together[dom] = max(self.together.get(dom, 0), value)


def paste(group: str, ways: int) -> list[str]:
    """What to write so that ``group`` gets ``ways`` ways."""
    if group == ROOT:
        return ['[allocation]', 'system_min_ways = %d' % ways]
    if group.startswith(POOL_GROUP_PREFIX):
        return ['[pool:%s]' % group[len(POOL_GROUP_PREFIX):], 'l3_ways = %d' % ways]
    if group == PMD_GROUP:
        return ['ovs-vsctl set Open_vSwitch . '
                'other_config:rdt-pmd-l3-ways=%d' % ways]
    if vm_uuid(group):
        return ['<rdt:l3 ways="%d"/>    (domain XML, in <rdt:rdt>)' % ways,
                'rdt:l3_ways=%d    (or the flavor extra spec)' % ways]
    return ['# %s is not an ovs-rdt group: %s would hold it'
            % (group, count(ways, 'way'))]


def _domains(peaks: dict[int, int], way_bytes: dict[int, int],
             current: dict[int, int]) -> list[dict]:
    out = []
    for dom in sorted(peaks):
        peak, size = peaks[dom], way_bytes.get(dom, 0)
        row = {'domain': dom, 'peak_bytes': peak,
               'peak_kib': round(peak / 1024, 1),
               'ways': ways_for(peak, size)}
        if dom in current:
            row['current_ways'] = current[dom]
            row['filled'] = bool(current[dom] and size and
                                 peak >= FILLED * current[dom] * size)
        out.append(row)
    return out


def plan(peaks: Peaks, way_bytes: dict[int, int], cbm_len: int,
         min_ways: int = 1, current: dict[str, dict[int, int]] | None = None,
         members: dict[str, list[str]] | None = None,
         together: bool = False) -> dict:
    """The plan as a JSON-ready dict.

    ``current``: the ways each group holds now, per domain (to flag peaks
    that filled them); ``members``: group -> member names; ``together``:
    add the peak of all groups at once (sizing one shared pool).
    """
    current = current or {}
    members = members or {}

    def entry(domains: list[dict], group: str | None) -> dict:
        need = max([d['ways'] for d in domains] + [0])
        ways = min(max(need, min_ways, 1), cbm_len)
        lines = paste(group, ways) if group is not None else \
            ['[pool:NAME]', 'l3_ways = %d' % ways]
        return {'domains': domains, 'ways': need, 'paste': lines,
                'fits': need <= cbm_len,
                'filled': any(d.get('filled') for d in domains)}

    groups = []
    for group in sorted(peaks.peak, key=lambda g: (g != ROOT, g)):
        item = {'group': label_of(group), 'members': members.get(group, [])}
        item.update(entry(_domains(peaks.peak[group], way_bytes,
                                   current.get(group, {})), group))
        groups.append(item)
    out = {'samples': peaks.samples,
           'way_bytes': {str(d): b for d, b in sorted(way_bytes.items())},
           'groups': groups, 'together': None}
    if together:
        shared = entry(_domains(peaks.together, way_bytes, {}), None)
        shared['groups'] = [g['group'] for g in groups]
        out['together'] = shared
    return out


def render(report: dict) -> str:
    """The plan as text: a table, then the lines to paste."""
    sizes = ', '.join('domain %s %d KiB' % (d, b // 1024)
                      for d, b in report['way_bytes'].items())
    lines = ['Peak LLC occupancy over %d samples (one way: %s)'
             % (report['samples'], sizes), '']
    rows = [(g['group'], g) for g in report['groups']]
    if report['together']:
        rows.append(('(together)', report['together']))
    width = max([len(name) for name, _ in rows] + [20])
    lines.append('  %-*s %6s %11s %5s  %s' % (width, 'GROUP', 'DOMAIN',
                                              'PEAK[KiB]', 'WAYS', 'MEMBERS'))
    for name, item in rows:
        who = ' '.join(item.get('members', []))
        for dom in item['domains']:
            note = ''
            if dom.get('filled'):
                note = '  (filled its %s: may need more)' \
                    % count(dom['current_ways'], 'way')
            lines.append(('  %-*s %6d %11.1f %5d  %s%s' % (
                width, name, dom['domain'], dom['peak_kib'], dom['ways'],
                who, note)).rstrip())
    lines.append('')
    lines.append('To paste:')
    for name, item in rows:
        lines.append('')
        ways = count(item['ways'], 'way')
        head = '# %s: its peak needs %s' % (name, ways)
        if name == '(together)':
            head = '# %s sharing one pool: %s' % (', '.join(item['groups']),
                                                  ways)
        if not item['fits']:
            head += ' (more than the cache has: the footprint does not fit)'
        if item['filled']:
            head += '; its peak filled its current ways: profile it with ' \
                'more ways (a shareable mask) to see the whole footprint'
        lines.append(head)
        lines.extend(item['paste'])
    return '\n'.join(lines)
