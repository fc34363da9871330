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


def test_not_bound_to_open_vswitch_units() -> None:
    """The agent follows OvS restarts itself and reconciles VM groups
    without OvS; Requires= would stop it with OvS and refuse to start it
    where OvS has no systemd units.
    """
    u = unit()['Unit']
    assert 'Requires' not in u and 'BindsTo' not in u
    assert 'ovs-vswitchd.service' in u['Wants']
    assert 'ovs-vswitchd.service' in u['After']


def test_service_signals() -> None:
    s = unit()['Service']
    assert s['ExecReload'].endswith('kill -HUP $MAINPID')
    assert s['KillSignal'] == 'SIGTERM' and s['KillMode'] == 'process'
    assert s['Restart'] == 'on-failure'
    assert s['ExecStart'].split()[0].endswith('/ovs-rdt-agent')
