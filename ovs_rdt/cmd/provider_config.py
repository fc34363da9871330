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
from ovs_rdt.core import topology
from ovs_rdt.core.model import UNIT_PERCENT, Group, Platform
from ovs_rdt.core.plan import Plan
from ovs_rdt.exceptions import ConfigError, InvalidValue
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


def inventory(platform: Platform, groups: list[Group],
              per_domain: dict[int, int]) -> dict[str, dict]:
    """Placement inventories (resource class -> fields) of the node;
    ``per_domain``: the ways VMs cannot have there
    (:meth:`CacheManager.free_ways`).
    """
    total = platform.cbm_len * len(platform.domains)
    reserved = sum(per_domain.values())
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
    from ovs_rdt.cmd.report import reserved_by_domain

    free = manager.free_ways((platform, now))
    per_dom = {d: f['reserved_ways'] for d, f in free.items()}
    inv = inventory(platform, groups, per_dom)
    comment = (
        'Nova provider config written by "ovs-rdt provider-config" from %s.\n'
        'L3: %d cache domain(s) x %d ways; reserved per domain: %s%s.\n'
        'Flavors ask for resources:%s=<rdt:l3_ways x domains spanned> and '
        'resources:%s=1.'
        % (resctrl.root, len(platform.domains), platform.cbm_len,
           ' '.join('%d=%d' % kv for kv in sorted(per_dom.items())),
           reserved_by_domain(free), RC_WAYS, RC_CLOSIDS))
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
