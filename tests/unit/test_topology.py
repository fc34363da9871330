"""NUMA nodes, L3 cache domains and cache groups: the rule, sysfs, the
spread of a flavor's ways over the groups an instance spans, and what
Placement counts against the hook and the node allocator on SNC, AMD and
Xeon topologies (issues 14, 48)."""
from __future__ import annotations

import os
import random
from typing import Any, Callable

import pytest

from ovs_rdt.cmd import provider_config
from ovs_rdt.core import allocator, topology
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import PMD_GROUP, ROOT, Group, Platform, Request
from ovs_rdt import domain_xml as domain
from ovs_rdt.exceptions import AllocationError, InvalidValue
from ovs_rdt.guest import GuestCache
from ovs_rdt.resctrl import Resctrl
from tests.unit.fakes import make_tree
from tests.unit.test_domain import nova, xml

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


# -- cache groups and the spread ---------------------------------------------
def test_cache_groups_per_shape() -> None:
    """A socket on a Xeon (SNC or not), a NUMA node's CCDs on EPYC."""
    groups = {name: topology.cache_groups(
        topology.from_cpus(*_maps(layout)), range(8))
        for name, layout in (('snc3', SNC3), ('epyc', EPYC), ('xeon', XEON))}
    assert groups['snc3'][:2] == [{0}, {1}]
    assert groups['epyc'] == [{0, 1, 2, 3}, {4, 5, 6, 7}]
    assert groups['xeon'][:2] == [{0}, {1}]
    # L3 domains no node names (no NUMA information): a group each
    assert topology.cache_groups({}, (0, 1, 2)) == [{0}, {1}, {2}]
    # nodes sharing L3s chain into one group
    assert topology.cache_groups({0: frozenset({0, 1}), 1: frozenset({1, 2}),
                                  2: frozenset({3})}, range(4)) == \
        [{0, 1, 2}, {3}]


