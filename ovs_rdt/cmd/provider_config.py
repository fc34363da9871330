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
  ways the hardware shares with I/O where VMs' isolated groups cannot go:
  the CBM length less the ways VMs hold and the largest request the node
  allocator places there (:meth:`CacheManager.free_ways`, the one free
  count ``ovs-rdt status`` and the hook's refusals show too).
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
from ovs_rdt.cmd.report import reserved_by_domain
from ovs_rdt.conf import Settings
from ovs_rdt.core import topology
from ovs_rdt.core.model import UNIT_PERCENT, Group, Platform
from ovs_rdt.core.plan import Plan
from ovs_rdt.exceptions import ConfigError, InvalidValue
from ovs_rdt.exceptions import RDTError
from ovs_rdt.inputs import cpulists, uuids
from ovs_rdt.inputs.placement import TRAIT_CAT, TRAIT_MB_KIND, TRAIT_MBA
from ovs_rdt.inputs.placement import pool_trait
from ovs_rdt.inputs.request import RC_CLOSIDS, RC_WAYS
from ovs_rdt.manager import CacheManager
from ovs_rdt import VM_GROUP_PREFIX

COMPUTE_NODE = '$COMPUTE_NODE'
DEFAULT_OUTPUT = '/etc/nova/provider_config/ovs-rdt.yaml'


def inventory(platform: Platform, groups: list[Group],
              per_domain: dict[int, int],
              cache_groups: list[frozenset[int]] | None = None
              ) -> dict[str, dict]:
    """Placement inventories (resource class -> fields) of the node: ways
    in ``cache_groups`` units (:func:`ovs_rdt.core.topology.cache_groups`;
    None: each L3 domain a group), each group reserving what VMs cannot
    have on its tightest L3 domain (``per_domain``: the ways VMs cannot
    have there, :meth:`CacheManager.free_ways`); CLOSIDs.
    """
    if cache_groups is None:
        cache_groups = [frozenset({d}) for d in platform.domains]
    total = platform.cbm_len * len(cache_groups)
    held = sum(max(per_domain[d] for d in group) for group in cache_groups)
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
        'inventories': {'additional': [
            {resource_class: fields}
            for resource_class, fields in inventories.items()]},
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


def run(settings: Settings, args: argparse.Namespace) -> int:
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

    free = manager.free_ways((platform, now))
    per_dom = {d: f['reserved_ways'] for d, f in free.items()}
    numa_l3 = resctrl.cpus.numa_l3()
    cache_groups = topology.cache_groups(numa_l3, platform.domains)
    inv = inventory(platform, groups, per_dom, cache_groups)
    comment = (
        'Nova provider config written by "ovs-rdt provider-config" from %s.\n'
        'L3: %d cache domain(s) x %d ways; reserved per domain: %s%s.\n'
        '%s counts a way on every L3 cache of one cache group: %s.\n'
        'Flavors ask for resources:%s=<ways in all> and resources:%s=1.'
        % (resctrl.root, len(platform.domains), platform.cbm_len,
           ' '.join('%d=%d' % kv for kv in sorted(per_dom.items())),
           reserved_by_domain(free),
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
