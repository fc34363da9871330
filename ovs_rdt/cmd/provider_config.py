"""``ovs-rdt provider-config``: the node's cache inventory for Placement.

Writes a Nova provider config file (schema 1.0, read by nova-compute from
``[compute] provider_config_location``, default /etc/nova/provider_config/)
that adds to the compute node's resource provider:

* ``CUSTOM_RDT_L3_WAY``: a way on every L3 cache of one *cache group*
  (:func:`ovs_rdt.core.topology.cache_groups`: a socket on a Xeon, with
  Sub-NUMA Clustering or not; the CCDs of one NUMA node on an AMD EPYC),
  ``total`` = CBM length x cache groups, ``reserved`` = per group the ways
  VMs cannot have on its tightest L3 cache: the default group's minimum
  (``[allocation] system_min_ways``, or ``system_l3_cbm``) plus the ways
  held by the pools, the OvS PMD group and other tools' groups, and the
  ways the hardware shares with I/O where VMs' isolated groups cannot go
  (CBM length minus what the node allocator would give VMs there).
* ``CUSTOM_RDT_CLOSID``: classes of service, ``reserved`` = every group
  that is not a VM's (the default group included); one per VM.
* traits ``CUSTOM_RDT_L3_CAT`` (and ``CUSTOM_RDT_MBA`` with MBA, the kind
  of cap the host takes, ``CUSTOM_RDT_POOL_<NAME>`` per configured pool).

A flavor asks ``resources:CUSTOM_RDT_L3_WAY=N`` (ways in all: the hook
spreads them over the cache groups the VM's vCPUs span, so one flavor
counts the same on every host shape) and ``resources:CUSTOM_RDT_CLOSID=1``;
Nova claims them, across every scheduler, cell and move.  The layout is
what ``ovs-rdt apply`` makes of the configuration (pools counted even
before the agent created them), so pools and PMD ways must be configured
before this runs.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Iterable

import yaml

from ovs_rdt import atomicfile
from ovs_rdt.core import allocator, layout, topology
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import ROOT, UNIT_PERCENT, Group, Platform, Request
from ovs_rdt.core.model import held_masks, vm_group
from ovs_rdt.core.plan import Plan
from ovs_rdt.exceptions import AllocationError, ConfigError, InvalidValue
from ovs_rdt.exceptions import RDTError
from ovs_rdt.inputs import cpulists, uuids
from ovs_rdt.inputs.placement import TRAIT_CAT, TRAIT_MB_KIND, TRAIT_MBA
from ovs_rdt.inputs.placement import pool_trait
from ovs_rdt.inputs.request import RC_CLOSIDS, RC_WAYS
from ovs_rdt.manager import CacheManager
from ovs_rdt import VM_GROUP_PREFIX

COMPUTE_NODE = '$COMPUTE_NODE'
DEFAULT_OUTPUT = '/etc/nova/provider_config/ovs-rdt.yaml'
_PROBE = vm_group('00000000-0000-0000-0000-000000000000')


def reserved_ways(platform: Platform, groups: list[Group],
                  system_min_ways: int,
                  system_cbm: dict[int, CBM] | None = None) -> dict[int, int]:
    """Ways per domain that VMs cannot have.

    The CBM length minus the most ways the node allocator
    (:func:`ovs_rdt.core.allocator.plan`) would give one more VM group there,
    with every group that is not a VM's where it is (:func:`room`): the
    ways other tools' groups hold or share with ours
    (:mod:`ovs_rdt.core.foreign`), our pools and PMD group where their
    mask does not overlap the default group's (elsewhere they hold no ways
    and follow it), the default group's minimum (``system_min_ways`` or the
    ``system_cbm`` mask), and what the allocator refuses VMs: the ways the
    hardware shares with I/O (``shareable_bits``) unless the default group
    can keep its minimum there, ways split off from the free run, fewer
    ways than ``min_cbm_bits``.  VM groups are left out (Placement counts
    them as allocations); the ways VMs get add up, as the allocator moves
    groups to make a run when a request needs one.  Pools and the PMD group
    stay where they are in this count (an explicit ``l3_cbm`` cannot move):
    when they left holes, the node may place more than this says, never
    less.
    """
    return {dom: platform.cbm_len - ways for dom, ways in room(
        platform, [g for g in groups if not g.name.startswith(VM_GROUP_PREFIX)],
        system_min_ways, system_cbm).items()}


def room(platform: Platform, groups: list[Group], system_min_ways: int,
         system_cbm: dict[int, CBM] | None = None,
         isolated: bool = True) -> dict[int, int]:
    """The most ways the node allocator would give one more group on each
    domain, an ``isolated`` one or not (a pool with ``isolated = false``
    may have the ways the hardware shares with I/O): every group where it
    is, but VMs' groups, which the allocator may move to make a run.
    """
    width = platform.cbm_len
    state = list(groups)
    root = next((g for g in state if g.is_root), None)
    if root is None:
        root = Group(ROOT, {d: CBM.full(width) for d in platform.domains})
        state.insert(0, root)
    # where they are now: fixed, as the allocator keeps them; VMs' groups
    # hold their count of ways (the allocator moves them if it must)
    held = {g.name: held_masks(g, root) for g in state if g.owned}
    requests = [CacheManager.existing_request(g, root, platform.mb)
                if g.name.startswith(VM_GROUP_PREFIX) else
                Request(g.name, cbm=held[g.name], exclusive=False)
                for g in state if g.owned]
    out = {}
    for dom in platform.domains:
        area = layout.Domain(platform, dom, state, [], system_min_ways,
                             (system_cbm or {}).get(dom))
        ours = CBM.empty(width)
        for masks in held.values():
            ours |= masks.get(dom) or ours
        system = area.system_cbm or CBM.empty(width)
        taken = area.fixed | ours | system
        reserve = layout.system_reserve(area, ours)
        # an upper bound: ask the allocator, from there down
        ways = layout.free_ways(area, taken, reserve, isolated)
        while ways >= platform.min_cbm_bits and not _fits(
                platform, state, requests, dom, ways, system_min_ways,
                system_cbm, isolated):
            ways -= 1
        out[dom] = ways if ways >= platform.min_cbm_bits else 0
    return out


def _fits(platform: Platform, groups: list[Group], requests: list[Request],
          domain: int, ways: int, system_min_ways: int,
          system_cbm: dict[int, CBM] | None, isolated: bool = True) -> bool:
    probe = Request(_PROBE, ways={domain: ways}, exclusive=isolated)
    try:
        allocator.plan(platform, groups, requests + [probe], system_min_ways,
                       system_cbm)
    except AllocationError:
        return False
    return True


def inventory(platform: Platform, groups: list[Group], system_min_ways: int,
              system_cbm: dict[int, CBM] | None = None,
              cache_groups: list[frozenset[int]] | None = None
              ) -> dict[str, dict]:
    """Placement inventories (resource class -> fields) of the node: ways
    in ``cache_groups`` units (:func:`ovs_rdt.core.topology.cache_groups`;
    None: each L3 domain a group), per group what VMs may have on its
    tightest L3 domain; CLOSIDs.
    """
    reserved = reserved_ways(platform, groups, system_min_ways, system_cbm)
    if cache_groups is None:
        cache_groups = [frozenset({d}) for d in platform.domains]
    total = platform.cbm_len * len(cache_groups)
    held = sum(max(reserved[d] for d in group) for group in cache_groups)
    free = max(1, total - held)
    not_vms = sum(1 for g in groups if not g.name.startswith(VM_GROUP_PREFIX))
    return {
        RC_WAYS: {'total': total, 'reserved': held,
                  # AMD's min_cbm_bits is 0; Placement wants >= 1
                  'min_unit': max(1, min(platform.min_cbm_bits, free)),
                  'max_unit': free, 'step_size': 1, 'allocation_ratio': 1.0},
        RC_CLOSIDS: {'total': platform.num_closids,
                     'reserved': min(platform.num_closids, not_vms),
                     'min_unit': 1, 'max_unit': 1, 'step_size': 1,
                     'allocation_ratio': 1.0},
    }


def document(inventories: dict[str, dict], traits: list[str],
             uuid: str | None = None, name: str | None = None) -> dict:
    """A provider config (schema 1.0) for one provider."""
    ident = {'name': name} if name else {'uuid': uuid or COMPUTE_NODE}
    provider: dict[str, Any] = {
        'identification': ident,
        'inventories': {'additional': [{rc: fields} for rc, fields
                                       in inventories.items()]},
    }
    if traits:
        provider['traits'] = {'additional': list(traits)}
    return {'meta': {'schema_version': '1.0'}, 'providers': [provider]}


def traits_of(platform: Platform, pools: Iterable[str] = ()) -> list[str]:
    """L3 CAT, MBA, the kind of MB cap the host takes and its ``pools``:
    a flavor with ``rdt:mb_mbps`` also requires ``CUSTOM_RDT_MB_MBPS``, one
    with ``rdt:pool=hp`` ``CUSTOM_RDT_POOL_HP``, so that Placement only
    offers hosts that serve them (:mod:`ovs_rdt.inputs.placement`).
    """
    out = [TRAIT_CAT]
    mba = platform.mb
    if mba is not None:
        out.append(TRAIT_MBA)
        if mba.unit != UNIT_PERCENT or mba.delay_linear:
            out.append(TRAIT_MB_KIND[mba.field])
    return out + sorted({pool_trait(p) for p in pools})


def to_yaml(doc: dict, comment: str = '') -> str:
    """``doc`` as YAML (PyYAML's ``safe_dump``, keys in ``doc``'s order)
    under ``comment`` as ``#`` lines.
    """
    head = ''.join('# %s\n' % line if line else '#\n'
                   for line in comment.splitlines())
    return head + yaml.safe_dump(doc, sort_keys=False,
                                 default_flow_style=False)


def layout_groups(plan: Plan, groups: list[Group]) -> list[Group]:
    """The groups of the layout ``plan`` makes (``ovs-rdt apply``'s) from
    ``groups``, those of other tools as they are.
    """
    return [Group(grp, masks) for grp, masks in plan.l3.items()] + [
        g for g in groups if not g.is_root and not g.owned]


# -- the subcommand ----------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        '--output', '-o', default='-', metavar='FILE',
        help='where to write the provider config (default: standard '
             'output); nova-compute reads *.yaml from [compute] '
             'provider_config_location, e.g. %s' % DEFAULT_OUTPUT)
    who = parser.add_mutually_exclusive_group()
    # dest: not 'name', clearer beside the subcommand's own arguments
    who.add_argument(
        '--uuid', dest='provider_uuid', default=None,
        help='UUID of the resource provider to add the inventory to '
             '(default: %s, every compute node nova-compute manages here)'
             % COMPUTE_NODE)
    who.add_argument('--name', dest='provider_name', default=None,
                     help='name of the resource provider instead of --uuid')


def run(settings: Any, args: argparse.Namespace) -> int:
    uuid = getattr(args, 'provider_uuid', None)
    name = getattr(args, 'provider_name', None)
    if uuid and uuid != COMPUTE_NODE:
        try:
            uuid = uuids.parse(uuid, '--uuid')
        except InvalidValue as exc:
            raise ConfigError('%s (or %s)' % (exc, COMPUTE_NODE)) from None
    if name is not None and not 1 <= len(name) <= 200:
        raise ConfigError('--name must be 1 to 200 characters long')
    manager = CacheManager.from_settings(settings)
    resctrl = manager.resctrl
    platform, now = manager.read()
    groups = layout_groups(manager.preview(prune=True, state=(platform, now)),
                           now)  # the layout "apply" makes
    system_cbm = manager.system_masks(platform)
    min_ways = settings.allocation.system_min_ways
    numa_l3 = resctrl.numa_l3()
    cache_groups = topology.cache_groups(numa_l3, platform.domains)
    inv = inventory(platform, groups, min_ways, system_cbm, cache_groups)
    per_dom = reserved_ways(platform, groups, min_ways, system_cbm)
    comment = (
        'Nova provider config written by "ovs-rdt provider-config" from %s.\n'
        'L3: %d cache domain(s) x %d ways; reserved per domain: %s.\n'
        '%s counts a way on every L3 cache of one cache group: %s.\n'
        'Flavors ask for resources:%s=<ways in all> and resources:%s=1.'
        % (resctrl.root, len(platform.domains), platform.cbm_len,
           ' '.join('%d=%d' % kv for kv in sorted(per_dom.items())),
           RC_WAYS, '; '.join(_describe(g, numa_l3) for g in cache_groups),
           RC_WAYS, RC_CLOSIDS))
    text = to_yaml(document(inv, traits_of(
        platform, settings.allocation.pools), uuid, name), comment)
    if args.output in (None, '-'):
        sys.stdout.write(text)
    else:
        _write_atomic(args.output, text)
    return 0


def _describe(group: frozenset[int], numa_l3: topology.NumaL3) -> str:
    """``L3 0-11 (NUMA node 0)``: a cache group for the header."""
    nodes = [n for n, l3s in numa_l3.items() if l3s & group]
    return 'L3 %s%s' % (cpulists.to_text(group), ' (NUMA node %s)'
                        % cpulists.to_text(nodes) if nodes else '')


def _write_atomic(path: str, text: str) -> None:
    try:
        atomicfile.write(path, text)
    except OSError as exc:
        raise RDTError('cannot write %s: %s' % (path, exc.strerror or exc)) \
            from None
