"""The effect part: do the ways of a group shield what runs in it?

Two groups of its own (two free CLOSIDs, or it says so and stops): the
probe's, with ``--ways`` ways on one L3 domain and a monitor group holding
only the probe, and the neighbour's, with ways disjoint from them.  The
probe (:mod:`.probe`, pinned to one core) walks a working set of 3/4 of
its ways' bytes, in three phases: alone; with a streaming neighbour (on
another core of the same L3) in its own group; with the neighbour moved
to the disjoint group.  Each phase gives nanoseconds per access and the
probe's ``llc_occupancy``; :mod:`.verdict` judges them.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any

from ovs_rdt.exceptions import ProbeUnavailable
from ovs_rdt.selftest import verdict
from ovs_rdt.selftest.behaviours.common import count_or_none, unshareable, used
from ovs_rdt.selftest.geometry import Geometry, run_in
from ovs_rdt.selftest.node import Mismatch, Node
from ovs_rdt.selftest.probe import Probe, build

LOG = logging.getLogger(__name__)

MiB = 1024 * 1024
#: The probe's working set, as a share of its ways' bytes.
FILL = 0.75
#: On an emulated mount: seconds per phase (nothing is measured there).
EMULATED_SECONDS = 0.1
PHASES = ('alone', 'neighbour in the same ways', 'neighbour in disjoint ways')


def emulated(geo: Geometry, root: str) -> str | None:
    """Why no hardware partitions the cache at ``root``, or None."""
    if geo.fstype == 'resctrl':
        return None
    if geo.fstype is None:
        return '%s is not a mount point' % root
    return "%s is a %s mount, not the kernel's resctrl" % (root, geo.fstype)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding='ascii') as fh:
            return fh.read().strip()
    except OSError:
        return None


def pick_cpus(sysfs: str, allowed: set[int]) -> tuple[int, int, int] | None:
    """(probe CPU, neighbour CPU, their L3 id): two CPUs we may run on, on
    different cores sharing one L3 (the last such, away from CPU 0's
    interrupts); None if there are none.
    """
    cores: dict[int, dict[str, int]] = {}
    for cpu in sorted(allowed):
        base = os.path.join(sysfs, 'cpu%d' % cpu)
        l3 = _read(os.path.join(base, 'cache', 'index3', 'id'))
        core = _read(os.path.join(base, 'topology', 'thread_siblings_list'))
        if l3 is None or not l3.isdigit() or core is None:
            continue
        cores.setdefault(int(l3), {}).setdefault(core, cpu)
    for dom in sorted(cores, reverse=True):
        cpus = sorted(cores[dom].values())
        if len(cpus) >= 2:
            return cpus[-1], cpus[-2], dom
    return None


def skipped(why: str) -> dict[str, Any]:
    return {'verdict': 'skipped', 'explanation': why}


def run(node: Node, ways: int, seconds: float) -> dict[str, Any]:
    """The effect part; a JSON-able report with the figures and the verdict."""
    with node.lock():
        geo = Geometry.read(node)
        held = len(node.groups()) + (geo.io_alloc == 'enabled')
        free = geo.num_closids - held
    if free < 2:
        return skipped('needs two free CLOSIDs, %d of %d free (%d groups)'
                       % (max(free, 0), geo.num_closids, len(node.groups())))
    why_emulated = emulated(geo, node.root)
    if why_emulated:
        seconds = min(seconds, EMULATED_SECONDS)
    cpus = pick_cpus(node.sysfs, os.sched_getaffinity(0))
    if cpus is None:
        return skipped('needs two cores sharing an L3 cache among the CPUs it may run '
                       'on (%s)' % sorted(os.sched_getaffinity(0)))
    cpu, other_cpu, dom = cpus
    if dom not in geo.ids:
        return skipped('CPU %d is on L3 domain %d, which %s does not have'
                       % (cpu, dom, node.root))
    ways = max(ways, geo.min_bits, 1)
    plan = _masks(node, geo, dom, ways)
    if isinstance(plan, str):
        return skipped(plan)
    probe_mask, neighbour_mask = plan
    way = geo.way_bytes(node, dom)
    if not way:
        return skipped('the default group has no ways on domain %d to size a way by'
                       % dom)
    working_set = int(ways * way * FILL)
    stream = min(max(2 * way * geo.cbm_len, 64 * MiB),
                 64 * MiB if why_emulated else 1024 * MiB)
    try:
        binary = build()
    except ProbeUnavailable as exc:
        return skipped(str(exc))
    setup = {'cpu': cpu, 'neighbour_cpu': other_cpu, 'domain': dom, 'ways': ways,
             'probe_mask': '%x' % probe_mask, 'neighbour_mask': '%x' % neighbour_mask,
             'working_set_bytes': working_set, 'stream_bytes': stream,
             'seconds': seconds, 'probe': binary}
    try:
        figures = _measure(node, geo, setup, binary)
    except (Mismatch, ProbeUnavailable, OSError) as exc:
        out = skipped('could not measure: %s' % exc)
        out['setup'] = setup
        return out
    (alone, alone_occ), (shared, shared_occ), (disjoint, disjoint_occ) = figures
    fig = verdict.Figures(alone, shared, disjoint, alone_occ, shared_occ, disjoint_occ)
    code, sentence = verdict.judge(fig, why_emulated)
    return {'verdict': code, 'explanation': sentence, 'setup': setup,
            'phases': [{'phase': name, 'ns_per_access': round(ns, 2),
                        'llc_occupancy': occ}
                       for name, (ns, occ) in zip(PHASES, figures)]}


def _masks(node: Node, geo: Geometry, dom: int, ways: int) -> tuple[int, int] | str:
    """The probe's ways (free of every group if it can) and the
    neighbour's (the longest run of the others no exclusive group holds).
    """
    groups = geo.states(node)
    avail = geo.full & ~unshareable(groups, dom)
    free = geo.full & ~used(groups, dom, geo)
    probe = run_in(free, ways, geo.cbm_len) or run_in(avail, ways, geo.cbm_len)
    if probe is None:
        return 'no %d ways on domain %d free of exclusive groups' % (ways, dom)
    least = max(geo.min_bits, 1)
    for count in range(geo.cbm_len, least - 1, -1):
        other = run_in(avail & ~probe, count, geo.cbm_len)
        if other is not None:
            return probe, other
    return 'no ways left on domain %d for a neighbour beside %x' % (dom, probe)


def _occupancy(node: Node, rel: str, dom: int) -> int | None:
    path = '%s/mon_data/mon_L3_%02d/llc_occupancy' % (rel, dom)
    if not node.exists(path):
        return None
    return count_or_none(node.read(path), path)


def _measure(node: Node, geo: Geometry, setup: dict[str, Any],
             binary: str) -> list[tuple[float, int | None]]:
    dom, seconds = setup['domain'], setup['seconds']
    settle = min(0.5, seconds / 2)
    probe = neighbour = None
    try:
        with node.lock():
            a = node.mkdir('probe')
            mon = node.mkmon(a, 'probe')
            b = node.mkdir('neighbour')
            for rel, mask in ((a, setup['probe_mask']), (b, setup['neighbour_mask'])):
                node.accepted(rel + '/schemata', ''.join(
                    '%s:%d=%s\n' % (res, dom, mask) for res in geo.l3))
        probe = Probe(binary, 'chase', setup['cpu'], setup['working_set_bytes'])
        with node.lock():
            node.accepted(a + '/tasks', '%d\n' % probe.pid)
            node.accepted(mon + '/tasks', '%d\n' % probe.pid)
        probe.init()            # its lines are filled in its group's ways
        out = [(probe.measure(seconds), _occupancy(node, mon, dom))]
        neighbour = Probe(binary, 'stream', setup['neighbour_cpu'], setup['stream_bytes'])
        with node.lock():
            node.accepted(a + '/tasks', '%d\n' % neighbour.pid)
        neighbour.go()
        time.sleep(settle)
        out.append((probe.measure(seconds), _occupancy(node, mon, dom)))
        with node.lock():
            node.accepted(b + '/tasks', '%d\n' % neighbour.pid)
        time.sleep(settle)
        out.append((probe.measure(seconds), _occupancy(node, mon, dom)))
        return out
    finally:
        for proc in (neighbour, probe):
            if proc is not None:
                proc.stop()
        with node.lock():
            problems = node.cleanup()
        if problems:
            LOG.warning('Effect part: %s', '; '.join(problems))
