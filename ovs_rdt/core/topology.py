"""NUMA nodes and L3 cache domains: which L3 caches a node's CPUs use.

Pure: no I/O, no oslo, no nova.  The node reads the two maps it is built
from in sysfs (:meth:`ovs_rdt.resctrl.Resctrl.numa_l3`).

The rule: NUMA node N uses L3 domain D when one of N's CPUs has D as its
L3 cache (``cpuC/cache/index3/id``).  A VM whose vCPUs may run on the
CPUs of some nodes holds ways on every L3 domain of those nodes, which is
what the libvirt hook takes for vCPUs pinned to those nodes' CPUs
(:meth:`ovs_rdt.core.model.Platform.domains_of_cpus`).  So:

* Xeon without Sub-NUMA Clustering: one node per socket, one L3 per socket,
  ``0:0;1:1``.
* Sub-NUMA Clustering (SNC3 on Xeon 6): three nodes share one L3,
  ``0:0;1:0;2:0;3:1;4:1;5:1``; two cells of a VM on nodes 0 and 1 hold
  ways on L3 0 once.
* AMD EPYC in NPS1: one node per socket, one L3 per CCD,
  ``0:0-11;1:12-23``; a VM on node 0 holds ways on each of L3 0-11.

A node the mapping does not know (no CPU) is taken to use every L3 domain:
the conservative answer.

What Placement counts (``CUSTOM_RDT_L3_WAY``, ``ovs-rdt provider-config``)
is a way on every L3 cache of one *cache group*: the L3 caches of the NUMA
nodes that share one (:func:`cache_groups`: a socket on a Xeon, with Sub-NUMA
Clustering or not; the CCDs of one NUMA node on an AMD EPYC).  An instance
pinned to one NUMA node spans one group, whatever the host's shape, so one
flavor counts the same everywhere; an instance asking ``N`` such ways in all
holds them spread evenly over the groups its vCPUs span (:func:`spread`).
"""
from __future__ import annotations

from typing import Iterable, Mapping

#: NUMA node id -> the L3 domain ids its CPUs use.
NumaL3 = Mapping[int, frozenset[int]]


def from_cpus(cpu_node: Mapping[int, int],
              cpu_l3: Mapping[int, int]) -> dict[int, frozenset[int]]:
    """node -> L3 domains of its CPUs, from CPU -> node and CPU -> L3 maps.

    A CPU missing from either map (offline: no ``cache/`` in sysfs) is
    skipped; a node none of whose CPUs has a known L3 is left out.
    """
    found: dict[int, set[int]] = {}
    for cpu, node in cpu_node.items():
        l3 = cpu_l3.get(cpu)
        if l3 is not None:
            found.setdefault(node, set()).add(l3)
    return {node: frozenset(l3s) for node, l3s in sorted(found.items())}


def by_l3(numa_l3: NumaL3) -> dict[int, frozenset[int]]:
    """L3 domain -> the NUMA nodes whose CPUs use it (the inverse map)."""
    found: dict[int, set[int]] = {}
    for node, l3s in numa_l3.items():
        for l3 in l3s:
            found.setdefault(l3, set()).add(node)
    return {l3: frozenset(nodes) for l3, nodes in sorted(found.items())}


def domains(numa_l3: NumaL3) -> frozenset[int]:
    """Every L3 domain of the mapping."""
    out: set[int] = set()
    for l3s in numa_l3.values():
        out |= l3s
    return frozenset(out)


def l3_of(numa_l3: NumaL3, nodes: Iterable[int]) -> frozenset[int]:
    """The L3 domains a VM on ``nodes`` holds ways on (each counted once).

    A node not in the mapping: every L3 domain of the mapping.
    """
    out: set[int] = set()
    for node in nodes:
        l3s = numa_l3.get(node)
        if l3s is None:
            return domains(numa_l3)
        out |= l3s
    return frozenset(out)


def nodes_per_l3(numa_l3: NumaL3) -> int:
    """The most NUMA nodes sharing one set of L3 domains: above 1 with
    Sub-NUMA Clustering (each node a slice of one socket's L3).
    """
    counts: dict[frozenset[int], int] = {}
    for l3s in numa_l3.values():
        counts[l3s] = counts.get(l3s, 0) + 1
    return max(counts.values(), default=1)


def is_identity(numa_l3: NumaL3) -> bool:
    """Whether node N uses exactly L3 N for every node (no mapping needed)."""
    return all(l3s == {node} for node, l3s in numa_l3.items())


def cache_groups(numa_l3: NumaL3, domains: Iterable[int]
                 ) -> list[frozenset[int]]:
    """The L3 ``domains`` in cache groups, by their lowest domain.

    A group: the L3 domains of NUMA nodes that share an L3 domain, closed
    under sharing (a socket's one L3 and its SNC nodes; the CCDs of one
    EPYC node).  A domain no node of ``numa_l3`` names is a group of its
    own (no NUMA information: each L3 domain is a group).
    """
    owner = {d: d for d in domains}

    def root(d: int) -> int:
        while owner[d] != d:
            owner[d] = owner[owner[d]]
            d = owner[d]
        return d

    for l3s in numa_l3.values():
        known = sorted(d for d in l3s if d in owner)
        for d in known[1:]:
            a, b = root(known[0]), root(d)
            owner[max(a, b)] = min(a, b)
    found: dict[int, set[int]] = {}
    for d in owner:
        found.setdefault(root(d), set()).add(d)
    return [frozenset(found[r]) for r in sorted(found)]


def spread(total: int, groups: Iterable[frozenset[int]],
           spanned: Iterable[int]) -> dict[int, int]:
    """Ways per L3 domain of an instance holding ``total`` ways in all
    (``CUSTOM_RDT_L3_WAY``) whose vCPUs use the ``spanned`` domains.

    ``total`` is split evenly over the cache groups (:func:`cache_groups`)
    it spans, one more for each of the first groups (lowest domain first)
    when it does not divide; every spanned domain of a group gets the
    group's share.  A domain whose share is 0 is left out (the instance
    holds no ways there).  The shares add up to ``total``: what Placement
    counts is what the node holds.
    """
    wanted = set(spanned)
    mine = [g & wanted for g in groups if g & wanted]
    if not mine:
        return {}
    share, extra = divmod(total, len(mine))
    out = {}
    for i, group in enumerate(mine):
        ways = share + (i < extra)
        if ways:
            out.update(dict.fromkeys(sorted(group), ways))
    return out