def test_spread_adds_up_to_the_ways_in_all() -> None:
    two = [frozenset({0}), frozenset({1})]
    assert topology.spread(6, two, {0, 1}) == {0: 3, 1: 3}
    assert topology.spread(7, two, {0, 1}) == {0: 4, 1: 3}
    assert topology.spread(1, two, {0, 1}) == {0: 1}      # 0 on group 1
    assert topology.spread(5, two, {1}) == {1: 5}         # pinned: one group
    epyc = [frozenset({0, 1, 2, 3}), frozenset({4, 5, 6, 7})]
    # one node: the share on each of its CCDs; a CCD subset: those only
    assert topology.spread(3, epyc, {4, 5, 6, 7}) == dict.fromkeys(
        (4, 5, 6, 7), 3)
    assert topology.spread(3, epyc, {0, 1}) == {0: 3, 1: 3}
    assert topology.spread(5, epyc, range(8)) == {
        **dict.fromkeys((0, 1, 2, 3), 3), **dict.fromkeys((4, 5, 6, 7), 2)}
    assert topology.spread(4, two, ()) == {}


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
    assert rc.cpus.node_root() == os.path.join(cpu_root, 'node')
    assert rc.cpus.cpu_nodes() == {c: c // 2 for c in range(12)}
    assert rc.cpus.numa_l3() == topology.from_cpus(*_maps(SNC3))


def test_resctrl_reads_nodes_beside_the_cpu_tree(tmp_path: object) -> None:
    # Linux: /sys/devices/system/{cpu,node}
    cpu_root = _sysfs(str(tmp_path), EPYC,
                      node_dir=os.path.join(str(tmp_path), 'node'))
    rc = Resctrl(str(tmp_path), cpu_root + '/')
    assert rc.cpus.node_root() == os.path.join(str(tmp_path), 'node')
    assert rc.cpus.numa_l3() == {0: {0, 1, 2, 3}, 1: {4, 5, 6, 7}}


def test_resctrl_node_root_option(tmp_path: object) -> None:
    elsewhere = os.path.join(str(tmp_path), 'elsewhere')
    cpu_root = _sysfs(str(tmp_path), XEON, node_dir=elsewhere)
    rc = Resctrl(str(tmp_path), cpu_root, sysfs_node_root=elsewhere)
    assert rc.cpus.numa_l3() == {0: {0}, 1: {1}}
    assert Resctrl(str(tmp_path), cpu_root).cpus.numa_l3() == {}
    assert Resctrl(str(tmp_path), cpu_root,
                   sysfs_node_root='/nonexistent').cpus.cpu_nodes() == {}


def test_resctrl_from_settings_passes_the_node_root() -> None:
    from ovs_rdt.conf import Settings

    settings = Settings.defaults()
    assert settings.resctrl.sysfs_node_root is None
    assert Resctrl.from_settings(settings).cpus.node_root() == \
        '/sys/devices/system/node'


# -- cross-check: what Placement counts vs the hook and the allocator -----------
def _node(platform: Platform, system_min_ways: int, pmd: int) -> tuple:
    """The groups after "ovs-rdt apply" and the requests that keep them."""
    doms = platform.domains
    base = [Request(PMD_GROUP, ways={d: pmd for d in doms})] if pmd else []
    groups = [Group(ROOT, {d: CBM.full(platform.cbm_len) for d in doms})]
    plan = allocator.plan(platform, groups, base, system_min_ways)
    return _groups(plan), base


def _groups(plan: Any) -> list:
    return [Group(name, dict(masks), mode=plan.modes.get(name, 'shareable'))
            for name, masks in plan.l3.items()]


def _hook_request(rc: Resctrl, uuid: str, total: int,
                  cpus: list[int] | None) -> allocator.Request:
    """What the libvirt hook asks the allocator for a flavor asking
    ``total`` ways in all (``GuestCache.request``).
    """
    cputune = '' if cpus is None else '<cputune>%s</cputune>' % ''.join(
        "<vcpupin vcpu='%d' cpuset='%s'/>" % (i, ','.join(map(str, cpus)))
        for i in range(2))
    dom = domain.parse(xml(nova({'resources:CUSTOM_RDT_L3_WAY': str(total),
                                 'resources:CUSTOM_RDT_CLOSID': '1'}),
                           cputune=cputune, uuid=uuid))
    spec = domain.resolve(dom, None)
    assert spec is not None and spec.l3_total == total

    class Manager:
        resctrl = rc
    return GuestCache(None, print, Manager()).request(  # type: ignore
        dom, spec)


def test_the_hook_spreads_a_flavors_ways_in_all(tmp_path: object) -> None:
    """resources:CUSTOM_RDT_L3_WAY in the domain XML: the ways in all,
    spread over the cache groups of the vCPUs' CPUs (EPYC: a node's CCDs).
    """
    base = str(tmp_path)
    cpu_root = _sysfs(base, EPYC)
    make_tree(os.path.join(base, 'resctrl'), cbm_len=11, domains=range(8),
              mba=False)
    rc = Resctrl(os.path.join(base, 'resctrl'), cpu_root)
    uuid = '00000000-0000-4000-8000-000000000001'
    # pinned to node 1's CPUs: its one group, every CCD of it
    assert _hook_request(rc, uuid, 5, list(range(8, 16))).ways == \
        dict.fromkeys((4, 5, 6, 7), 5)
    # unpinned: both groups, 3 + 2
    assert _hook_request(rc, uuid, 5, None).ways == {
        **dict.fromkeys((0, 1, 2, 3), 3), **dict.fromkeys((4, 5, 6, 7), 2)}
    with pytest.raises(InvalidValue) as err:
        _hook_request(rc, uuid, 12, list(range(8)))
    assert str(err.value) == (
        "flavor m1.nfv extra spec resources:CUSTOM_RDT_L3_WAY: '12' is more "
        "than this host's L3 caches hold: its vCPUs span 1 cache group, 11 "
        "ways each")


def _cross_check(tmp: str, seed: int,
                 layout: Callable[[int], tuple[int, int]]) -> dict[str, int]:
    """Random VMs pinned to random NUMA nodes (vCPUs on all their CPUs, as
    Nova pins a NUMA instance with shared CPUs) or not, each asking ways in
    all, come and go.

    Placement admits a VM while its ways in all and a CLOSID fit what
    ``provider-config``'s inventory leaves; the node is the hook's request
    (its spread over the cache groups of its vCPUs through sysfs) and the
    allocator.  Counts: ``waste`` (the node would take one Placement
    refuses), ``group`` (Placement admits one the node refuses because the
    cache group Nova pinned it to lacks its share: the hook refuses, Nova
    reschedules), ``other`` (the node refuses for another reason).
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
    mapping = rc.cpus.numa_l3()
    cache_groups = topology.cache_groups(mapping, platform.domains)
    nodes = sorted(mapping)
    node_cpus = {n: [c for c in _cpus(layout) if layout(c)[0] == n]
                 for n in nodes}
    system_min_ways = rnd.randint(1, 3)
    pmd = rnd.choice([0, 1, 2])
    found = dict.fromkeys(('admitted', 'waste', 'group', 'other'), 0)
    try:
        groups, base = _node(platform, system_min_ways, pmd)
    except AllocationError:
        return found
    # the reserve provider-config publishes: what one more VM cannot have
    # (allocator.room, the one free count; no VMs yet)
    reserved = {d: width - n for d, n in allocator.room(
        platform, groups, base, system_min_ways).items()}
    inv = provider_config.inventory(platform, groups, reserved, cache_groups)
    ways_free = inv['CUSTOM_RDT_L3_WAY']['total'] - \
        inv['CUSTOM_RDT_L3_WAY']['reserved']
    closids_free = inv['CUSTOM_RDT_CLOSID']['total'] - \
        inv['CUSTOM_RDT_CLOSID']['reserved']
    room = {tuple(g): width - max(reserved[d] for d in g)
            for g in cache_groups}
    vms: dict[str, tuple[allocator.Request, int, dict]] = {}
    for step in range(25):
        if vms and rnd.random() < .3:
            vms.pop(rnd.choice(sorted(vms)))
            groups = _groups(allocator.plan(
                platform, groups, base + [r for r, _, _ in vms.values()],
                system_min_ways))
            continue
        total = rnd.randint(1, width * len(cache_groups))
        cells = None
        if rnd.random() < .7:
            cells = frozenset(rnd.sample(nodes, rnd.randint(1, 2)))
        cpus = None if cells is None else \
            [c for n in sorted(cells) for c in node_cpus[n]]
        uuid = '%08d-0000-4000-8000-%012d' % (seed, step)
        try:
            req = _hook_request(rc, uuid, total, cpus)
        except InvalidValue:    # a share above the CBM: no host holds it
            continue
        # Placement counts what the node holds: a share per group spanned
        share = {g: max((req.ways.get(d, 0) for d in g), default=0)
                 for g in room}
        assert sum(share.values()) == total, (req.ways, cache_groups)
        used = sum(t for _, t, _ in vms.values())
        admitted = used + total <= ways_free and len(vms) < closids_free
        try:
            plan = allocator.plan(platform, groups, base + [
                r for r, _, _ in vms.values()] + [req], system_min_ways)
        except AllocationError:
            if admitted:
                held = {g: sum(s[g] for _, _, s in vms.values())
                        for g in room}
                per_group = any(held[g] + share[g] > room[g] for g in room)
                found['group' if per_group else 'other'] += 1
            continue
        found['admitted'] += admitted
        found['waste'] += not admitted
        groups = _groups(plan)
        vms[req.name] = (req, total, share)
    return found


@pytest.mark.parametrize('layout', [SNC3, EPYC, XEON],
                         ids=['snc3', 'epyc', 'xeon'])
def test_placement_hook_and_allocator_agree(layout: Callable, tmp_path: object
                                            ) -> None:
    """Placement never refuses what the node holds, and the node refuses
    what Placement admits only for a cache group's fit.
    """
    results = [_cross_check(str(tmp_path), seed, layout)
               for seed in range(40)]
    total = {k: sum(r[k] for r in results) for k in results[0]}
    assert total['waste'] == 0, total
    assert total['other'] == 0, total
    assert total['admitted'] > 100, total
    assert total['group'] > 0, total    # the test sees what the hook refuses


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
