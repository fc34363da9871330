"""The ``[ovs_rdt]`` options of nova.conf (read by the scheduler filter).

Host aggregate metadata with the same names wins over these, key by key.
``list_opts()`` is the ``oslo.config.opts`` entry point
(``ovs_rdt.nova = nova_plugin.opts:list_opts``) for oslo-config-generator.
"""
from __future__ import annotations

from typing import Any

from oslo_config import cfg
from oslo_config import types

from ovs_rdt.exceptions import RDTError
from ovs_rdt.inputs import host_capacity
from ovs_rdt.inputs import numa_l3

GROUP = 'ovs_rdt'


class WholeNumber(types.Integer):
    """oslo.config's Integer, read with ovs-rdt's one rule for the option
    (:mod:`ovs_rdt.inputs.host_capacity`, which aggregate metadata uses too).

    ``int()`` (oslo's own parser) takes ``+3``, ``0_3`` and ``٣``, which
    the node, the hook and the extra specs refuse; nova.conf refuses them
    alike, with the same message.
    """

    def __init__(self, name: str) -> None:
        low, high = host_capacity.RANGES[name]
        super().__init__(min=low, max=high, type_name='whole number')
        self.name = name
        self.field = '[%s] %s' % (GROUP, name)

    def __call__(self, value: Any) -> Any:
        if value is None or isinstance(value, int):
            return super().__call__(value)
        try:
            return host_capacity.parse(self.name, str(value), self.field)
        except RDTError as exc:
            raise ValueError(str(exc)) from None


class NumaL3Map(types.String):
    """A NUMA node to L3 map (``0:0-11;1:12-23``), checked by ovs-rdt's
    rule (:mod:`ovs_rdt.inputs.numa_l3`) and kept as text.
    """

    def __init__(self, name: str) -> None:
        super().__init__(type_name='NUMA node to L3 map')
        self.field = '[%s] %s' % (GROUP, name)

    def __call__(self, value: Any) -> Any:
        value = super().__call__(value)
        try:
            numa_l3.parse(value, self.field)
        except RDTError as exc:
            raise ValueError(str(exc)) from None
        return value


def _whole(name: str, **kwargs: Any) -> cfg.Opt:
    return cfg.Opt(name, type=WholeNumber(name), **kwargs)


ovs_rdt_group = cfg.OptGroup(
    GROUP, title='ovs-rdt cache allocation (scheduler)',
    help='Cache allocation capacity of the compute hosts, for the '
         'RDTCacheFilter scheduler filter (nova_plugin.filters.'
         'RDTCacheFilter). Each value can be set per host aggregate instead, '
         'as aggregate metadata with the same name: a host takes a value from '
         'its aggregates first and falls back to the option here. A host with '
         'neither rdt_l3_ways nor rdt_closids fails every request that needs '
         'cache ways or a CLOSID.')

OPTS = [
    _whole(
        'rdt_l3_ways',
        help='Ways of one L3 cache domain (socket): the length of the L3 '
             'capacity bitmask, /sys/fs/resctrl/info/L3/cbm_mask (11 for '
             '"7ff"). Unset: hosts without the rdt_l3_ways aggregate metadata '
             'have no cache capacity.'),
    _whole(
        'rdt_system_ways', default=2,
        help='Ways of each L3 cache domain kept out of VM allocations: the '
             'default resctrl group\'s minimum ([allocation] system_min_ways '
             'in ovs-rdt.conf), the OvS PMD group (rdt-pmd-l3-ways), the '
             'ways of the shared pools, and the ways the hardware shares '
             'with I/O (info/L3/shareable_bits), which isolated groups cannot '
             'have. "ovs-rdt provider-config" on a compute prints the exact '
             'value ("reserved per domain"). Instances with rdt:l3_ways share '
             'the rest, rdt_l3_ways - rdt_system_ways per domain.'),
    _whole(
        'rdt_closids',
        help='Classes of service (CLOSIDs) of the platform, '
             '/sys/fs/resctrl/info/L3/num_closids (16 on Xeon Gold 6230). '
             'Every resctrl group, the default one included, holds one.'),
    _whole(
        'rdt_reserved_closids', default=1,
        help='CLOSIDs held by groups that are not VMs: 1 for the default '
             'group, plus 1 for the OvS PMD group, plus 1 for each pool the '
             'node creates up front (the pools listed in rdt_pools), plus any '
             'group made by another tool.'),
    cfg.ListOpt(
        'rdt_pools', default=None,
        help='The shared pools configured on the hosts ([allocation] pools '
             'of ovs-rdt.conf; the node creates them all, and refuses '
             'instances asking for any other pool), their CLOSIDs counted in '
             'rdt_reserved_closids. A request for a pool not listed fails '
             'the host. Unset (and no rdt_pools aggregate metadata): the '
             'pools are unknown; a pool with no instance on a host is then '
             'assumed to take one more CLOSID there.'),
    _whole(
        'rdt_l3_way_kib',
        help='KiB of L3 cache one way holds, on the hosts with the smallest '
             'ways of the cloud: how instances asking for a size '
             '(rdt:l3_kib) are counted, as ceil(rdt:l3_kib / rdt_l3_way_kib) '
             'ways on each domain of any host. A node reserves the fewest of '
             'its own ways that hold the size, never more than that count, so '
             'no host is over-promised; hosts with larger ways are counted '
             'the difference too many. "ovs-rdt status" shows a node\'s way '
             'size (e.g. 2560 on Xeon Gold 6230, 3072 on E7-8890 v4). One '
             'value for the cloud, not aggregate metadata. Unset: requests '
             'for rdt:l3_kib fail every host.'),
    cfg.Opt(
        'rdt_numa_l3', type=NumaL3Map('rdt_numa_l3'), default=None,
        help='Which L3 cache domains the CPUs of each host NUMA node use, as '
             'NODE:L3S items separated by ";" (L3S in CPU-list syntax): '
             '"0:0;1:0;2:0;3:1;4:1;5:1" for a two-socket Xeon with Sub-NUMA '
             'Clustering (SNC3: three nodes share a socket\'s L3), '
             '"0:0-11;1:12-23" for a two-socket AMD EPYC 9654 in NPS1 (12 '
             'L3s, one per CCD, per node). "ovs-rdt provider-config" on a '
             'compute prints it. An instance pinned to NUMA cells holds its '
             'ways on each L3 domain of those nodes, once; an unpinned one on '
             'every L3 domain listed. Unset: each NUMA node is the L3 cache '
             'domain with the same id (Xeons without Sub-NUMA Clustering).'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(ovs_rdt_group)
    conf.register_opts(OPTS, group=ovs_rdt_group)


def list_opts() -> list[tuple[cfg.OptGroup, list[cfg.Opt]]]:
    return [(ovs_rdt_group, OPTS)]
