"""The node's cache plan as data and as text, in the spirit of seed 000 Table 4.

Pure: takes the platform, the groups and each group's members; no I/O.
"""
from __future__ import annotations

from typing import Callable

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import PMD_GROUP, ROOT, Group, Platform
from ovs_rdt.members import summary

POOL = 'ovsrdt-pool-'
VM = 'ovsrdt-vm-'

COLOURS = ('\033[42m', '\033[44m', '\033[45m', '\033[46m', '\033[43m',
           '\033[41m', '\033[102m', '\033[104m', '\033[105m', '\033[106m')
RESET = '\033[0m'


def kind_of(name: str) -> str:
    if name == ROOT:
        return 'default'
    if name.startswith(POOL):
        return 'pool'
    if name.startswith(VM):
        return 'vm'
    if name == PMD_GROUP:
        return 'ovs-pmd'
    return 'foreign'


def build(platform: Platform, groups: list[Group],
          members: Callable[[Group], list[dict]]) -> dict:
    """The plan as a JSON-ready dict."""
    ordered = sorted(groups, key=lambda g: (g.is_root, g.name))
    member_map = {g.name: ([] if g.is_root else members(g)) for g in ordered}
    domains = []
    for dom in platform.domains:
        way_kib = platform.way_bytes(dom) // 1024
        rows = []
        used = CBM.empty(platform.cbm_len)
        for grp in ordered:
            mask = grp.l3.get(dom)
            if mask is None:
                continue
            if not grp.is_root:
                used |= mask
            rows.append({
                'group': grp.name or '/', 'kind': kind_of(grp.name),
                'mode': grp.mode, 'cbm': str(mask), 'ways': mask.count,
                'kib': mask.count * way_kib, 'map': mask.way_map(),
                'mb_percent': grp.mb.get(dom),
                'cpus': sorted(grp.cpus),
                'tasks': len(grp.tasks),
                'members': member_map[grp.name],
            })
        root = next((g for g in groups if g.is_root), None)
        root_mask = root.l3.get(dom) if root else None
        unused = ~(used | root_mask) if root_mask else ~used
        domains.append({
            'domain': dom, 'ways': platform.cbm_len, 'way_kib': way_kib,
            'size_kib': platform.cache_bytes.get(dom, 0) // 1024,
            'unused_ways': unused.count, 'unused_map': unused.way_map('o'),
            'groups': rows,
        })
    return {
        'platform': {'cbm_len': platform.cbm_len,
                     'cbm_mask': str(platform.full_mask),
                     'min_cbm_bits': platform.min_cbm_bits,
                     'num_closids': platform.num_closids,
                     'closids_used': len(groups),
                     'domains': list(platform.domains),
                     'mba': platform.mb is not None},
        'domains': domains,
    }


def _member_text(row: dict) -> str:
    if row['kind'] == 'default':
        cpus = row['cpus']
        return 'OS and everything else (%d tasks%s)' % (
            row['tasks'], ', CPUs %s' % _cpus(cpus) if cpus else '')
    parts = [summary(m) for m in row['members']]
    if row['cpus']:
        parts.append('cores %s' % _cpus(row['cpus']))
    return '; '.join(parts) or '(no tasks)'


def _cpus(cpus: list[int]) -> str:
    from ovs_rdt.inputs import cpulists
    return cpulists.to_text(cpus)


def render(report: dict, colour: bool = False) -> str:
    """Text tables, one per cache domain, with a way map."""
    lines = []
    plat = report['platform']
    lines.append('Platform: %d-bit CBM %s, %d CLOSIDs (%d in use), MBA %s'
                 % (plat['cbm_len'], plat['cbm_mask'], plat['num_closids'],
                    plat['closids_used'], 'yes' if plat['mba'] else 'no'))
    name_w = max([len(r['group']) for d in report['domains']
                  for r in d['groups']] + [len('default (root)'), 20])
    for dom in report['domains']:
        width = dom['ways']
        lines.append('')
        lines.append('L3 cache domain %d: %d KiB, %d ways of %d KiB'
                     % (dom['domain'], dom['size_kib'], width, dom['way_kib']))
        head = ' '.join('%2d' % b for b in range(width - 1, -1, -1))
        lines.append('  %-*s %-10s %5s %4s %7s  %s  %s' % (
            name_w, 'GROUP', 'MODE', 'CBM', 'WAYS', 'KiB', head, 'MEMBERS'))
        for idx, row in enumerate(dom['groups']):
            cells = []
            for ch in row['map']:
                if ch != '#':
                    cells.append(' .')
                elif colour:
                    cells.append(COLOURS[idx % len(COLOURS)] + '##' + RESET)
                else:
                    cells.append('##')
            name = row['group'] if row['kind'] != 'default' else \
                'default (root)'
            mb = ' MB %d%%' % row['mb_percent'] \
                if row['mb_percent'] not in (None, 100) else ''
            lines.append('  %-*s %-10s %5s %4d %7d  %s  %s%s' % (
                name_w, name, row['mode'], '0x' + row['cbm'], row['ways'], row['kib'],
                ' '.join(cells), _member_text(row), mb))
        if dom['unused_ways']:
            lines.append('  %-*s %-10s %5s %4d %7d  %s' % (
                name_w, '(unused ways)', '', '', dom['unused_ways'],
                dom['unused_ways'] * dom['way_kib'],
                ' '.join(' o' if c == 'o' else ' .' for c in dom['unused_map'])))
    return '\n'.join(lines)


def render_agent(pid: str | None) -> str:
    """Whether an ovs-rdt-agent keeps the OvS side of the plan."""
    if pid is not None:
        return 'Agent: ovs-rdt-agent runs for this resctrl root (pid %s)' % pid
    return ('Agent: no ovs-rdt-agent runs for this resctrl root: PMD threads '
            'are not placed, and Open_vSwitch external_ids:rdt-status is '
            'what the last agent wrote')


def render_policy(state: dict | None) -> str:
    """The dynamic policy's state as the agent published it."""
    if not state:
        return ('Policy: [policy] enabled, but no ovs-rdt-agent runs it for '
                'this resctrl root')
    lines = ['Policy: %s follows its demand within %d-%d ways, %s gets the '
             'rest of %d ways (at least %d); every %ss; MBA lever %s'
             % (state['high_priority'], state['hp_min_ways'],
                state['hp_max_ways'], state['best_effort'], state['budget'],
                state['be_min_ways'], state['interval'],
                'on' if state.get('mba') else 'off')]
    if state.get('error'):
        lines.append('  error: %s' % state['error'])
    for dom, row in sorted(state.get('domains', {}).items(),
                           key=lambda item: int(item[0])):
        mb = row.get('be_mb')
        occ = row.get('hp_occupancy')
        lines.append('  domain %s: %s %d ways, %s %d ways%s; %s occupancy %s'
                     % (dom, state['high_priority'], row['hp_ways'],
                        state['best_effort'], row['be_ways'],
                        ' (MB %d%%)' % mb if mb not in (None, 100) else '',
                        state['high_priority'],
                        '-' if occ is None else '%d KiB' % (occ // 1024)))
        last = row.get('last')
        lines.append('    last decision: %s' % (
            '%s, %s' % (last['direction'], last['text']) if last
            else 'none yet'))
    return '\n'.join(lines)
