"""Unit tests of the emulator's newer platform pieces (profiles, schemas, kstrtobool)."""
from __future__ import annotations

import pytest

from ovs_rdt.emulator import kparse
from ovs_rdt.emulator.profiles import PROFILES
from ovs_rdt.emulator.schemas import (Mount, build_schemas, name_width,
                                      parse_mount_options)

GNR = PROFILES['xeon-6-granite-rapids-snc3']
GENOA = PROFILES['epyc-9654']


def test_snc3_geometry() -> None:
    assert GNR.num_cpus == 512 and GNR.domains == [0, 1] and GNR.nodes == list(range(6))
    assert [len(GNR.cpus_of_node(n)) for n in GNR.nodes] == [86, 86, 84] * 2
    assert GNR.node_of(42) == 0 and GNR.node_of(43) == 1 and GNR.node_of(299) == 1
    assert GNR.l3_of_node(5) == 1 and GNR.mon_num_rmids == 85 and GNR.hw_mon_scale == 21


def test_epyc_geometry() -> None:
    assert GENOA.domains == list(range(24))
    assert GENOA.l3_of(7) == 0 and GENOA.l3_of(8) == 1 and GENOA.l3_of(96) == 12
    assert GENOA.l3_of(192 + 8) == 1 and GENOA.cpus_of(23)[-1] == 383
    assert GENOA.nodes == [0, 1] and GENOA.node_of(200) == 0


@pytest.mark.parametrize('text, value', [
    ('1', True), ('y\n', True), ('On', True), ('0', False), ('no', False), ('off', False)])
def test_kstrtobool(text: str, value: bool) -> None:
    assert kparse.kstrtobool(text) is value


@pytest.mark.parametrize('text', ['', 'o', 'enable', '2'])
def test_kstrtobool_rejects(text: str) -> None:
    with pytest.raises(kparse.ParseError):
        kparse.kstrtobool(text)


def test_schema_list_order_and_width() -> None:
    gold = PROFILES['xeon-gold-6230']
    plain = build_schemas(gold, Mount())
    assert [s.name for s in plain] == ['MB', 'L3'] and name_width(gold, plain) == 6
    with_cdp = build_schemas(gold, Mount(cdp=True))
    assert [(s.name, s.num_closid) for s in with_cdp] == [
        ('MB', 16), ('L3DATA', 8), ('L3CODE', 8)]
    assert [s.name for s in build_schemas(GENOA, Mount())] == ['SMBA', 'MB', 'L3']


def test_mount_options() -> None:
    gold = PROFILES['xeon-gold-6230']
    assert parse_mount_options(gold, 'cdp,mba_MBps') == Mount(cdp=True, mba_sc=True)
    assert parse_mount_options(gold, '') == Mount()
    for profile, text in ((gold, 'nope'), (GENOA, 'mba_MBps'), (GNR, 'mba_MBps'),
                          (gold, 'cdpl2')):
        with pytest.raises(ValueError):
            parse_mount_options(profile, text)
