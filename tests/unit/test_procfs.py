"""ovs_rdt.procfs: what a guest's QEMU is (the hook's and the agent's rule)."""
from __future__ import annotations

import pytest

from ovs_rdt import procfs

UUID = '0b0580e0-4511-437a-855b-3e988e147bd5'
LIBVIRT = ['-name', 'guest=vm1,debug-threads=on', '-S', '-uuid', UUID,
           '-no-user-config']


@pytest.mark.parametrize('argv0', ['/usr/bin/qemu-system-x86_64',
                                   '/usr/bin/kvm', '/opt/emu/wrapper', ''])
def test_known_by_its_uuid_whatever_argv0(argv0: str) -> None:
    assert procfs.guest_of_cmdline([argv0] + LIBVIRT) == ('vm1', UUID)


@pytest.mark.parametrize('args, guest', [
    (['kvm', '-name', 'vm1', '--uuid', UUID.upper()], ('vm1', UUID)),
    (['kvm', '-uuid=' + UUID.replace('-', '')], (UUID, UUID)),
    (['kvm', '-uuid', 'x', '-uuid', UUID], (UUID, UUID)),    # the last counts
    (['kvm', '-name', 'guest=vm1'], None),                   # no -uuid
    (['kvm', '-uuid', 'not-a-uuid'], None),
    (['kvm', '-uuid'], None),
    ([], None),
])
def test_command_lines(args: list[str], guest: tuple | None) -> None:
    assert procfs.guest_of_cmdline(args) == guest
