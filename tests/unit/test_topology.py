"""NUMA nodes and L3 cache domains: the rule, its text form, sysfs, and the
filter's arithmetic against the hook and the node allocator on SNC and AMD
topologies (issue 14)."""
from __future__ import annotations

import os
import random
from typing import Callable

import pytest

from libvirt_hooks import domain
from ovs_rdt.core import allocator, capacity, topology
from ovs_rdt.core.capacity import Holding, HostCapacity, Usage
from ovs_rdt.exceptions import AllocationError, InvalidValue
from ovs_rdt.guest import GuestCache
from ovs_rdt.inputs import numa_l3
from ovs_rdt.resctrl import Resctrl
from tests.unit.fakes import make_tree
from tests.unit.test_capacity import _groups, _node
from tests.unit.test_domain import rdt, xml

# CPU -> (NUMA node, L3 id), small versions of the emulator's profiles:
#: xeon-6-granite-rapids-snc3: 2 sockets x 3 SNC nodes, one L3 per socket
SNC3: Callable[[int], tuple[int, int]] = lambda c: (c // 2, c // 6)
#: epyc-9654 (NPS1): 2 nodes x 4 CCDs, one L3 per CCD
EPYC: Callable[[int], tuple[int, int]] = lambda c: (c // 8, c // 2)
#: a Xeon without SNC: one node and one L3 per socket, same ids
XEON: Callable[[int], tuple[int, int]] = lambda c: (c // 4, c // 4)


def _cpus(layout: Callable[[int], tuple[int, int]]) -> range:
    return {SNC3: range(12), EPYC: range(16), XEON: range(8)}[layout]


def _maps(layout: Callable[[int], tuple[int, int]]) -> tuple[dict, dict]:
    cpus = _cpus(layout)
    return ({c: layout(c)[0] for c in cpus}, {c: layout(c)[1] for c in cpus})


# -- the rule ----------------------------------------------------------------
def test_snc3_nodes_share_their_socket_l3() -> None:
    mapping = topology.from_cpus(*_maps(SNC3))
    assert mapping == {0: {0}, 1: {0}, 2: {0}, 3: {1}, 4: {1}, 5: {1}}
    assert topology.by_l3(mapping) == {0: {0, 1, 2}, 1: {3, 4, 5}}
    assert topology.domains(mapping) == {0, 1}
    # two cells on one socket: ways on its one L3 (counted once)
    assert topology.l3_of(mapping, {0, 1}) == {0}
    assert topology.l3_of(mapping, {2, 3}) == {0, 1}
    assert not topology.is_identity(mapping)


def test_epyc_node_spans_its_ccds() -> None:
    mapping = topology.from_cpus(*_maps(EPYC))
    assert mapping == {0: {0, 1, 2, 3}, 1: {4, 5, 6, 7}}
    assert topology.by_l3(mapping)[5] == {1}
    assert topology.l3_of(mapping, {1}) == {4, 5, 6, 7}
    assert topology.l3_of(mapping, {0, 1}) == set(range(8))


def test_xeon_without_snc_is_the_identity() -> None:
    mapping = topology.from_cpus(*_maps(XEON))
    assert mapping == {0: {0}, 1: {1}} and topology.is_identity(mapping)


def test_unknown_cpus_and_nodes() -> None:
    # CPU 3 is offline (no cache/ in sysfs), node 2 has no CPU with a cache
    mapping = topology.from_cpus({0: 0, 1: 1, 3: 2}, {0: 0, 1: 0})
    assert mapping == {0: {0}, 1: {0}}
    # a node the map does not know: every L3 domain (conservative)
    assert topology.l3_of({0: frozenset({0}), 1: frozenset({1})}, {7}) \
        == {0, 1}
    assert topology.l3_of(mapping, ()) == frozenset()


# -- the text form -----------------------------------------------------------
@pytest.mark.parametrize('text,expect', [
    ('0:0-11;1:12-23', {0: set(range(12)), 1: set(range(12, 24))}),
    ('0:0;1:0;2:0;3:1;4:1;5:1', {0: {0}, 1: {0}, 2: {0}, 3: {1}, 4: {1},
                                 5: {1}}),
    (' 1:3 ; 0:0,2 ;', {0: {0, 2}, 1: {3}}),
    ('0:0-3,^2', {0: {0, 1, 3}}),
])
def test_parse(text: str, expect: dict) -> None:
    assert numa_l3.parse(text, 'rdt_numa_l3') == expect


@pytest.mark.parametrize('text,why', [
    ('', 'no NODE:L3S item'),
    (' ; ', 'no NODE:L3S item'),
    ('0-11', "'0-11' has no \":\""),
    ('x:0', "'x' is not a NUMA node id"),
    ('+1:0', "'+1' is not a NUMA node id"),
    ('٣:0', "'٣' is not a NUMA node id"),
    ('0:0;0:1', 'node 0 is given twice'),
    ('0:', 'node 0 has no L3 id'),
    ('0:a', "'a' is not a list of L3 ids"),
    ('0:3-1', "'3-1' is not a list of L3 ids"),
    ('0:0-11,1:12-23', "'0-11,1:12-23' is not a list of L3 ids"),
])
def test_parse_refuses(text: str, why: str) -> None:
    with pytest.raises(InvalidValue) as err:
        numa_l3.parse(text, 'rdt_numa_l3')
    assert str(err.value) == ("rdt_numa_l3: %r is not a NUMA node to L3 "
                              "map (NODE:L3S;...): %s" % (text, why))


def test_text_round_trip() -> None:
    for layout in (SNC3, EPYC, XEON):
        mapping = topology.from_cpus(*_maps(layout))
        text = numa_l3.to_text(mapping)
        assert numa_l3.parse(text, 'x') == mapping
    assert numa_l3.to_text(topology.from_cpus(*_maps(EPYC))) == \
        '0:0-3;1:4-7'
    assert numa_l3.to_text(topology.from_cpus(*_maps(SNC3))) == \
        '0:0;1:0;2:0;3:1;4:1;5:1'


# -- sysfs -------------------------------------------------------------------
def _sysfs(base: str, layout: Callable[[int], tuple[int, int]],
           node_dir: str | None = None) -> str:
    """cpuN/cache/index3/{level,id} and nodeN/cpulist, as Linux lays them out
    (node_dir None: node/ inside the CPU tree, as the emulator does).
    """
    cpu_root = os.path.join(base, 'cpu')
    nodes: dict[int, list[int]] = {}
    for cpu in _cpus(layout):
        node, l3 = layout(cpu)
        nodes.setdefault(node, []).append(cpu)
        index = os.path.join(cpu_root, 'cpu%d' % cpu, 'cache', 'index3')
        os.makedirs(index)
        for name, value in (('level', 3), ('id', l3)):
            with open(os.path.join(index, name), 'w') as fh:
                fh.write('%d\n' % value)
    node_root = node_dir or os.path.join(cpu_root, 'node')
    for node, cpus in nodes.items():
        os.makedirs(os.path.join(node_root, 'node%d' % node))
        with open(os.path.join(node_root, 'node%d' % node, 'cpulist'),
                  'w') as fh:
            fh.write('%d-%d\n' % (cpus[0], cpus[-1]))
    os.makedirs(os.path.join(node_root, 'node99'))   # no cpulist: skipped
    with open(os.path.join(node_root, 'online'), 'w') as fh:
        fh.write('0-%d\n' % max(nodes))
    return cpu_root


def test_resctrl_reads_nodes_inside_the_cpu_tree(tmp_path: object) -> None:
    cpu_root = _sysfs(str(tmp_path), SNC3)
    rc = Resctrl(str(tmp_path), cpu_root)
    assert rc.node_root() == os.path.join(cpu_root, 'node')
    assert rc.cpu_nodes() == {c: c // 2 for c in range(12)}
    assert rc.numa_l3() == topology.from_cpus(*_maps(SNC3))


def test_resctrl_reads_nodes_beside_the_cpu_tree(tmp_path: object) -> None:
    # Linux: /sys/devices/system/{cpu,node}
    cpu_root = _sysfs(str(tmp_path), EPYC,
                      node_dir=os.path.join(str(tmp_path), 'node'))
    rc = Resctrl(str(tmp_path), cpu_root + '/')
    assert rc.node_root() == os.path.join(str(tmp_path), 'node')
    assert rc.numa_l3() == {0: {0, 1, 2, 3}, 1: {4, 5, 6, 7}}


def test_resctrl_node_root_option(tmp_path: object) -> None:
    elsewhere = os.path.join(str(tmp_path), 'elsewhere')
    cpu_root = _sysfs(str(tmp_path), XEON, node_dir=elsewhere)
    rc = Resctrl(str(tmp_path), cpu_root, sysfs_node_root=elsewhere)
    assert rc.numa_l3() == {0: {0}, 1: {1}}
    assert Resctrl(str(tmp_path), cpu_root).numa_l3() == {}
    assert Resctrl(str(tmp_path), cpu_root,
                   sysfs_node_root='/nonexistent').cpu_nodes() == {}


def test_resctrl_from_settings_passes_the_node_root() -> None:
    from ovs_rdt.conf import Settings

    settings = Settings.defaults()
    assert settings.resctrl.sysfs_node_root is None
    assert Resctrl.from_settings(settings).node_root() == \
        '/sys/devices/system/node'


# -- the filter's arithmetic with the map --------------------------------------
CAP = HostCapacity(l3_ways=16, system_ways=2, closids=16)


def test_usage_counts_snc_cells_once_per_l3() -> None:
    mapping = numa_l3.parse('0:0;1:0;2:0;3:1;4:1;5:1', 'x')
    used = Usage(mapping)
    used.add(Holding(5, frozenset({0, 1})))      # two cells, one L3: 5 ways
    used.add(Holding(4, frozenset({2})))
    assert used.used_ways(0) == 9 and used.used_ways(1) == 0
    # a request on node 1 (L3 0): 14 - 9 = 5 free
    assert capacity.check(CAP, used, Holding(5, topology.l3_of(mapping, {1})),
                          topology.domains(mapping)) is None
    assert capacity.check(CAP, used, Holding(6, topology.l3_of(mapping, {1})),
                          topology.domains(mapping)) == (
        '6 L3 way(s) requested on cache domain 0, 5 free (16 ways, 2 system, '
        '9 used by instances)')
    # a node on the other socket is free
    assert capacity.check(CAP, used, Holding(14, topology.l3_of(mapping, {3})),
                          topology.domains(mapping)) is None
    copy = used.copy()
    copy.add(Holding(5, frozenset({0, 1})), -1)
    assert copy.used_ways(0) == 4 and used.used_ways(0) == 9


def test_usage_holds_epyc_cells_on_every_ccd() -> None:
    mapping = numa_l3.parse('0:0-11;1:12-23', 'x')
    used = Usage(mapping)
    used.add(Holding(9, frozenset({0})))
    assert [used.used_ways(d) for d in (0, 11, 12, 23)] == [9, 9, 0, 0]
    every = topology.domains(mapping)
    assert len(every) == 24
    assert 'cache domain 0, 5 free' in capacity.check(CAP, used, Holding(6),
                                                      every)
    assert capacity.check(CAP, used, Holding(5), every) is None


def test_best_nodes() -> None:
    mapping = numa_l3.parse('0:0;1:0;2:0;3:1;4:1;5:1', 'x')
    used = Usage(mapping)
    used.add(Holding(3, frozenset({0})))
    assert capacity.best_nodes(used, mapping, range(6), 1) == {1}
    assert capacity.best_nodes(used, mapping, range(6), 4) == {0, 1}
    epyc = numa_l3.parse('0:0-1;1:2-3', 'x')
    used = Usage(epyc)
    used.add(Holding(1, frozenset({1})))
    assert capacity.best_nodes(used, epyc, (0, 1), 1) == {0, 1}


# -- cross-check: filter vs the hook's domains and the node allocator ----------
def _hook_request(rc: Resctrl, uuid: str, ways: int,
                  cpus: list[int] | None) -> allocator.Request:
    """What the libvirt hook asks the allocator for (Hook.request)."""
    cputune = '' if cpus is None else '<cputune>%s</cputune>' % ''.join(
        "<vcpupin vcpu='%d' cpuset='%s'/>" % (i, ','.join(map(str, cpus)))
        for i in range(2))
    dom = domain.parse(xml(rdt('<rdt:l3 ways="%d"/>' % ways),
                           cputune=cputune, uuid=uuid))
    spec = domain.resolve(dom, None)
    assert spec is not None

    class Manager:
        resctrl = rc
    return GuestCache(None, print, Manager()).request(  # type: ignore
        dom, spec)


def _cross_check(tmp: str, seed: int,
                 layout: Callable[[int], tuple[int, int]]) -> tuple[int, int]:
    """Random VMs pinned to random NUMA nodes (vCPUs on all their CPUs, as
    Nova pins a NUMA instance with shared CPUs) come and go.

    The node side is the hook's request (its L3 domains from the vCPUs'
    cpusets through sysfs) and the allocator; the filter side is the
    capacity arithmetic with the map ``provider-config`` prints, read back
    from its text.  Returns (filter passes but the node refuses, filter
    refuses but the node accepts).
    """
    rnd = random.Random(seed)
    base_dir = os.path.join(tmp, str(seed))
    cpu_root = _sysfs(base_dir, layout)
    l3s = sorted({layout(c)[1] for c in _cpus(layout)})
    width = rnd.choice([8, 11, 16])
    resctrl_root = os.path.join(base_dir, 'resctrl')
    make_tree(resctrl_root, cbm_len=width, domains=tuple(l3s),
              closids=rnd.choice([4, 8, 16]), mba=False)
    rc = Resctrl(resctrl_root, cpu_root)
    platform = rc.platform()
    mapping = numa_l3.parse(numa_l3.to_text(rc.numa_l3()), 'rdt_numa_l3')
    nodes = sorted(mapping)
    node_cpus = {n: [c for c in _cpus(layout) if layout(c)[0] == n]
                 for n in nodes}
    every = topology.domains(mapping)
    assert every == set(platform.domains)
    system_min_ways = rnd.randint(1, 3)
    pmd = rnd.choice([0, 1, 2])
    try:
        groups, base = _node(platform, system_min_ways, pmd, {})
    except AllocationError:
        return 0, 0
    reserved = {d: width - n for d, n in allocator.room(
        platform, groups, base, system_min_ways).items()}
    cap = HostCapacity(width, max(reserved.values()), platform.num_closids,
                       1 + bool(pmd))
    vms: dict[str, tuple[allocator.Request, Holding]] = {}
    used = Usage(mapping)
    unsafe = conservative = 0
    for step in range(25):
        if vms and rnd.random() < .3:
            name = rnd.choice(sorted(vms))
            held = vms.pop(name)[1]
            groups = _groups(allocator.plan(
                platform, groups, base + [r for r, _ in vms.values()],
                system_min_ways))
            used.add(held, -1)
            continue
        ways = rnd.randint(1, width)
        cells = None
        if rnd.random() < .7:
            cells = frozenset(rnd.sample(nodes, rnd.randint(1, 2)))
        cpus = None if cells is None else \
            [c for n in sorted(cells) for c in node_cpus[n]]
        uuid = '%08d-0000-4000-8000-%012d' % (seed, step)
        req = _hook_request(rc, uuid, ways, cpus)
        # the filter's L3 domains are the hook's
        wanted = every if cells is None else topology.l3_of(mapping, cells)
        assert set(req.ways) == wanted, (cells, req.ways)
        fits = capacity.check(cap, used, Holding(
            ways, None if cells is None else wanted), every) is None
        try:
            plan = allocator.plan(platform, groups, base + [
                r for r, _ in vms.values()] + [req], system_min_ways)
        except AllocationError:
            unsafe += fits
            continue
        conservative += not fits
        groups = _groups(plan)
        held = Holding(ways, cells)     # as instances are: their NUMA cells
        vms[req.name] = (req, held)
        used.add(held)
    return unsafe, conservative


@pytest.mark.parametrize('layout', [SNC3, EPYC, XEON],
                         ids=['snc3', 'epyc', 'xeon'])
def test_filter_hook_and_allocator_agree(layout: Callable, tmp_path: object
                                         ) -> None:
    results = [_cross_check(str(tmp_path), seed, layout)
               for seed in range(40)]
    assert sum(u for u, _ in results) == 0     # never passes what fails
    assert sum(c for _, c in results) == 0     # and never refuses for less


def test_without_the_map_snc_would_overcommit(tmp_path: object) -> None:
    """Why the map is needed: id == id counts SNC node 1 as L3 1."""
    mapping = topology.from_cpus(*_maps(SNC3))
    naive, mapped = Usage(), Usage(mapping)
    for held in (Holding(7, frozenset({0})), Holding(7, frozenset({1}))):
        naive.add(held)
        mapped.add(held)
    # L3 0 is full (14 of 14 ways VMs can have): a third VM on node 2
    assert capacity.check(CAP, naive, Holding(7, frozenset({2})),
                          {0, 1, 2, 3, 4, 5}) is None            # wrong
    assert capacity.check(CAP, mapped,
                          Holding(7, topology.l3_of(mapping, {2})),
                          topology.domains(mapping)) is not None  # right


@pytest.mark.parametrize('cpus,domains', [
    (None, {0, 1}), (frozenset(), {0, 1}), ({0, 1}, {0}), ({0, 2}, {0, 1}),
    ({2}, {1}), ({0, 9}, {0, 1}), ({9}, {0, 1})])
def test_cpus_to_domains_one_rule(cpus, domains) -> None:
    """Unpinned or a CPU of unknown domain: every domain (the hook's,
    the PMD placer's and the policy's rule, like l3_of for nodes).
    """
    from ovs_rdt.core.model import Platform
    plat = Platform(11, 16, (0, 1), cpu_domains={0: 0, 1: 0, 2: 1, 3: 1})
    assert plat.domains_of_cpus(cpus) == domains
    assert Platform(11, 16, (0, 1), cpu_domains={}).domains_of_cpus(
        {0}) == {0, 1}
