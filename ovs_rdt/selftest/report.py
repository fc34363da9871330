"""What ``ovs-rdt selftest`` prints: a table for a person, JSON for a bug report."""
from __future__ import annotations

import os
import platform as host
from typing import Any

from ovs_rdt.selftest.runner import FAIL, PASS, SKIP, Result
from ovs_rdt.version import version_string

MiB = 1024 * 1024


def node_facts(root: str, fstype: str | None, options: list[str]) -> dict[str, Any]:
    """The node as a bug report needs it (no secrets: kernel, CPU, mount)."""
    model = None
    try:
        with open('/proc/cpuinfo', encoding='utf-8', errors='replace') as fh:
            for line in fh:
                if line.startswith('model name'):
                    model = line.split(':', 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        version = version_string()
    except Exception:       # pbr raises a plain Exception without its metadata
        version = 'unknown'
    return {'ovs_rdt': version, 'kernel': host.release(), 'cpu': model,
            'root': root, 'fstype': fstype, 'mount_options': options,
            'cpus': os.cpu_count()}


def header(facts: dict[str, Any], stale: list[str],
           emulated: str | None = None) -> str:
    """The first lines; ``emulated``: the platform a mount that is not
    the kernel's resctrl emulates (the host's CPU is not what it tests).
    """
    cpu = facts['cpu'] or 'an unknown CPU'
    where = ('an emulated platform, %s (the host\'s CPU: %s)' % (emulated, cpu)
             if emulated else cpu)
    lines = ['ovs-rdt selftest of %s (%s%s) on %s, Linux %s, ovs-rdt %s' % (
        facts['root'], facts['fstype'] or 'not mounted',
        ', ' + ','.join(facts['mount_options']) if facts['mount_options'] else '',
        where, facts['kernel'], facts['ovs_rdt'])]
    if stale:
        lines.append('removed what an earlier, killed run left: %s' % ', '.join(stale))
    return '\n'.join(lines)


WIDTH = 18


def behaviour_title() -> str:
    return '%-*s %-6s %s' % (WIDTH, 'BEHAVIOUR', 'RESULT', 'WHAT IT SAW')


def behaviour_line(res: Result) -> str:
    return '%-*s %-6s %s' % (WIDTH, res.name, res.result, res.detail)


def summary(results: list[Result]) -> str:
    count = {k: sum(r.result == k for r in results) for k in (PASS, FAIL, SKIP)}
    failed = [r.name for r in results if r.result == FAIL]
    text = '%d behaviours: %d pass, %d FAIL, %d skip' % (
        len(results), count[PASS], count[FAIL], count[SKIP])
    if failed:
        text += ' -- the kernel differs from what ovs-rdt relies on in: %s' % (
            ', '.join(failed))
    return text


def _size(value: int | None) -> str:
    if value is None:
        return '-'
    return '%.1f MiB' % (value / MiB) if value >= MiB else '%d KiB' % (value // 1024)


def effect_lines(effect: dict[str, Any]) -> list[str]:
    setup = effect.get('setup')
    lines = ['EFFECT']
    if setup:
        lines.append('probe on CPU %d, neighbour on CPU %d (L3 domain %d); the probe\'s '
                     'group has %d way%s (%s), the neighbour\'s own group the mask %s' % (
                         setup['cpu'], setup['neighbour_cpu'], setup['domain'],
                         setup['ways'], '' if setup['ways'] == 1 else 's',
                         setup['probe_mask'], setup['neighbour_mask']))
        lines.append('working set %s (3/4 of its ways; L2 cache %s), the neighbour '
                     'streams %s, %g s a phase' % (
                         _size(setup['working_set_bytes']),
                         _size(setup['l2_bytes']) if setup['l2_bytes'] else 'unknown',
                         _size(setup['stream_bytes']), setup['seconds']))
    if effect.get('phases'):
        lines.append('  %-28s %10s  %s' % ('PHASE', 'ns/access', 'llc_occupancy'))
        for phase in effect['phases']:
            lines.append('  %-28s %10.1f  %s' % (phase['phase'], phase['ns_per_access'],
                                                 _size(phase['llc_occupancy'])))
    lines.append('verdict: %s: %s' % (effect['verdict'], effect['explanation']))
    return lines
