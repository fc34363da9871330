"""``python3 -m nova_plugin.upgrade``'s command line (its conversation with
nova-api: tests/nova_functional/test_upgrade.py)."""
from __future__ import annotations

import pytest

from nova_plugin import upgrade


def test_takes_the_openstack_clients_credentials() -> None:
    args = upgrade.parser(['--os-auth-type', 'password']).parse_args([
        '--os-auth-type', 'password', '--os-auth-url', 'http://k/v3',
        '--os-username', 'admin', '--cache-groups', '4'])
    assert (args.os_auth_url, args.os_username, args.cache_groups) == (
        'http://k/v3', 'admin', 4)


def test_a_bad_count_of_cache_groups(capsys: pytest.CaptureFixture) -> None:
    assert upgrade.main(['--cache-groups', '0']) == 2
    assert capsys.readouterr().err == '--cache-groups: must be 1 or more\n'


def test_no_keystone_is_one_line(capsys: pytest.CaptureFixture) -> None:
    assert upgrade.main(['--os-auth-type', 'none', '--os-endpoint',
                         'http://127.0.0.1:9/v2.1']) == 1
    err = capsys.readouterr().err
    assert err.startswith('python3 -m nova_plugin.upgrade: ')
    assert err.count('\n') == 1
