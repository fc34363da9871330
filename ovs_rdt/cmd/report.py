"""The node's cache plan as data and text, like the application note's Table 4.

(The application note: the README's References, seed 000.)

Pure: takes the platform, the groups and each group's members; no I/O.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core import topology
from ovs_rdt.core.model import PMD_GROUP, ROOT, UNIT_AMD, UNIT_MBPS
from ovs_rdt.core.model import UNIT_PERCENT
from ovs_rdt.core.model import VM_GROUP_PREFIX, Group, Platform
from ovs_rdt.exceptions import count
from ovs_rdt.inputs import cpulists
from ovs_rdt.members import summary
from ovs_rdt import POOL_GROUP_PREFIX

if TYPE_CHECKING:
    from ovs_rdt.agent.agent_state import AgentState
    from ovs_rdt.agent.policy_state import PolicyState


COLOURS = ('\033[42m', '\033[44m', '\033[45m', '\033[46m', '\033[43m',
           '\033[41m', '\033[102m', '\033[104m', '\033[105m', '\033[106m')
RESET = '\033[0m'


def kind_of(name: str) -> str:
    if name == ROOT:
        return 'default'
    if name.startswith(POOL_GROUP_PREFIX):
        return 'pool'
    if name.startswith(VM_GROUP_PREFIX):
        return 'vm'
    if name == PMD_GROUP:
        return 'ovs-pmd'
    return 'foreign'


def describe_platform(platform: Platform) -> dict:
    """What the platform is (issue 14), JSON-ready: CAT with or without
    CDP, the MB unit, io_alloc ways, SMBA, MBM counter mode, L3 domains.
    """
    mba = platform.mb
    return {
        'cat': 'L3 CAT with CDP' if platform.cdp else 'L3 CAT',
        'cdp': platform.cdp,
        'l3_domains': len(platform.domains),
        'mb_unit': mba.unit if mba is not None else None,
        'mb_max': mba.max_value if mba is not None else None,
        'mb_field': mba.field or None if mba is not None else None,
        'smba': platform.smba,
        'io_alloc': platform.io_alloc,
        'io_alloc_cbm': {str(d): str(m) for d, m
                         in sorted(platform.io_alloc_cbm.items())},
        'io_alloc_ways': {str(d): m.count for d, m
                          in sorted(platform.io_alloc_cbm.items())},
        'mbm_assign_mode': platform.mbm_assign_mode,
    }


def mb_text(value: int | None, platform: Platform,
            event: str | None = None) -> str:
    """`` MB 50%``, `` MB 2500 MiB/s of mbm_local_bytes`` (mba_MBps: the
    event the software controller follows), '' when uncapped or unknown.
    """
    mba = platform.mb
    top = mba.max_value if mba is not None else 100
    if value is None or value >= top:
        return ''
    if mba is None or mba.unit == UNIT_PERCENT:
        return ' MB %d%%' % value
    if mba.unit == UNIT_AMD:
        return ' MB %d x 1/8 GB/s (%d MiB/s)' % (value, mba.mbps_of(value))
    return ' MB %d MiB/s%s' % (value, ' of %s' % event if event else '')


def numa_text(numa_l3: dict[int, frozenset[int]]) -> str:
    """``nodes 0-2 -> L3 0; nodes 3-5 -> L3 1`` (Sub-NUMA Clustering: 3
    NUMA nodes per L3) or ``node 0 -> L3 0-11`` (AMD: one L3 per CCD).
    """
    by_doms: dict[frozenset[int], list[int]] = {}
    for node, doms in sorted(numa_l3.items()):
        by_doms.setdefault(doms, []).append(node)
    parts = []
    for doms, nodes in sorted(by_doms.items(), key=lambda kv: kv[1]):
        parts.append('%s %s -> L3 %s' % (
            'nodes' if len(nodes) > 1 else 'node', cpulists.to_text(nodes),
            cpulists.to_text(sorted(doms))))
    text = '; '.join(parts)
    shared = topology.nodes_per_l3(numa_l3)
    if shared > 1:
        text = 'Sub-NUMA Clustering, %d NUMA nodes per L3: %s' % (shared, text)
    return 'NUMA to L3: ' + text


def build(platform: Platform, groups: list[Group],
          members: Callable[[Group], list[dict]],
          numa_l3: dict[int, frozenset[int]] | None = None) -> dict:
    """The plan as a JSON-ready dict (``numa_l3``: NUMA node -> its L3
    domains, from the topology).
    """
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
                'mb_percent': grp.mb.get(dom) if platform.mb is None or
                platform.mb.unit == UNIT_PERCENT else None,
                'mb': grp.mb.get(dom),
                'mb_text': mb_text(grp.mb.get(dom), platform,
                                   grp.mb_event).strip(),
                # mba_MBps: the event the software controller follows.
                'mb_event': grp.mb_event,
                # Under CDP: the code and the data mask (cbm: both).
                'cbm_code': str(grp.l3code[dom]) if dom in grp.l3code
                else None,
                'cbm_data': str(grp.l3data[dom]) if dom in grp.l3data
                else None,
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
                     'mba': platform.mb is not None,
                     'numa_l3': {str(n): sorted(d) for n, d
                                 in sorted((numa_l3 or {}).items())},
                     'snc': topology.nodes_per_l3(numa_l3 or {}) > 1,
                     **describe_platform(platform)},
        'domains': domains,
    }


def _member_text(row: dict) -> str:
    if row['kind'] == 'default':
        cpus = row['cpus']
        return 'OS and everything else (%d tasks%s)' % (
            row['tasks'],
            ', CPUs %s' % cpulists.to_text(cpus) if cpus else '')
    parts = [summary(m) for m in row['members']]
    if row['cpus']:
        parts.append('cores %s' % cpulists.to_text(row['cpus']))
    return '; '.join(parts) or '(no tasks)'


def render(report: dict, colour: bool = False) -> str:
    """Text tables, one per cache domain, with a way map."""
    lines = []
    plat = report['platform']
    lines.append('Platform: %s, %d-bit CBM %s, %d CLOSIDs (%d in use), '
                 '%d L3 cache domain(s), MBA %s'
                 % (plat.get('cat', 'L3 CAT'), plat['cbm_len'],
                    plat['cbm_mask'], plat['num_closids'],
                    plat['closids_used'], plat.get('l3_domains',
                                                   len(plat['domains'])),
                    _mba_text(plat)))
    extra = _platform_extras(plat)
    if extra:
        lines.append('  ' + '; '.join(extra))
    cdp = bool(plat.get('cdp'))
    name_w = max([len(r['group']) for d in report['domains']
                  for r in d['groups']] + [len('default (root)'), 20])
    for dom in report['domains']:
        width = dom['ways']
        lines.append('')
        lines.append('L3 cache domain %d: %d KiB, %d ways of %d KiB'
                     % (dom['domain'], dom['size_kib'], width, dom['way_kib']))
        head = ' '.join('%2d' % b for b in range(width - 1, -1, -1))
        cbm_w = 11 if cdp else 5
        lines.append('  %-*s %-10s %*s %4s %7s  %s  %s' % (
            name_w, 'GROUP', 'MODE', cbm_w, 'CODE/DATA' if cdp else 'CBM',
            'WAYS', 'KiB', head, 'MEMBERS'))
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
            if 'mb_text' in row:
                mb = ' ' + row['mb_text'] if row['mb_text'] else ''
            else:
                mb = ' MB %d%%' % row['mb_percent'] \
                    if row['mb_percent'] not in (None, 100) else ''
            cbm = '0x' + row['cbm']
            if cdp and row.get('cbm_code') is not None:
                cbm = '%s/%s' % (row['cbm_code'], row['cbm_data'])
            lines.append('  %-*s %-10s %*s %4d %7d  %s  %s%s' % (
                name_w, name, row['mode'], cbm_w, cbm, row['ways'],
                row['kib'], ' '.join(cells), _member_text(row), mb))
        if dom['unused_ways']:
            lines.append('  %-*s %-10s %*s %4d %7d  %s' % (
                name_w, '(unused ways)', '', cbm_w, '', dom['unused_ways'],
                dom['unused_ways'] * dom['way_kib'],
                ' '.join(' o' if c == 'o' else ' .' for c in dom['unused_map'])))
        if dom.get('free'):
            lines.append('  ' + free_text(dom['free'], width))
    if report.get('free_error'):
        lines.append('')
        lines.append('Free ways: not counted: %s' % report['free_error'])
    if report.get('closids_free') is not None:
        lines.append('')
        lines.append('CLOSIDs left: %d of %d (a VM with ways of its own, a '
                     'new pool or the PMD group takes one)'
                     % (report['closids_free'], plat['num_closids']))
    return '\n'.join(lines)


def free_text(free: dict, width: int) -> str:
    """``free: 5 ways for a VM or an isolated pool (11 - 4 reserved ... - 2
    held by VMs)``: what is left on one domain
    (:func:`ovs_rdt.cmd.status.left`), in the words of the hook's refusals.
    """
    shared = ''
    if free['shared_pool_ways'] != free['vm_ways']:
        shared = ', %d for a pool that is not isolated' \
            % free['shared_pool_ways']
    return ('free: %s for a VM or an isolated pool%s (%d - %s - %d held by '
            'VMs)' % (count(free['vm_ways'], 'way'), shared, width,
                      reserved_text(free), free['vm_held_ways']))


def reserved_text(free: dict) -> str:
    """``5 reserved (system_min_ways 2, ovsrdt-pool-hp 3)``: the reserve
    of one domain (:meth:`ovs_rdt.manager.CacheManager.free_ways`) and
    what holds it (:func:`reserved_by`).
    """
    why = reserved_by(free)
    return '%d reserved %s' % (free['reserved_ways'], '(%s)' % why if why
                               else 'for the default group, pools, OvS and '
                               'other tools')


def reserved_by_domain(free: dict[int, dict]) -> str:
    """`` (each: system_min_ways 2, ovsrdt-pool-hp 3)``, or per domain
    where they differ: what holds the reserve of every domain
    (:func:`reserved_by`); '' when nothing does.
    """
    why = {d: reserved_by(f) for d, f in free.items()}
    if not any(why.values()):
        return ''
    if len(set(why.values())) == 1:
        return ' (each: %s)' % why[min(why)]
    return ' (%s)' % '; '.join('%d: %s' % kv for kv in sorted(why.items()))


def reserved_by(free: dict) -> str:
    """What holds one domain's reserve, in words
    (:func:`ovs_rdt.core.allocator.reserve`); what the parts leave of it
    is free ways not beside the others ('' when nothing is reserved).
    """
    parts = free.get('reserved_by') or []
    if not free['reserved_ways'] or not parts:
        return ''
    words = ['%s %d' % part for part in parts]
    rest = free['reserved_ways'] - sum(ways for _name, ways in parts)
    if rest > 0:
        words.append('%d free but not beside the others' % rest)
    return ', '.join(words)


def render_configuration(conf: dict, root: str,
                         agent_outdated: bool = False) -> str:
    """Whether ``root`` holds what the configuration asks, and if not, why
    (:func:`ovs_rdt.cmd.status.configuration`); ``agent_outdated``: the
    agent runs an older configuration, which it would write back over
    ``apply``'s.
    """
    if conf['state'] == 'invalid':
        return ('Configuration: cannot be applied: %s\n  resctrl holds the '
                'layout shown above (the last one applied); until this is '
                'fixed, the hook refuses VMs that need a write (ways of their '
                'own, a pool without its group yet) with this error'
                % conf['error'])
    writes = conf['writes']
    if not writes:
        return 'Configuration: applied (%s holds what it asks)' % root
    how = ('the agent runs an older configuration, which it writes back: '
           'reloading it makes them (see "Agent" above)'
           if agent_outdated else '"ovs-rdt apply" makes them')
    lines = ['Configuration: not applied: %s would make %s what it asks '
             '(%s):' % (count(len(writes), 'write'), root, how)]
    for write in writes:
        lines.append('  ' + write['write'])
        lines.extend('      ' + text for text in write['effects'])
    return '\n'.join(lines)


def _mba_text(plat: dict) -> str:
    if not plat['mba']:
        return 'no'
    unit = plat.get('mb_unit')
    if unit is None or unit == UNIT_PERCENT:
        return 'in percent (mb_percent)'
    if unit == UNIT_AMD:
        return 'in 1/8 GB/s, AMD (mb_mbps, converted; %s = no limit)' \
            % plat.get('mb_max')
    return 'in MiB/s, mba_MBps (mb_mbps)'


def _platform_extras(plat: dict) -> list[str]:
    out = []
    if plat.get('numa_l3'):
        out.append(numa_text({int(n): frozenset(d)
                              for n, d in plat['numa_l3'].items()}))
    if plat.get('cdp'):
        out.append('CDP: every group has a code and a data mask '
                   '(CODE/DATA), ovs-rdt gives its groups the same for both '
                   'unless a pool sets l3_code_cbm and l3_data_cbm')
    if plat.get('io_alloc') == 'enabled':
        out.append('io_alloc enabled: ways for I/O %s' % ', '.join(
            'domain %s %s (%d)' % (d, plat['io_alloc_cbm'][d], n)
            for d, n in plat['io_alloc_ways'].items()))
    elif plat.get('io_alloc'):
        out.append('io_alloc %s' % plat['io_alloc'])
    if plat.get('mb_unit') == UNIT_MBPS:
        out.append("mba_MBps: the kernel's software controller holds a "
                   "group's MB: to its MiB/s of the event in its "
                   "mba_MBps_event ([pool:NAME] mb_event)")
    if plat.get('smba'):
        out.append('SMBA (slow memory bandwidth) present: left as it is')
    if plat.get('mbm_assign_mode'):
        out.append('MBM counters: %s mode%s' % (
            plat['mbm_assign_mode'],
            ' (events without a counter read Unassigned and are skipped)'
            if plat['mbm_assign_mode'] == 'mbm_event' else ''))
    return out


def render_agent(pid: str | None, error: str | None = None,
                 state: AgentState | None = None,
                 problems: list[str] | None = None) -> str:
    """Whether an ovs-rdt-agent keeps the node (``error``: why this user
    cannot tell): its pid, the configuration it runs, its OvS status, and
    ``problems`` (:func:`ovs_rdt.cmd.status.agent_problems`).
    """
    if error:
        return 'Agent: %s' % error
    if pid is None:
        return 'Agent: %s' % (problems or ['no ovs-rdt-agent runs'])[0]
    head = 'Agent: ovs-rdt-agent runs for this resctrl root (pid %s)' % pid
    if state is None:
        return head + (': it publishes no state (an earlier release?), so '
                       'whether it runs the files as they are is unknown')
    if problems:
        return '\n'.join([head + ', but:'] + ['  - %s' % p for p in problems])
    lines = [head + ', with the configuration files as they are']
    if state.ovs_status:
        lines.append('  OvS: %s' % state.ovs_status)
    return '\n'.join(lines)


def render_policy(state: PolicyState | None, error: str | None = None,
                  agent: str | None = None) -> str:
    """The dynamic policy's state as the agent published it (``error``:
    why it cannot be read; ``agent``: the pid of the agent that runs for
    this root, if one does).
    """
    if error:
        return 'Policy: %s' % error
    if not state and agent:
        return ('Policy: [policy] enabled in the files, but the agent (pid '
                '%s) does not run it: it runs the configuration it read '
                'before (see "Agent" above)' % agent)
    if not state:
        return ('Policy: [policy] enabled, but no ovs-rdt-agent runs it for '
                'this resctrl root')
    lines = ['Policy: %s follows its demand within %d-%d ways, %s gets the '
             'rest of %d ways (at least %d); every %ss; MBA lever %s'
             % (state.high_priority, state.hp_min_ways, state.hp_max_ways,
                state.best_effort, state.budget, state.be_min_ways,
                state.interval, 'on' if state.mba else 'off')]
    if state.error:
        lines.append('  error: %s' % state.error)
    if state.uncounted:
        lines.append('  no MBM counter assigned (misses not measured, drops '
                     'and occupancy still count; the agent logs why): %s'
                     % ', '.join('%s on L3 domain %s' % tuple(u.split(':'))
                                 for u in state.uncounted))
    for dom, row in sorted(state.domains.items()):
        mb, occ = row.be_mb, row.hp_occupancy
        lines.append('  domain %s: %s %s, %s %s%s; %s occupancy %s'
                     % (dom, state.high_priority, count(row.hp_ways, 'way'),
                        state.best_effort, count(row.be_ways, 'way'),
                        ' (MB %d%%)' % mb if mb not in (None, 100) else '',
                        state.high_priority,
                        '-' if occ is None else '%d KiB' % (occ // 1024)))
        last = row.last
        lines.append('    last decision: %s' % (
            '%s, %s' % (last.direction, last.text) if last else 'none yet'))
    return '\n'.join(lines)
