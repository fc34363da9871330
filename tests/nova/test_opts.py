"""The [ovs_rdt] nova.conf options."""
from __future__ import annotations

import os

from oslo_config import cfg
import pytest

from nova_plugin import opts
from tests.inputs_table import ROWS, Row


def test_list_opts() -> None:
    [(group, options)] = opts.list_opts()
    assert group.name == 'ovs_rdt'
    assert [o.name for o in options] == [
        'rdt_l3_ways', 'rdt_system_ways', 'rdt_closids',
        'rdt_reserved_closids', 'rdt_pools', 'rdt_l3_way_kib',
        'rdt_numa_l3']
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


def _in_a_file(value: str) -> bool:
    """Whether an INI file can carry ``value`` as written.

    oslo strips the blanks around a value; quotes and line breaks are its
    syntax.
    """
    return bool(value.strip()) and value == value.strip() and \
        '\n' not in value and value[0] not in '"\''


WAYS_ROWS = [row for row in ROWS if list(row.values) == ['l3_ways']
             and _in_a_file(row.values['l3_ways'])]


@pytest.mark.parametrize('row', WAYS_ROWS, ids=repr)
def test_whole_numbers_in_nova_conf_follow_the_one_rule(
        row: Row, tmp_path: os.PathLike) -> None:
    """``rdt_l3_ways`` in nova.conf takes and refuses what rdt:l3_ways does.

    oslo's IntOpt would take ``+3`` and ``٣``; the message is every
    surface's, naming the option.
    """
    raw = row.values['l3_ways']
    path = os.path.join(str(tmp_path), 'nova.conf')
    with open(path, 'w', encoding='utf-8') as fh:
        fh.write('[ovs_rdt]\nrdt_l3_ways = %s\n' % raw)
    conf = cfg.ConfigOpts()
    opts.register_opts(conf)
    conf(['--config-file', path])
    if row.ok:
        assert conf.ovs_rdt.rdt_l3_ways == row.expect[0]
        return
    with pytest.raises(cfg.ConfigFileValueError) as err:
        conf.ovs_rdt.rdt_l3_ways
    assert row.message({'l3_ways': '[ovs_rdt] rdt_l3_ways'}) in str(err.value)


def test_the_surface_rows_are_not_all_skipped() -> None:
    assert len(WAYS_ROWS) >= 15
    assert any(r.ok for r in WAYS_ROWS) and any(not r.ok for r in WAYS_ROWS)
