"""libvirt through its API: a read-only connection and its domain events.

The one module that imports libvirt-python (the hook never does: libvirt
holds the domain's lock while a hook runs, and a hook must not call back
into libvirtd).  :func:`open_view` opens a read-only connection to ``[libvirt]
uri`` with keepalive, a close callback and the domain lifecycle events;
every callback runs in the event-loop thread of :func:`start_event_loop`
(``virEventRegisterDefaultImpl`` / ``virEventRunDefaultImpl``), one per
process.  :func:`domain_names` is the one-shot read of ``ovs-rdt status``
and ``top``.  What ``listAllDomains`` says replaces any reading of
libvirt's private files; ``/proc`` stays the source of what the API does
not give (a QEMU's pid and its threads' TIDs).
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

import libvirt

from ovs_rdt.exceptions import RDTError
from ovs_rdt.inputs import uuids

LOG = logging.getLogger(__name__)

#: A keepalive every KEEPALIVE[0] s; the connection counts as lost after
#: KEEPALIVE[1] unanswered ones (libvirtd hung, or its host gone).
KEEPALIVE = (5, 3)
#: Lifecycle event -> what it says about the domain's QEMU (names as the
#: API's VIR_DOMAIN_EVENT_* constants; the others change nothing for us).
LIFECYCLE = {
    libvirt.VIR_DOMAIN_EVENT_DEFINED: 'defined',
    libvirt.VIR_DOMAIN_EVENT_UNDEFINED: 'undefined',
    libvirt.VIR_DOMAIN_EVENT_STARTED: 'started',
    libvirt.VIR_DOMAIN_EVENT_RESUMED: 'resumed',
    libvirt.VIR_DOMAIN_EVENT_STOPPED: 'stopped',
    libvirt.VIR_DOMAIN_EVENT_SHUTDOWN: 'shutdown',
    libvirt.VIR_DOMAIN_EVENT_CRASHED: 'crashed',
}
#: (event, detail) -> a name of its own: a migration's two ends.
MIGRATED = {
    (libvirt.VIR_DOMAIN_EVENT_STARTED,
     libvirt.VIR_DOMAIN_EVENT_STARTED_MIGRATED): 'migrated in',
    (libvirt.VIR_DOMAIN_EVENT_RESUMED,
     libvirt.VIR_DOMAIN_EVENT_RESUMED_MIGRATED): 'migrated in',
    (libvirt.VIR_DOMAIN_EVENT_STOPPED,
     libvirt.VIR_DOMAIN_EVENT_STOPPED_MIGRATED): 'migrated away',
}
#: Events after which a domain's QEMU may run: place it.  The others
#: (stopped, crashed, shutdown, undefined, migrated away): its group may be
#: left behind.
UP = frozenset({'defined', 'started', 'resumed', 'migrated in'})
#: Why libvirt keeps a domain paused while it is not started yet.
STARTING = frozenset({libvirt.VIR_DOMAIN_PAUSED_STARTING_UP,
                      libvirt.VIR_DOMAIN_PAUSED_MIGRATION})
_CLOSE_REASONS = {0: 'error', 1: 'end of file', 2: 'keepalive timeout',
                  3: 'client request'}

#: (uuid, name, event) -> None, called in the event-loop thread; the
#: connection closing is ('', '', 'closed') (then :attr:`View.reason`).
EventHandler = Callable[[str, str, str], None]
CLOSED = 'closed'

_loop_lock = threading.Lock()
_loop_started = False


class LibvirtUnavailable(RDTError):
    """libvirt cannot be reached or stopped answering (one line: why)."""


def _quiet(_ctx: object, _err: object) -> None:
    """libvirt's default error handler prints every error to stderr."""


def start_event_loop() -> None:
    """The process's libvirt event loop, in a daemon thread (once).

    Must run before a connection is opened: keepalive and events need it.
    """
    global _loop_started
    with _loop_lock:
        if _loop_started:
            return
        libvirt.registerErrorHandler(_quiet, None)
        libvirt.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                if libvirt.virEventRunDefaultImpl() < 0:
                    LOG.error('libvirt event loop: %s', _last_error())

        threading.Thread(target=run, name='libvirt-events',
                         daemon=True).start()
        _loop_started = True


def _last_error() -> str:
    err = libvirt.virGetLastError()
    return err[2] if err else 'unknown error'


def _text(exc: libvirt.libvirtError) -> str:
    return exc.get_error_message() or str(exc)


