"""ovs_rdt.agent.virt against libvirt's own test driver (``test:///default``,
in the client library: the real API, events included, no daemon).

The default test connection's state is shared by the whole process: each
test starts a transient domain of its own and destroys it.
"""
from __future__ import annotations

import threading
from typing import Iterator
import uuid as uuidlib

import libvirt
import pytest

from ovs_rdt.agent import virt
from ovs_rdt.agent.virt import LibvirtUnavailable

URI = 'test:///default'


@pytest.fixture
def domain() -> Iterator[libvirt.virDomain]:
    """A running transient domain with our annotation in its metadata."""
    conn = libvirt.open(URI)
    name = 'ovsrdt-unit-%s' % uuidlib.uuid4().hex[:8]
    dom = conn.createXML(
        "<domain type='test'><name>%s</name><uuid>%s</uuid><metadata>"
        "<rdt:rdt xmlns:rdt='urn:ovs-rdt:libvirt:1'><rdt:l3 ways='2'/>"
        "</rdt:rdt></metadata><memory>8192</memory><vcpu>1</vcpu>"
        "<os><type>hvm</type></os></domain>" % (name, uuidlib.uuid4()), 0)
    try:
        yield dom
    finally:
        try:
            dom.destroy()
        except libvirt.libvirtError:
            pass
        conn.close()


def test_running_domains_names_and_xml(domain: libvirt.virDomain) -> None:
    view = virt.open_view(URI, lambda *a: None)
    try:
        names, live = view.domains()
        uuid = domain.UUIDString()
        assert names[uuid] == domain.name() and uuid in live
        xml = view.xml(uuid)
        assert xml is not None and 'urn:ovs-rdt:libvirt:1' in xml
        domain.suspend()          # paused by a user: started, placed
        assert view.xml(uuid) is not None
        assert libvirt.VIR_DOMAIN_PAUSED_USER not in virt.STARTING
        domain.resume()
        domain.destroy()
        names, live = view.domains()
        assert uuid not in live
        assert view.xml(uuid) is None        # gone, not an error
        assert view.alive()
    finally:
        view.close()


def test_lifecycle_events_reach_the_handler(domain: libvirt.virDomain) -> None:
    seen: list[tuple[str, str, str]] = []
    stopped = threading.Event()

    def handler(uuid: str, name: str, event: str) -> None:
        seen.append((uuid, name, event))
        if event == 'stopped':
            stopped.set()

    view = virt.open_view(URI, handler)
    try:
        domain.destroy()
        assert stopped.wait(60), seen     # (at once unless loaded)
        assert (domain.UUIDString(), domain.name(), 'stopped') in seen
        assert 'stopped' not in virt.UP and 'started' in virt.UP
    finally:
        view.close()


def test_read_only() -> None:
    view = virt.open_view(URI, lambda *a: None)
    try:
        with pytest.raises(libvirt.libvirtError, match='read only'):
            view._conn.createXML('<domain/>', 0)
    finally:
        view.close()


def test_unreachable_libvirt_is_one_clear_error() -> None:
    uri = 'qemu:///system?socket=/nonexistent/libvirt-sock-ro'
    with pytest.raises(LibvirtUnavailable) as err:
        virt.open_view(uri, lambda *a: None)
    assert str(err.value).startswith('libvirt at %s: ' % uri)
    assert '/nonexistent/libvirt-sock-ro' in str(err.value)
    with pytest.raises(LibvirtUnavailable, match='No such file'):
        virt.domain_names(uri)


def test_domain_names_one_shot(domain: libvirt.virDomain) -> None:
    assert virt.domain_names(URI)[domain.UUIDString()] == domain.name()
