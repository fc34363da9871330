"""The Debian packages on this host, with its own apt and dpkg, as an
operator's unattended upgrade runs them (issue 38): install, remove,
install again, purge, and the upgrade from 0.2.0's own package with an
edited configuration, each with no standard input (a prompt fails it),
``dpkg -V`` after each step and nothing left after the purge
(fixtures/host_dpkg.py puts the host back whatever happens).

What the installed package does with real daemons (agent, hook, metrics,
guests through an upgrade) runs in test_package.py's overlay root.
"""
from __future__ import annotations

import gzip
import os
import re
from typing import Iterator

import pytest

from tests.functional.fixtures.artifacts import Artifacts, NODE_PACKAGES
from tests.functional.fixtures.host_dpkg import HostDpkg

CONF = '/etc/ovs-rdt/ovs-rdt.conf'
CONF_DIR = '/etc/ovs-rdt/ovs-rdt.conf.d'
HOOK = '/etc/libvirt/hooks/qemu.d/50-ovs-rdt'
PROGRAM = '/usr/libexec/ovs-rdt/qemu-hook'
EDIT = '\n[allocation]\npools = hp\n[pool:hp]\nl3_ways = 3\n'


@pytest.fixture
def host() -> Iterator[HostDpkg]:
    if os.geteuid() != 0:
        pytest.fail('installing packages on this host needs root',
                    pytrace=False)
    h = HostDpkg().start()
    try:
        yield h
    finally:
        h.stop()


def statuses(host: HostDpkg) -> dict[str, str]:
    return host.installed()


def unit_path(host: HostDpkg) -> str:
    """Where dh_installsystemd put the unit (this Debian's place)."""
    found = [p for p in host.run('dpkg', '-L', 'ovs-rdt').stdout.split()
             if p.endswith('/ovs-rdt-agent.service')]
    assert len(found) == 1, found
    return found[0]


def test_install_remove_reinstall_purge(artifacts: Artifacts,
                                        host: HostDpkg) -> None:
    host.apt_install(artifacts.node_debs)
    assert statuses(host) == {p: 'ii' for p in NODE_PACKAGES}
    assert host.verify(*NODE_PACKAGES) == []
    # No conffile to prompt about at the next release: the configuration
    # is made by postinst, small, with the sample beside the docs.
    conffiles = host.run('dpkg-query', '-W', '-f', '${Conffiles}',
                         *NODE_PACKAGES).stdout
    assert conffiles.strip() == '', conffiles
    assert os.path.getsize(CONF) < 2048 and os.path.isdir(CONF_DIR)
    assert os.path.exists('/usr/share/doc/ovs-rdt/examples/'
                          'ovs-rdt.conf.sample')
    # The hook: a link the package owns to its program.
    assert os.path.islink(HOOK) and os.path.realpath(HOOK) == PROGRAM
    assert host.run('dpkg', '-S', HOOK).stdout.startswith('ovs-rdt: ')
    program = open(PROGRAM).read()
    assert "config='--config-file %s --config-dir %s'" % (CONF, CONF_DIR) \
        in program
    # The commands, from the installed files (mfusepy from its package).
    version = artifacts.version
    assert host.run('ovs-rdt', '--version').stdout == 'ovs-rdt %s\n' % version
    assert host.run('ovs-rdt-agent', '--version').stdout == \
        'ovs-rdt-agent %s\n' % version
    assert '--profile' in host.run('ovs-rdt', 'emulate', '--help').stdout
    where = host.run('python3', '-c', 'import mfusepy, ovs_rdt.emulator; '
                     'print(mfusepy.__file__)').stdout
    assert where.strip() == '/usr/lib/python3/dist-packages/mfusepy.py'
    # The manual pages are help text.
    for cmd in ('ovs-rdt', 'ovs-rdt-agent'):
        with gzip.open('/usr/share/man/man1/%s.1.gz' % cmd, 'rt') as fh:
            page = fh.read()
        assert '\\-\\-config\\-file' in page, cmd
        assert 'Traceback' not in page and 'No module named' not in page
    # The unit: as installed, systemd finds nothing wrong, and it is
    # hardened (systemd-analyze security was 9.6 UNSAFE).
    unit = unit_path(host)
    host.run('systemd-analyze', 'verify', unit)
    security = host.run('systemd-analyze', 'security', '--offline=true',
                        unit).stdout
    exposure = float(re.search(r'Overall exposure level for '
                               r'ovs-rdt-agent.service: ([0-9.]+)',
                               security).group(1))
    assert exposure <= 2.5, security[-800:]

    # Remove: the hook goes with the program, the configuration stays.
    with open(CONF, 'a') as fh:
        fh.write(EDIT)
    edited = open(CONF).read()
    host.run('apt-get', '-y', 'remove', 'ovs-rdt-emulator', 'ovs-rdt')
    assert not os.path.lexists(HOOK) and not os.path.exists(PROGRAM)
    assert open(CONF).read() == edited
    assert statuses(host)['ovs-rdt'] == 'rc'

    # Install again: the hook is back (it was lost: issue 38 item 1).
    host.apt_install([artifacts.package('ovs-rdt'),
                      artifacts.package('ovs-rdt-emulator')])
    assert statuses(host) == {p: 'ii' for p in NODE_PACKAGES}
    assert os.path.islink(HOOK) and os.path.realpath(HOOK) == PROGRAM
    assert host.verify(*NODE_PACKAGES) == []
    assert open(CONF).read() == edited

    # Purge: nothing left, on the host's /etc or at the packages' paths.
    res = host.purge_all()
    assert res.returncode == 0, res.stderr
    assert 'not empty so not removed' not in res.stderr, res.stderr
    assert host.leftovers() == []


def test_upgrade_from_0_2_0_unattended(artifacts: Artifacts,
                                       previous_release: Artifacts,
                                       host: HostDpkg) -> None:
    """0.2.0's conffile, edited, through a non-interactive upgrade: no
    prompt (it stopped every upgrade: issue 38 item 3), the edit kept,
    every package configured; unedited, it stays as it was too.
    """
    for edit in (EDIT, None):
        host.apt_install([previous_release.deb])
        assert statuses(host) == {'ovs-rdt': 'ii'}
        if edit:
            with open(CONF, 'a') as fh:
                fh.write(edit)
        before = open(CONF).read()
        res = host.apt_install(artifacts.node_debs)
        assert 'conffile' not in res.stdout + res.stderr
        assert statuses(host) == {p: 'ii' for p in NODE_PACKAGES}
        assert os.path.islink(HOOK) and os.path.realpath(HOOK) == PROGRAM
        assert host.run('ovs-rdt', '--version').stdout == \
            'ovs-rdt %s\n' % artifacts.version
        assert open(CONF).read() == before
        # 0.2.0's conffile is dpkg's "obsolete" one now: edited, it shows
        # as every edited conffile does; nothing else differs.
        assert host.verify(*NODE_PACKAGES) == (
            ['??5?????? c %s' % CONF] if edit else [])
        res = host.purge_all()
        assert res.returncode == 0, res.stderr
        assert host.leftovers() == []