class View:
    """One read-only connection; calls are thread-safe (libvirt's)."""

    def __init__(self, uri: str, conn: libvirt.virConnect,
                 on_event: EventHandler | None = None) -> None:
        self.uri = uri
        self._conn = conn
        self._on_event = on_event
        self._callbacks: list[int] = []
        self.closed = threading.Event()
        #: Why the connection closed (set before :attr:`closed`).
        self.reason = ''

    def _on_close(self, _conn: object, reason: int, _opaque: object) -> None:
        self.reason = _CLOSE_REASONS.get(reason, 'reason %d' % reason)
        self.closed.set()
        if self._on_event is not None:
            self._on_event('', '', CLOSED)

    def alive(self) -> bool:
        if self.closed.is_set():
            return False
        try:
            return bool(self._conn.isAlive())
        except libvirt.libvirtError:
            return False

    def domains(self) -> tuple[dict[str, str], set[str]]:
        """(uuid -> name of every domain, uuids of the running ones).

        "Running" is libvirt's active: from the moment it starts a domain
        (before the ``prepare`` hook) until its QEMU is gone.
        """
        try:
            every = self._conn.listAllDomains(0)
            active = self._conn.listAllDomains(
                libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
            names = {self._uuid(d): d.name() for d in every + active}
            live = {self._uuid(d) for d in active}
        except libvirt.libvirtError as exc:
            raise LibvirtUnavailable('libvirt at %s: %s'
                                     % (self.uri, _text(exc))) from None
        names.pop('', None)
        live.discard('')
        return names, live

    def xml(self, uuid: str) -> str | None:
        """The XML (``<metadata>`` included) of a domain that has started.

        None if it does not run, or is still starting (paused by libvirt
        for its start or an incoming migration: the hook's ``started`` is
        yet to run, and placing it then would race the hook).
        """
        try:
            dom = self._conn.lookupByUUIDString(uuid)
            state, reason = dom.state()
            if state in (libvirt.VIR_DOMAIN_SHUTOFF,
                         libvirt.VIR_DOMAIN_CRASHED) or (
                    state == libvirt.VIR_DOMAIN_PAUSED and reason in STARTING):
                return None
            return str(dom.XMLDesc(0))
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return None
            raise LibvirtUnavailable('libvirt at %s: %s'
                                     % (self.uri, _text(exc))) from None

    @staticmethod
    def _uuid(dom: libvirt.virDomain) -> str:
        return uuids.canonical(dom.UUIDString()) or ''

    def close(self) -> None:
        for cb in self._callbacks:
            try:
                self._conn.domainEventDeregisterAny(cb)
            except libvirt.libvirtError:
                pass
        self._callbacks = []
        try:
            self._conn.unregisterCloseCallback()
        except libvirt.libvirtError:
            pass
        try:
            self._conn.close()
        except libvirt.libvirtError:
            pass


def open_view(uri: str, on_event: EventHandler) -> View:
    """A read-only connection to ``uri`` with keepalive and lifecycle events.

    ``on_event(uuid, name, event)`` runs in the event-loop thread: it must
    return at once.  Raises :class:`LibvirtUnavailable`.
    """
    start_event_loop()
    try:
        conn = libvirt.openReadOnly(uri)
    except libvirt.libvirtError as exc:
        raise LibvirtUnavailable('libvirt at %s: %s' % (uri, _text(exc))
                                 ) from None
    view = View(uri, conn, on_event)

    def lifecycle(_conn: object, dom: libvirt.virDomain, event: int,
                  detail: int, _opaque: object) -> None:
        what = MIGRATED.get((event, detail)) or LIFECYCLE.get(event)
        if what is not None:
            on_event(View._uuid(dom), dom.name(), what)

    try:
        try:
            conn.setKeepAlive(*KEEPALIVE)
        except libvirt.libvirtError as exc:
            # A driver in the client's process (test:///) has no link to
            # keep alive.
            if exc.get_error_code() != libvirt.VIR_ERR_NO_SUPPORT:
                raise
        conn.registerCloseCallback(view._on_close, None)
        view._callbacks.append(conn.domainEventRegisterAny(
            None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, lifecycle, None))
    except libvirt.libvirtError as exc:
        view.close()
        raise LibvirtUnavailable('libvirt at %s: %s' % (uri, _text(exc))
                                 ) from None
    return view


def domain_names(uri: str, timeout: float = 5.0) -> dict[str, str]:
    """uuid -> name of every domain, over a one-shot read-only connection.

    Raises :class:`LibvirtUnavailable` (also when libvirtd does not answer
    within ``timeout`` seconds: it may be busy probing QEMU).
    """
    result: dict[str, object] = {}

    def read() -> None:
        libvirt.registerErrorHandler(_quiet, None)
        try:
            conn = libvirt.openReadOnly(uri)
            try:
                result['names'] = View(uri, conn).domains()[0]
            finally:
                conn.close()
        except libvirt.libvirtError as exc:
            result['error'] = 'libvirt at %s: %s' % (uri, _text(exc))
        except LibvirtUnavailable as exc:
            result['error'] = str(exc)

    thread = threading.Thread(target=read, name='libvirt-names', daemon=True)
    thread.start()
    thread.join(timeout)
    if 'names' in result:
        return result['names']  # type: ignore[return-value]
    raise LibvirtUnavailable(str(result.get(
        'error',
        'libvirt at %s did not answer within %.0f s' % (uri, timeout))))
