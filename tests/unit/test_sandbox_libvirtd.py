"""PrivateLibvirtd.prepare() on a new machine (no systemd, libvirtd never ran)."""
from __future__ import annotations

import os

import pytest

from ovs_rdt.sandbox import libvirtd
from ovs_rdt.sandbox.wait import SandboxError


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A fake host without /run/libvirt (only a running libvirtd makes it).

    /etc/libvirt, /var/lib/libvirt and /var/log/libvirt come from the package.
    """
    dirs = {name: str(tmp_path / 'host' / name) for name in ('etc', 'run', 'lib', 'log')}
    for name in ('etc', 'lib', 'log'):
        os.makedirs(dirs[name])
    with open(os.path.join(dirs['etc'], 'libvirtd.conf'), 'w') as fh:
        fh.write('# host config\n')
    monkeypatch.setattr(libvirtd, 'PRIVATE_DIRS',
                        tuple((dirs[n], n) for n in ('etc', 'run', 'lib', 'log')))
    monkeypatch.setattr(libvirtd, 'RUNTIME_DIRS', (dirs['run'],))
    real_listdir = os.listdir
    monkeypatch.setattr(libvirtd.os, 'listdir', lambda p: real_listdir(
        dirs['etc'] if p == '/etc/libvirt' else p))
    real_join = os.path.join
    monkeypatch.setattr(libvirtd.os.path, 'join', lambda a, *b: real_join(
        dirs['etc'] if a == '/etc/libvirt' else a, *b))
    return dirs


def test_a_missing_run_directory_is_created(host, tmp_path) -> None:
    sandbox = libvirtd.PrivateLibvirtd(str(tmp_path / 'work'))
    sandbox.prepare()
    assert os.path.isdir(host['run'])
    assert os.path.isfile(sandbox.path('etc', 'libvirtd.conf'))


def test_a_missing_package_directory_is_an_error(host, tmp_path) -> None:
    os.rmdir(host['lib'])
    sandbox = libvirtd.PrivateLibvirtd(str(tmp_path / 'work'))
    with pytest.raises(SandboxError, match='apt-get install libvirt-daemon-system'):
        sandbox.prepare()
    assert not os.path.exists(host['lib'])


def test_a_node_of_a_migration_has_its_own_host_uuid_and_name(
        host, tmp_path) -> None:
    """libvirt refuses to migrate between daemons with one host_uuid."""
    with open(os.path.join(host['etc'], 'libvirtd.conf'), 'w') as fh:
        fh.write('# host config\nhost_uuid = "00000000-0000-0000-0000-0000'
                 '00000001"\nlog_level = 3\n')
    sandbox = libvirtd.PrivateLibvirtd(
        str(tmp_path / 'work'), host_uuid='5b6f3c1e-0d1a-4c43-9d0e-'
        '2f4b7a9c8e11', hostname='node-b')
    sandbox.prepare()
    with open(sandbox.path('etc', 'libvirtd.conf')) as fh:
        lines = fh.read().splitlines()
    assert lines == ['# host config', 'log_level = 3', 'host_uuid = '
                     '"5b6f3c1e-0d1a-4c43-9d0e-2f4b7a9c8e11"']
    assert 'hostname node-b' in sandbox.script().splitlines()
    assert sandbox.peer_uri == 'qemu+unix:///system?socket=' + \
        sandbox.path('run', 'libvirt-sock')
    # the host's own file is untouched
    with open(os.path.join(host['etc'], 'libvirtd.conf')) as fh:
        assert '00000001' in fh.read()


def test_qemu_pids_are_the_guests_not_libvirtd(tmp_path) -> None:
    """libvirt's QEMU driver keeps its own pidfile (``driver.pid``: the
    libvirtd) beside its guests' (``<name>.pid``): only the guests are
    QEMUs, or a stop would wait for libvirtd as for a QEMU and report it.
    """
    sandbox = libvirtd.PrivateLibvirtd(str(tmp_path / 'work'))
    os.makedirs(sandbox.qemu_run_dir)
    for name in ('driver', 'vm1'):
        with open(os.path.join(sandbox.qemu_run_dir, name + '.pid'),
                  'w') as fh:
            fh.write('%d\n' % os.getpid())
    assert sandbox.qemu_pids() == [os.getpid()]
