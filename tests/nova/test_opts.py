"""The [ovs_rdt] nova.conf options."""
from __future__ import annotations

import os

from oslo_config import cfg

from nova_plugin import opts


def test_list_opts() -> None:
    [(group, options)] = opts.list_opts()
    assert group.name == 'ovs_rdt'
    assert [o.name for o in options] == [
        'rdt_l3_ways', 'rdt_system_ways', 'rdt_closids',
        'rdt_reserved_closids', 'rdt_pools']
    assert all(o.help for o in options)


def test_read_from_nova_conf(tmp_path: os.PathLike) -> None:
    path = os.path.join(str(tmp_path), 'nova.conf')
    with open(path, 'w') as fh:
        fh.write('[ovs_rdt]\nrdt_l3_ways = 11\nrdt_closids = 16\n'
                 'rdt_pools = hp,noisy\n')
    conf = cfg.ConfigOpts()
    opts.register_opts(conf)
    conf(['--config-file', path])
    assert conf.ovs_rdt.rdt_l3_ways == 11
    assert conf.ovs_rdt.rdt_system_ways == 2
    assert conf.ovs_rdt.rdt_reserved_closids == 1
    assert conf.ovs_rdt.rdt_pools == ['hp', 'noisy']


def test_filter_registers_them_on_nova_conf() -> None:
    from nova_plugin import filters

    assert filters.CONF.ovs_rdt.rdt_reserved_closids == 1
