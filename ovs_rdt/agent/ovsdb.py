"""The agent's OVSDB side, with ovsdbapp: watch ``Open_vSwitch``, write status.

* A :class:`KnobsEvent` (an ovsdbapp ``RowEvent`` on the ``Open_vSwitch``
  table, create and update) keeps a snapshot of ``other_config`` and wakes
  the agent's loop up; its ``run()`` does nothing else.  The initial dump
  and every reconnection (ovsdb-server restarted) arrive as a create.
* A :class:`PortsEvent` on ``Interface.ofport`` wakes the loop up when
  ovs-vswitchd has added or removed a port: the first PMD port makes it
  create its PMD threads, and clients that do not bump ``next_cfg``
  (``ovs-vsctl --no-wait``, ovn-controller) change nothing in the
  ``Open_vSwitch`` row.
* One background thread connects (retrying until ovsdb-server answers; the
  python-ovs IDL then reconnects on its own) and writes
  ``external_ids:rdt-status`` whenever the wanted value differs from the
  database's, so a slow or absent ovsdb-server never blocks placement.
* Status writes are plain transactions: unlike ovsdbapp's vsctl-style one
  they neither bump ``next_cfg`` nor wait for ovs-vswitchd.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable

from ovsdbapp.backend.ovs_idl import connection as ovs_connection
from ovsdbapp.backend.ovs_idl import event as ovs_event
from ovsdbapp.backend.ovs_idl import idlutils
from ovsdbapp.backend.ovs_idl import transaction
from ovsdbapp.backend.ovs_idl import vlog
from ovsdbapp.schema.open_vswitch import impl_idl

from ovs_rdt.agent.lasting import LastingError

LOG = logging.getLogger(__name__)

TABLE = 'Open_vSwitch'
COLUMNS = ['other_config', 'external_ids', 'cur_cfg']
#: ovs-vswitchd writes ``ofport`` once it has added a port.
PORTS_TABLE = 'Interface'
PORTS_COLUMNS = ['ofport', 'name', 'type', 'statistics']
STATUS_KEY = 'rdt-status'
RETRY = 2.0
#: Seconds a status write waits for the rows the IDL gave before its
#: result (its own among them) to reach the event thread.
BARRIER_WAIT = 5.0
#: Seconds stop() waits for the OVSDB thread (a status write in flight).
STOP_WAIT = 3.0


class KnobsEvent(ovs_event.RowEvent):
    """Any change of the ``Open_vSwitch`` row but our own status write."""

    def __init__(self, owner: 'Ovsdb') -> None:
        super().__init__((self.ROW_CREATE, self.ROW_UPDATE), TABLE, None)
        self.owner = owner
        self.event_name = 'RdtKnobsEvent'

    def match_fn(self, event: str, row: Any, old: Any = None) -> bool:
        if event == self.ROW_UPDATE and old is not None:
            return any(hasattr(old, col) for col in COLUMNS)
        return True

    def run(self, event: str, row: Any, old: Any) -> None:
        self.owner.on_row(dict(row.other_config), dict(row.external_ids),
                          wake=event == self.ROW_CREATE or old is None
                          or hasattr(old, 'other_config')
                          or hasattr(old, 'cur_cfg'))


class PortsEvent(ovs_event.RowEvent):
    """A port added, numbered or removed by ovs-vswitchd: wake up."""

    def __init__(self, owner: 'Ovsdb') -> None:
        super().__init__((self.ROW_CREATE, self.ROW_UPDATE, self.ROW_DELETE),
                         PORTS_TABLE, None)
        self.owner = owner
        self.event_name = 'RdtPortsEvent'

    def match_fn(self, event: str, row: Any, old: Any = None) -> bool:
        # Statistics change every few seconds: only ofport matters here.
        if event == self.ROW_UPDATE and old is not None:
            return hasattr(old, 'ofport')
        return True

    def run(self, event: str, row: Any, old: Any) -> None:
        self.owner.wake()


class _Barrier:
    """A place in the event thread's queue: ``done()`` once every row the
    IDL gave before it has been handled.
    """
    ONETIME = False

    def __init__(self) -> None:
        self.passed = threading.Event()

    def run(self, event: Any, row: Any, updates: Any) -> None:
        self.passed.set()


class _Idl(ovs_connection.OvsdbIdl):
    def __init__(self, remote: str, helper: Any,
                 handler: ovs_event.RowEventHandler) -> None:
        super().__init__(remote, helper)
        self.handler = handler

    def notify(self, event: str, row: Any, updates: Any = None) -> None:
        self.handler.notify(event, row, updates)


def _plain_txn(self: Any, check_error: bool = False, log_errors: bool = True,
               **kwargs: Any) -> transaction.Transaction:
    return transaction.Transaction(self, self.ovsdb_connection,
                                   check_error=check_error,
                                   log_errors=log_errors)


def _api(conn: ovs_connection.Connection) -> impl_idl.OvsdbIdl:
    # ovsdbapp keeps the connection in a class attribute: a class per agent.
    cls = type('AgentOvsdbIdl', (impl_idl.OvsdbIdl,),
               {'_ovsdb_connection': None, 'create_transaction': _plain_txn})
    return cls(conn, start=False, auto_index=False)


class Ovsdb:
    """The connection, the knobs snapshot and the status writer."""

    def __init__(self, remote: str, timeout: int,
                 wake: Callable[[], None]) -> None:
        self.remote = remote
        self.timeout = timeout
        self.wake = wake
        self._cond = threading.Condition()
        self._stop = False
        self._knobs: dict[str, str] | None = None
        self.seq = 0
        self._db_status: str | None = None
        self._want: str | None = None
        self._conn: ovs_connection.Connection | None = None
        self._api: impl_idl.OvsdbIdl | None = None
        self._handler: ovs_event.RowEventHandler | None = None
        self._thread = threading.Thread(target=self._main, daemon=True,
                                        name='ovsdb')
        #: The write failure in force (one warning while it lasts).
        self._write_error = LastingError(LOG, logging.WARNING)

    # -- the loop's side ------------------------------------------------
    def start(self) -> None:
        vlog.use_python_logger()
        self._thread.start()

    def knobs(self) -> tuple[int, dict[str, str] | None]:
        """``(seq, other_config)``; None until the first dump arrived."""
        with self._cond:
            return self.seq, (dict(self._knobs) if self._knobs is not None
                              else None)

    def interface_stats(self) -> dict[str, tuple[str, dict[str, int]]]:
        """name -> (type, Interface.statistics), from the IDL's cache."""
        conn = self._conn
        if conn is None:
            return {}
        try:
            rows = list(conn.idl.tables[PORTS_TABLE].rows.values())
            return {row.name: (row.type, dict(row.statistics))
                    for row in rows}
        except (AttributeError, KeyError, RuntimeError):
            return {}

    def set_status(self, text: str) -> None:
        with self._cond:
            if text != self._want:
                self._want = text
                self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        # A daemon thread: do not hold a SIGTERM up for a hung ovsdb-server.
        self._thread.join(min(self.timeout + 1, STOP_WAIT))
        if self._conn is not None:
            self._conn.stop(timeout=2)
        if self._handler is not None:
            self._handler.shutdown()

    # -- the event's side -----------------------------------------------
    def on_row(self, other_config: dict[str, str],
               external_ids: dict[str, str], wake: bool) -> None:
        with self._cond:
            self._db_status = external_ids.get(STATUS_KEY)
            if other_config != self._knobs:
                self._knobs = other_config
                self.seq += 1
                wake = True
            self._cond.notify_all()
        if wake:
            self.wake()

    # -- the thread -------------------------------------------------------
    def _main(self) -> None:
        try:
            if self._connect():
                self._serve()
        except Exception:  # keep the agent alive; status writes stop
            LOG.exception('OVSDB thread failed')

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._stop and (self._want is None or
                                          self._want == self._db_status):
                    self._cond.wait(RETRY)
                if self._stop:
                    return
                want = self._want
            if not self._write(want):
                with self._cond:
                    if not self._stop:
                        self._cond.wait(RETRY)

    def _connect(self) -> bool:
        warned = False
        while True:
            with self._cond:
                if self._stop:
                    return False
            try:
                path = self.remote[5:] if self.remote.startswith('unix:') \
                    else None
                if path is not None and not os.path.exists(path):
                    raise OSError('%s does not exist' % path)  # quietly
                if self._conn is None:
                    helper = idlutils.get_schema_helper(self.remote, TABLE)
                    helper.register_columns(TABLE, COLUMNS)
                    helper.register_columns(PORTS_TABLE, PORTS_COLUMNS)
                    self._handler = ovs_event.RowEventHandler()
                    self._handler.watch_events([KnobsEvent(self),
                                                PortsEvent(self)])
                    idl = _Idl(self.remote, helper, self._handler)
                    self._conn = ovs_connection.Connection(idl, self.timeout)
                self._conn.start()
                self._api = _api(self._conn)
                LOG.info('connected to OVSDB at %s', self.remote)
                return True
            except Exception as exc:  # ovsdbapp raises plain Exception
                (LOG.debug if warned else LOG.warning)(
                    'OVSDB at %s is not answering yet (%s); retrying every '
                    '%ss', self.remote, exc, RETRY)
                warned = True
            with self._cond:
                if not self._stop:
                    self._cond.wait(RETRY)

    def _write(self, text: str | None) -> bool:
        api, conn = self._api, self._conn
        if api is None or conn is None:
            return False
        session = getattr(conn.idl, '_session', None)  # python-ovs has no API
        if session is not None and not session.is_connected():
            return False
        try:
            api.db_set(TABLE, '.', ('external_ids', {STATUS_KEY: text})
                       ).execute(check_error=True, log_errors=False)
        except Exception as exc:
            # Once while it lasts: retried every RETRY seconds.
            self._write_error.fail(
                exc.__class__.__name__, 'could not write external_ids:%s '
                '(retrying every %ss): %s', STATUS_KEY, RETRY, exc)
            return False
        self._write_error.recover('external_ids:%s written again', STATUS_KEY)
        # The rows go to the event thread (on_row) in the database's order,
        # asynchronously: ovsdb-server sends a transaction's own update
        # before its reply, so it is queued before this write returns
        # (unless it changed nothing: the row that holds the value is
        # queued already).  Once a barrier queued now has passed, what
        # on_row last took is what the database holds, this write or
        # newer (rdt-status removed by hand meanwhile: written again).
        barrier = _Barrier()
        handler = self._handler
        if handler is not None:
            handler.notifications.put((barrier, None, None, None))
        if not barrier.passed.wait(BARRIER_WAIT if handler else 0):
            with self._cond:        # (the event thread stuck: as written)
                self._db_status = text
        return True
