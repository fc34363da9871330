"""etc/systemd/ovs-rdt-agent.service: what an operator relies on."""
from __future__ import annotations

import configparser
import os

UNIT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'etc', 'systemd', 'ovs-rdt-agent.service')


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT)
    return parser


def test_not_bound_to_open_vswitch_or_libvirt_units() -> None:
    """The agent follows OvS and libvirtd restarts itself and reconciles VM
    groups without OvS: ordered after their units, never starting them
    (Wants=) nor bound to them (Requires= would stop it with OvS and refuse
    to start it where OvS has no systemd units).
    """
    u = unit()['Unit']
    for key in ('Requires', 'BindsTo', 'Wants', 'Requisite', 'PartOf'):
        assert key not in u, key
    after = u['After'].split()
    for name in ('ovs-vswitchd.service', 'ovsdb-server.service',
                 'libvirtd.service'):
        assert name in after, name


def test_service_signals() -> None:
    s = unit()['Service']
    assert s['ExecReload'].endswith('kill -HUP $MAINPID')
    # The agent gets SIGTERM (its clean exit); nothing it started outlives
    # the unit (KillMode=process left any child running).
    assert s['KillSignal'] == 'SIGTERM' and s['KillMode'] == 'mixed'
    assert s['Restart'] == 'on-failure'
    assert s['ExecStart'].split() == [
        '/usr/bin/ovs-rdt-agent', '--config-file', '/etc/ovs-rdt/ovs-rdt.conf',
        '--config-dir', '/etc/ovs-rdt/ovs-rdt.conf.d']


def test_runtime_directory_kept_for_other_agents() -> None:
    """systemd makes /run/ovs-rdt 0700 and leaves it when the unit stops:
    agents of other resctrl roots keep their locks there.
    """
    s = unit()['Service']
    assert s['RuntimeDirectory'] == 'ovs-rdt'
    assert s['RuntimeDirectoryMode'] == '0700'
    assert s['RuntimeDirectoryPreserve'] == 'yes'
