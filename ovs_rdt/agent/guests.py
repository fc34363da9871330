"""The agent's guests: libvirt's events drive VM groups, in a thread.

:class:`GuestWatch` keeps a read-only connection to ``[libvirt] uri``
(:mod:`ovs_rdt.agent.virt`) and, in a thread of its own (libvirt calls
block while a domain's hook runs: the OvS side never waits for them):

* a domain that stops, crashes, shuts down, migrates away or is undefined:
  its left-behind group is removed at once (:class:`NodeReconciler`; the
  hook's ``release`` is the first line, this the safety net);
* a domain that starts, resumes, migrates in or is defined while running:
  placed as the hook would have (:class:`GuestPlacer`), e.g. started
  without the hook, or while the agent was away;
* every ``[agent] reconcile_interval`` and after each (re)connection: both,
  for every domain (new vCPU threads of ``virsh setvcpus --live`` too);
* a lost connection (libvirtd restarting): one log line,
  ``errors{source="libvirt"}``, reconnection with backoff; meanwhile VM
  groups are reconciled as without libvirt (``/proc``, ``ORPHAN_GRACE``).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable

from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent.lasting import LastingError
from ovs_rdt.agent.orphans import NodeReconciler
from ovs_rdt.agent import virt
from ovs_rdt.exceptions import RDTError, describe
from ovs_rdt.guest import GuestCache, guest_group
from ovs_rdt.logs import to_logger
from ovs_rdt import procfs
from ovs_rdt.domain_xml import parse, resolve
from ovs_rdt.conf import Settings

LOG = logging.getLogger(__name__)

#: Reconnection delays: doubling from the first to the last, then steady.
BACKOFF = (0.5, 30.0)
#: A gone domain's group still holding tasks (QEMU not reaped yet) is
#: looked at again this often, for at most RETRY_FOR seconds.
RETRY_STEP = 0.1
RETRY_FOR = 10.0
#: Placing a guest's threads is repeated (at most this often) until it
#: moves nothing.
PLACE_ROUNDS = 3


class GuestPlacer:
    """Places a running domain as the hook does (``prepare`` + ``started``).

    The rules are the hook's (:class:`ovs_rdt.guest.GuestCache`);
    the domain XML comes from libvirt's API, the QEMU's pid from ``/proc``
    (by its ``-uuid``: the API does not give it).  Threads already in the
    group are left alone, so a pass over placed guests writes nothing.
    """

    def __init__(self, manager: Any, settings: Settings,
                 counters: Counters | None = None,
                 proc: str = procfs.PROC) -> None:
        self.manager = manager
        self.settings = settings
        self.counters = counters or Counters()
        self.proc = proc
        self._pids: dict[str, int] = {}
        #: uuid -> the failure logged last (each logged once while it lasts)
        self._failed: dict[str, str] = {}

    def pid_of(self, uuid: str) -> int | None:
        pid = self._pids.get(uuid)
        guest = procfs.qemu_guest(pid, self.proc) if pid else None
        if guest is None or guest[1] != uuid:
            self._pids = procfs.qemu_pids(self.proc)
            pid = self._pids.get(uuid)
        return pid

    def place(self, uuid: str, xml: str | None) -> list[int]:
        """Place the domain ``uuid`` (``xml``: from the API; None: it does
        not run); returns the TIDs moved.  Never raises RDTError: a failure
        is logged once and counted as ``errors{source="reconcile"}``.
        """
        if xml is None:
            self._failed.pop(uuid, None)
            return []
        name = uuid
        try:
            dom = parse(xml.encode('utf-8'))
            name = dom.name
            spec = resolve(dom, self.settings)
            if spec is None:
                return []
            pid = self.pid_of(dom.uuid)
            if pid is None:
                return []      # not yet: its "started" event will come
            guests = GuestCache(self.settings, to_logger(
                __name__, "domain '%s': " % name), self.manager)
            group = guest_group(dom, spec)
            if not guests.group_exists(group):
                LOG.warning("domain '%s' runs without its group %s (started "
                            "without the ovs-rdt hook?): placing it", name,
                            group)
                guests.ensure(dom, spec)
            moved = []
            for _ in range(PLACE_ROUNDS):
                # Again while it moves something: a thread QEMU creates
                # while its creator is still outside the group is born
                # outside it.
                try:
                    placed = frozenset(self.manager.resctrl.tasks(group))
                except FileNotFoundError:
                    placed = frozenset()
                more = guests.place(group, pid, placed)
                if not more:
                    break
                moved += more
        except (RDTError, OSError) as exc:
            text = str(exc)
            self.counters.inc('errors', source='reconcile')
            if self._failed.get(uuid) != text:
                LOG.error("cannot place domain '%s' (uuid %s): %s", name,
                          uuid, text)
                self._failed[uuid] = text
            return []
        if self._failed.pop(uuid, None) is not None:
            LOG.info("domain '%s' is placed again", name)
        return moved


class GuestWatch:
    """The libvirt connection and the guests' reconciliation, in a thread."""

    def __init__(self, settings: Settings, build: Callable[[Any], Any],
                 counters: Counters, proc: str = procfs.PROC,
                 opener: Callable[..., Any] = virt.open_view,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.build = build
        self.counters = counters
        self.proc = proc
        self.opener = opener
        self.clock = clock
        self._queue: queue.Queue[tuple] = queue.Queue()
        self._lock = threading.Lock()
        self._view: Any = None
        self._names: dict[str, str] | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._lost_at: float | None = None
        self._warned = False
        #: The reconciliation error in force (logged once while it lasts).
        self._error = LastingError(LOG)
        self.node: NodeReconciler | None = None
        self.placer: GuestPlacer | None = None
        self._configure(settings)

    # -- from the agent's main thread ---------------------------------------
    def _configure(self, settings: Settings) -> None:
        manager = self.build(settings)
        self.settings = settings
        self.uri = settings.libvirt.uri
        if self.node is None or self.placer is None:
            self.node = NodeReconciler(manager, self.proc,
                                       guests=self._live,
                                       counters=self.counters)
            self.placer = GuestPlacer(manager, settings, self.counters,
                                      self.proc)
        else:
            self.node.manager = self.placer.manager = manager
            self.placer.settings = settings

    def configure(self, settings: Settings) -> None:
        """SIGHUP: the new configuration from the next pass on."""
        self._queue.put(('configure', settings))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name='guests',
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._queue.put(('stop',))
        if self._thread is not None:
            self._thread.join(timeout)
        self._disconnect()

    def names(self) -> dict[str, str] | None:
        """uuid -> domain name from libvirt; None while it does not answer."""
        with self._lock:
            return None if self._names is None else dict(self._names)

    @property
    def connected(self) -> bool:
        return self._view is not None

    # -- the thread -----------------------------------------------------------
    def _on_event(self, uuid: str, name: str, event: str) -> None:
        """From libvirt's event-loop thread: hand over, return at once."""
        if event != virt.CLOSED:
            LOG.debug("libvirt: domain '%s' (%s) %s", name, uuid, event)
        self._queue.put(('event', uuid, name, event))

    def _live(self) -> set[str] | None:
        """libvirt's running domains (for the reconciler); None without."""
        view = self._view
        if view is None:
            return None
        try:
            names, live = view.domains()
        except virt.LibvirtUnavailable as exc:
            self._lost(str(exc))
            return None
        with self._lock:
            self._names = names
        return live

    def _run(self) -> None:
        backoff = BACKOFF[0]
        next_try = next_pass = self.clock()
        retry_until = 0.0
        while not self._stopping.is_set():
            now = self.clock()
            if self._view is not None and self._view.closed.is_set():
                self._lost(self._view.reason)
            if self._view is None and now >= next_try:
                if self._connect():
                    backoff = BACKOFF[0]
                    next_pass = now        # a whole pass after connecting
                else:
                    next_try = now + backoff
                    backoff = min(backoff * 2, BACKOFF[1])
            wake = next_pass if self._view is not None else min(next_pass,
                                                                next_try)
            if now < retry_until:
                wake = min(wake, now + RETRY_STEP)
            place, reconcile, whole = self._wait(max(0.0, wake - now))
            if self._stopping.is_set():
                break
            now = self.clock()
            if now >= next_pass:
                whole = True
                next_pass = now + self.settings.agent.reconcile_interval
            if now < retry_until:
                reconcile = True
            try:
                if whole or reconcile:
                    self._reconcile()
                    if self.node is not None and self.node.pending:
                        retry_until = retry_until if now < retry_until \
                            else now + RETRY_FOR
                    else:
                        retry_until = 0.0
                if whole:
                    # (With the events of the same wait: one that came as
                    # the pass began may name a domain the list missed.)
                    place |= set(self._running())
                elif place and not reconcile:
                    self._live()         # names of domains new to us
                for uuid in sorted(place):
                    self._place(uuid)
            except Exception:  # never let a bug end the thread
                LOG.exception('unexpected error reconciling guests')
                self.counters.inc('errors', source='reconcile')

    def _wait(self, timeout: float) -> tuple[set[str], bool, bool]:
        """Queued events, gathered: (uuids to place, reconcile, whole pass)."""
        place: set[str] = set()
        reconcile = whole = False
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return place, reconcile, whole
        while True:
            if item[0] == 'event':
                _kind, uuid, name, event = item
                if event == virt.CLOSED:
                    pass           # the loop sees the view closed
                elif event in virt.UP:
                    place.add(uuid)
                else:
                    place.discard(uuid)
                    reconcile = True
            elif item[0] == 'configure':
                self._configure(item[1])
                if self._view is not None and self._view.uri != self.uri:
                    LOG.info('[libvirt] uri is now %s', self.uri)
                    self._disconnect()
                whole = True
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return place, reconcile, whole

    def _connect(self) -> bool:
        try:
            view = self.opener(self.uri, self._on_event)
        except virt.LibvirtUnavailable as exc:
            self.counters.inc('errors', source='libvirt')
            if not self._warned and self._lost_at is None:
                LOG.warning('%s: retrying (VM groups left behind are '
                            'removed once no QEMU has run with their uuid '
                            'for %d s meanwhile)', exc,
                            self.node.grace if self.node else 0)
                self._warned = True
            else:
                LOG.debug('%s', exc)
            return False
        self._view = view
        if self._lost_at is not None:
            LOG.info('connected to libvirt at %s again (after %.1f s): '
                     'reconciling', self.uri, self.clock() - self._lost_at)
        else:
            LOG.info('connected to libvirt at %s (read-only)', self.uri)
        self._lost_at = None
        self._warned = False
        return True

    def _lost(self, why: str) -> None:
        """One line, one count; the loop reconnects with backoff."""
        if self._view is None:
            return
        self._disconnect()
        self._lost_at = self.clock()
        self.counters.inc('errors', source='libvirt')
        LOG.warning('lost the connection to libvirt at %s (%s): reconnecting '
                    'with backoff', self.uri, why)

    def _disconnect(self) -> None:
        view, self._view = self._view, None
        with self._lock:
            self._names = None
        if view is not None:
            view.close()

    def _reconcile(self) -> None:
        assert self.node is not None
        try:
            self.node.reconcile()
        except (RDTError, OSError) as exc:
            self.counters.inc('errors', source='reconcile')
            text = describe(exc)
            self._error.fail(text, 'reconciliation failed: %s (retrying)',
                             text)
        else:
            self._error.recover('recovered: reconciliation works again')

    def _running(self) -> set[str]:
        live = self._live()
        return live or set()

    def _place(self, uuid: str) -> None:
        view = self._view
        if view is None:
            return
        try:
            xml = view.xml(uuid)
        except virt.LibvirtUnavailable as exc:
            self._lost(str(exc))
            return
        assert self.placer is not None
        self.placer.place(uuid, xml)
