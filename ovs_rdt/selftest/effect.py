"""The effect part: do the ways of a group shield what runs in it?

Two groups of its own (two free CLOSIDs, or it says so and stops): the
probe's, with ``--ways`` ways on one L3 domain and a monitor group holding
only the probe, and the neighbour's, with ways disjoint from them; both on
ways only the default group holds, or none (no other group's: ovs-rdt's
pools, libvirt's, pqos's).  The probe (:mod:`.probe`, pinned to one core)
walks a working set of 3/4 of its ways' bytes, in three phases: alone;
with a streaming neighbour (on another core of the same L3) in its own
group; with the neighbour moved to the disjoint group.  Both run on cores
no OvS PMD thread or pinned vCPU uses (or those named by ``--cpus``).  The
resctrl lock is held from the choice of ways to the end, so no other tool
sees the two groups.  Each phase gives nanoseconds per access and the
probe's ``llc_occupancy``; :mod:`.verdict` judges them.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.exceptions import ProbeUnavailable
from ovs_rdt.inputs import cpulists
from ovs_rdt import procfs
from ovs_rdt.resctrl import Resctrl
from ovs_rdt.selftest import verdict
from ovs_rdt.selftest.behaviours.common import LOAD_WAYS, count_or_none, run_in, spare
from ovs_rdt.selftest.geometry import Geometry
from ovs_rdt.selftest.node import Mismatch, Node, Skip
from ovs_rdt.selftest.probe import Probe, built

LOG = logging.getLogger(__name__)

MiB = 1024 * 1024
#: The probe's working set, as a share of its ways' bytes.
FILL = 0.75
#: The working set is at least this many times the L2 cache (else the
#: probe would hit its L2 whatever happens in the L3's ways).
L2_TIMES = 2
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


def pick_cpus(resctrl: Resctrl,
              allowed: set[int] | frozenset[int]) -> tuple[int, int, int] | None:
    """(probe CPU, neighbour CPU, their L3 id): two of ``allowed`` on
    different cores sharing one L3 (the last such, away from CPU 0's
    interrupts); None if there are none.
    """
    l3 = resctrl.cpus.cpu_domains()
    cores: dict[int, dict[str, int]] = {}
    for cpu in sorted(allowed & set(l3)):
        try:
            core = resctrl.read(os.path.join(resctrl.cpus.cpu_root, 'cpu%d' % cpu,
                                             'topology', 'thread_siblings_list')).strip()
        except OSError:
            continue
        cores.setdefault(l3[cpu], {}).setdefault(core, cpu)
    for dom in sorted(cores, reverse=True):
        cpus = sorted(cores[dom].values())
        if len(cpus) >= 2:
            return cpus[-1], cpus[-2], dom
    return None


def choose_cpus(resctrl: Resctrl, named: frozenset[int] | None,
                proc: str = procfs.PROC) -> tuple[int, int, int] | str:
    """:func:`pick_cpus` among the CPUs we may run on, less those of PMD
    threads and pinned vCPUs, or among ``named`` (``--cpus``); else why not.
    """
    allowed = os.sched_getaffinity(0)
    if named:
        pick = pick_cpus(resctrl, named & allowed)
        return pick or ('--cpus %s: not two CPUs of different cores sharing an L3 cache '
                        'among those it may run on (%s)'
                        % (cpulists.to_text(named), cpulists.to_text(allowed)))
    busy = procfs.busy_cpus(proc)
    pick = pick_cpus(resctrl, allowed - set(busy))
    if pick is None:
        return ('needs two cores sharing an L3 cache among the CPUs it may run on (%s)%s: '
                'name two with --cpus' % (cpulists.to_text(allowed), ', leaving out %s' % (
                    ', '.join('%d (%s)' % kv for kv in sorted(busy.items())))
                    if busy else ''))
    return pick


def l2_bytes(resctrl: Resctrl, cpu: int) -> int:
    """The L2 cache of ``cpu`` in bytes (0: sysfs does not say)."""
    base = os.path.join(resctrl.cpus.cpu_root, 'cpu%d' % cpu, 'cache')
    try:
        for index in sorted(n for n in os.listdir(base) if n.startswith('index')):
            if resctrl.read(os.path.join(base, index, 'level')).strip() == '2':
                size = resctrl.read(os.path.join(base, index, 'size')).strip()
                return int(size[:-1]) * {'K': 1024, 'M': MiB}[size[-1]]
    except (OSError, ValueError, KeyError):
        pass
    return 0


def probe_ways(ways: int, min_bits: int, way: int, l2: int) -> int:
    """``ways``, at least ``min_cbm_bits``, and enough that the working set
    (:data:`FILL` of them) is :data:`L2_TIMES` the L2 cache.
    """
    return max(ways, min_bits, -(-L2_TIMES * l2 // int(way * FILL)) if way else 1)


def skipped(why: str) -> dict[str, Any]:
    return {'verdict': 'skipped', 'explanation': why}


def run(node: Node, ways: int, seconds: float,
        cpus: frozenset[int] | None = None) -> dict[str, Any]:
    """The effect part; a JSON-able report with the figures and the verdict."""
    pick = choose_cpus(node.resctrl, cpus)
    if isinstance(pick, str):
        return skipped(pick)
    try:
        with built() as binary, node.lock():
            return _run(node, ways, seconds, pick, binary)
    except ProbeUnavailable as exc:
        return skipped(str(exc))


def _run(node: Node, ways: int, seconds: float, pick: tuple[int, int, int],
         binary: int) -> dict[str, Any]:
    geo = Geometry.read(node)
    free = geo.plat.num_closids - len(node.groups())
    if free < 2:
        return skipped('needs two free CLOSIDs, %d of %d free (%d groups)'
                       % (max(free, 0), geo.plat.num_closids, len(node.groups())))
    why_emulated = emulated(geo, node.root)
    if why_emulated:
        seconds = min(seconds, EMULATED_SECONDS)
    cpu, other_cpu, dom = pick
    way = geo.way_bytes(dom)
    if dom not in geo.ids or not way:
        return skipped('CPU %d is on L3 domain %d, where the default group has no ways '
                       'to size a way by' % (cpu, dom))
    l2 = l2_bytes(node.resctrl, cpu)
    ways = probe_ways(ways, geo.min_bits, way, l2)
    plan = _masks(node, geo, dom, ways)
    if isinstance(plan, str):
        return skipped(plan)
    working_set = int(ways * way * FILL)
    stream = min(max(2 * way * geo.cbm_len, 64 * MiB),
                 64 * MiB if why_emulated else 1024 * MiB)
    setup = {'cpu': cpu, 'neighbour_cpu': other_cpu, 'domain': dom, 'ways': ways,
             'probe_mask': '%x' % plan[0], 'neighbour_mask': '%x' % plan[1],
             'working_set_bytes': working_set, 'l2_bytes': l2, 'stream_bytes': stream,
             'seconds': seconds}
    try:
        figures = _measure(node, geo, setup, binary)
    except (Mismatch, Skip, ProbeUnavailable, OSError) as exc:
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
    """The probe's ways (free of the default group's too, if it can) and
    the neighbour's (the longest run of the rest), all :func:`spare`.
    """
    groups = geo.groups(node)
    avail = spare(node, geo, groups, dom)
    default = sum(g.l3.get(dom, 0) for g in groups if not g.name)
    probe = run_in(avail & ~default, ways, geo.cbm_len) or run_in(avail, ways, geo.cbm_len)
    if probe is None:
        return 'no %d ways on domain %d %s' % (ways, dom, LOAD_WAYS)
    other = CBM(avail & ~probe, geo.cbm_len).largest_run()
    if other.count < max(geo.min_bits, 1):
        return 'no ways on domain %d beside %x for the neighbour %s' % (dom, probe, LOAD_WAYS)
    return probe, other.value


def _occupancy(node: Node, rel: str, dom: int) -> int | None:
    path = '%s/mon_data/mon_L3_%02d/llc_occupancy' % (rel, dom)
    if not node.exists(path):
        return None
    return count_or_none(node.read(path), path)


def _measure(node: Node, geo: Geometry, setup: dict[str, Any],
             binary: int) -> list[tuple[float, int | None]]:
    """The three phases (the caller holds the lock)."""
    dom, seconds = setup['domain'], setup['seconds']
    settle = min(0.5, seconds / 2)
    probe = neighbour = None
    try:
        a = node.mkdir('probe')
        mon = node.mkmon(a, 'probe')
        b = node.mkdir('neighbour')
        for rel, mask in ((a, setup['probe_mask']), (b, setup['neighbour_mask'])):
            node.accepted(rel + '/schemata', ''.join(
                '%s:%d=%s\n' % (res, dom, mask) for res in geo.l3))
        probe = Probe(binary, 'chase', setup['cpu'], setup['working_set_bytes'])
        node.accepted(a + '/tasks', '%d\n' % probe.pid)
        node.accepted(mon + '/tasks', '%d\n' % probe.pid)
        probe.init()            # its lines are filled in its group's ways
        out = [(probe.measure(seconds), _occupancy(node, mon, dom))]
        neighbour = Probe(binary, 'stream', setup['neighbour_cpu'], setup['stream_bytes'])
        node.accepted(a + '/tasks', '%d\n' % neighbour.pid)
        neighbour.go()
        time.sleep(settle)
        out.append((probe.measure(seconds), _occupancy(node, mon, dom)))
        node.accepted(b + '/tasks', '%d\n' % neighbour.pid)
        time.sleep(settle)
        out.append((probe.measure(seconds), _occupancy(node, mon, dom)))
        return out
    finally:
        for proc in (neighbour, probe):
            if proc is not None:
                proc.stop()
        problems = node.cleanup()
        if problems:
            LOG.warning('Effect part: %s', '; '.join(problems))
