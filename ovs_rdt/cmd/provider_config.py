"""``ovs-rdt provider-config``: the node's cache inventory for Placement.

Writes a Nova provider config file (schema 1.0, read by nova-compute from
``[compute] provider_config_location``, default /etc/nova/provider_config/)
that adds to the compute node's resource provider:

* ``CUSTOM_RDT_L3_WAY``: L3 ways, ``total`` = CBM length x cache domains,
  ``reserved`` = the ways VMs cannot have: per domain, the default group's
  minimum (``[allocation] system_min_ways``, or ``system_l3_cbm``) plus the
  ways held by the pools, the OvS PMD group and other tools' groups, and
  the ways the hardware shares with I/O where VMs' isolated groups cannot
  go: CBM length minus what the node allocator would give VMs (the per
  domain value is also the filter's ``rdt_system_ways``).
* ``CUSTOM_RDT_CLOSID``: classes of service, ``reserved`` = every group
  that is not a VM's (the default group included); one per VM.
* traits ``CUSTOM_RDT_L3_CAT`` (and ``CUSTOM_RDT_MBA`` with MBA).

Its header also names, for the scheduler filter, the NUMA node to L3 cache
domain map read from sysfs (:mod:`ovs_rdt.core.topology`), as the aggregate
metadata line ``rdt_numa_l3=0:0-11;1:12-23`` (Sub-NUMA Clustering, AMD
CCDs): Placement provider configs carry inventories and traits only.

Placement sums the ways over the domains: a flavor asks for
``resources:CUSTOM_RDT_L3_WAY`` = ``rdt:l3_ways`` x the domains the VM spans
(every domain unless it has a NUMA topology) and
``resources:CUSTOM_RDT_CLOSID=1``.  The layout is what ``ovs-rdt apply``
makes of the configuration (pools counted even before the agent created
them), so pools and PMD ways must be configured before this runs.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from ovs_rdt import atomicfile
from ovs_rdt.cmd import say
from ovs_rdt.core import allocator, layout, topology
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import ROOT, UNIT_PERCENT, Group, Platform, Request
from ovs_rdt.core.model import held_masks, vm_group
from ovs_rdt.core.plan import Plan
from ovs_rdt.exceptions import AllocationError, ConfigError, InvalidValue
from ovs_rdt.exceptions import RDTError
from ovs_rdt.inputs.numa_l3 import to_text as numa_l3_text
from ovs_rdt.inputs import uuids
from ovs_rdt.manager import CacheManager
from ovs_rdt import VM_GROUP_PREFIX

RC_WAYS = 'CUSTOM_RDT_L3_WAY'
RC_CLOSIDS = 'CUSTOM_RDT_CLOSID'
TRAIT_CAT = 'CUSTOM_RDT_L3_CAT'
TRAIT_MBA = 'CUSTOM_RDT_MBA'
#: The kind of memory-bandwidth cap a host takes, by request field.
TRAIT_MB_KIND = {'mb_percent': 'CUSTOM_RDT_MB_PERCENT',
                 'mb_mbps': 'CUSTOM_RDT_MB_MBPS'}
COMPUTE_NODE = '$COMPUTE_NODE'
#: The aggregate metadata key (and [ovs_rdt] option) of the NUMA node to L3
#: map: a provider config cannot carry it (Placement has no such field).
NUMA_L3_KEY = 'rdt_numa_l3'
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
              system_cbm: dict[int, CBM] | None = None) -> dict[str, dict]:
    """Placement inventories (resource class -> fields) of the node."""
    total = platform.cbm_len * len(platform.domains)
    reserved = sum(reserved_ways(platform, groups, system_min_ways,
                                 system_cbm).values())
    free = max(1, total - reserved)
    not_vms = sum(1 for g in groups if not g.name.startswith(VM_GROUP_PREFIX))
    return {
        RC_WAYS: {'total': total, 'reserved': reserved,
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


def traits_of(platform: Platform) -> list[str]:
    """L3 CAT, MBA, and the kind of MB cap the host takes: a flavor with
    ``rdt:mb_mbps`` also asks ``trait:CUSTOM_RDT_MB_MBPS=required`` so
    Placement only offers hosts that take bandwidths (doc/nova.md).
    """
    out = [TRAIT_CAT]
    mba = platform.mb
    if mba is not None:
        out.append(TRAIT_MBA)
        if mba.unit != UNIT_PERCENT or mba.delay_linear:
            out.append(TRAIT_MB_KIND[mba.field])
    return out


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
    inv = inventory(platform, groups, min_ways, system_cbm)
    per_dom = reserved_ways(platform, groups, min_ways, system_cbm)
    comment = (
        'Nova provider config written by "ovs-rdt provider-config" from %s.\n'
        'L3: %d cache domain(s) x %d ways; reserved per domain: %s.\n'
        'Flavors ask for resources:%s=<rdt:l3_ways x domains spanned> and '
        'resources:%s=1.'
        % (resctrl.root, len(platform.domains), platform.cbm_len,
           ' '.join('%d=%d' % kv for kv in sorted(per_dom.items())),
           RC_WAYS, RC_CLOSIDS))
    numa_l3 = resctrl.numa_l3()
    if numa_l3:
        comment += ('\nNova filter: aggregate metadata %s=%s (NUMA node:L3 '
                    'cache domains).' % (NUMA_L3_KEY, numa_l3_text(numa_l3)))
        if not topology.is_identity(numa_l3):
            say('provider-config', 'NUMA node N is not L3 cache domain N on '
                'this host: set aggregate metadata %s=%s on an aggregate '
                'holding it (or [ovs_rdt] %s in nova.conf), else the Nova '
                'filter takes node N for L3 domain N'
                % (NUMA_L3_KEY, numa_l3_text(numa_l3), NUMA_L3_KEY),
                'warning')
    text = to_yaml(document(inv, traits_of(platform), uuid, name), comment)
    if args.output in (None, '-'):
        sys.stdout.write(text)
    else:
        _write_atomic(args.output, text)
    return 0


def _write_atomic(path: str, text: str) -> None:
    try:
        atomicfile.write(path, text)
    except OSError as exc:
        raise RDTError('cannot write %s: %s' % (path, exc.strerror or exc)) \
            from None
