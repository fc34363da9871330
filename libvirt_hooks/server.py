"""The hook's events served by a long-lived process (``ovs-rdt-agent``).

libvirt runs the hook as a new process for every event, several per VM
start and per migration, holding the domain's lock.  Most of such a
process's CPU is the interpreter importing the hook's modules, again at
every event.  When the wrapper written by ``ovs-rdt install-hook`` names a
socket (``[libvirt] hook_server``, the default), it is a small client
instead: a shell whose netcat hands its arguments and the domain XML to
the process listening there (the agent, or ``ovs-rdt serve-hook``), and
exits with the status that process answers and the line it writes.  The
server runs exactly what the hook would (:func:`hook.run
<libvirt_hooks.hook.run>`, the wrapper's configuration files read at every
event), each in a worker thread (several at once), serialised on the
resctrl ``flock`` as separate hook processes are.

The server serves only a hook that runs as its own user (real and
effective) in its own mount and PID namespaces (:meth:`HookServer.foreign`):
paths and pids mean the same to both.  Whenever it does not answer (not
running, another namespace, gone or silent for :data:`TIMEOUT` seconds
mid-event), the client does the work itself, as a wrapper without a socket
does: every handled event is idempotent, so an event the server had begun
is safe to run again.  The server never calls libvirt.

The protocol, and the spool that lets a client do an event the server
took and did not finish: :mod:`libvirt_hooks.protocol`.  A server that
does not take a request (another protocol, other code than the wrapper
names: :meth:`HookServer.stale`, another namespace or user, stopping, an
error before the event runs) returns it.

The server also keeps, between events, the platform it read of the resctrl
mount (:class:`~ovs_rdt.resctrl.KnownPlatforms`: each event checks that
the mount has not changed), and lets the hook answer early: ``release
end``, whose status libvirt ignores, is answered (exit 0) once the hook
holds the resctrl lock, and done after; whatever libvirt does next waits
for it on that lock (:meth:`Hook.release
<libvirt_hooks.hook.Hook.release>`).
"""
from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from typing import NamedTuple

from libvirt_hooks import hook
from libvirt_hooks import protocol
from ovs_rdt.resctrl import KnownPlatforms

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

LOG = logging.getLogger(__name__)

#: Seconds the client waits for an answer before doing the work itself:
#: four times the default resctrl lock_timeout (``started`` may wait for
#: the lock twice), so that only a server that is stuck is left.  An event
#: it completes after that is one the client has done again (every event is
#: idempotent); a group it made for a VM whose start the client then
#: refused stays until the agent's reconciliation removes it.
TIMEOUT = 120
#: How long stop() lets the events being served finish: under systemd's
#: TimeoutStopSec (15 s) for the agent.
STOP_WAIT = 10
#: How long a server that is stopping waits for the stream of a client it
#: returns the request to (netcat sends libvirt's XML at once).
RETURN_WAIT = 2


class Taken(NamedTuple):
    """What a server makes of a client's stream."""
    #: Why it does not run it: (the reason, the same without what varies
    #: per event); None with a request, or when the client is gone.
    why: tuple[str, str] | None
    #: (the wrapper's package paths, the arguments, the domain XML).
    request: tuple[list[str], list[str], bytes] | None
    #: The spool file the client named, if it is one of this server's.
    spool: str | None
    #: The request as received (the head from netcat's environment first).
    raw: bytes = b''


def _own_directory(path: str) -> None:
    """Make ``path`` a directory of this user's, mode 0700 (the spool):
    OSError if something else is there.
    """
    import stat

    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise OSError('%s is not a directory of uid %d' % (path,
                                                           os.geteuid()))
    if st.st_mode & 0o777 != 0o700:
        os.chmod(path, 0o700)


def socket_path(root: str) -> str:
    """``/run/ovs-rdt/hook-<hash of the resctrl root>-<protocol
    version>.sock``.

    One server per resctrl root, as one agent (:mod:`ovs_rdt.agent.lock`).
    """
    from ovs_rdt.runfiles import run_path
    return run_path(root, 'hook-{tag}-%d.sock' % protocol.VERSION)


def package_paths() -> list[str]:
    """The sys.path entries that hold libvirt_hooks and ovs_rdt."""
    import libvirt_hooks
    import ovs_rdt

    out: list[str] = []
    for pkg in (libvirt_hooks, ovs_rdt):
        parent = os.path.dirname(os.path.dirname(os.path.abspath(
            pkg.__file__ or '')))
        if parent not in out:
            out.append(parent)
    return out


def _package_dirs() -> dict[str, int]:
    """This process's package directories (every one with a module of
    ours) and their modification times: an upgrade in place replaces files
    in them, and this process would then mix old and new code.
    """
    import libvirt_hooks
    import ovs_rdt

    out: dict[str, int] = {}
    for pkg in (libvirt_hooks, ovs_rdt):
        top = os.path.dirname(os.path.abspath(pkg.__file__ or ''))
        for dirpath, dirs, _files in os.walk(top):
            dirs[:] = [d for d in dirs if d != '__pycache__']
            try:
                out[dirpath] = os.stat(dirpath).st_mtime_ns
            except OSError:
                pass
    return out


class _Forward(logging.Handler):
    """The core's log records, to the log of the event this thread serves.

    (As the hook process routes them to its own.)
    """

    def __init__(self) -> None:
        super().__init__()
        self.current = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        log = getattr(self.current, 'log', None)
        if log is not None:
            hook.log_record(log, record)


class _Err:
    """The hook's line for libvirt, collected for the reply."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass


class Served:
    """What one event served here gives the hook (:class:`Hook
    <libvirt_hooks.hook.Hook>`): where its line for libvirt goes, a place
    for its log (the core's records of this thread go there), the
    platforms the server read at earlier events, and an early answer.
    """

    def __init__(self, forward: _Forward, platforms: KnownPlatforms,
                 send: Callable[[bytes], bool],
                 spool: str | None = None) -> None:
        self.err = _Err()
        self.platforms = platforms
        self._forward = forward
        self._send = send
        self._spool = spool
        #: The reply went before the hook was done (:meth:`answer`).
        self.answered = False

    def attach(self, log: Any) -> None:
        self._forward.current.log = log

    def detach(self) -> None:
        self._forward.current.log = None

    def answer(self) -> None:
        """Exit 0 to libvirt now, the work going on (``release end``,
        whose status libvirt ignores: the hook holds the resctrl lock).
        """
        if not self.answered:
            self.answered = True
            self._reply(protocol.reply(0, ''))

    def finish(self, rc: int) -> None:
        """The reply at the end, unless the hook answered early."""
        if not self.answered:
            self._reply(protocol.reply(rc, ''.join(self.err.parts)))

    def _reply(self, data: bytes) -> None:
        # The spool goes once the client has its answer; a client gone
        # (its timeout passed) does the event itself from it.
        if self._send(data) and self._spool is not None:
            try:
                os.unlink(self._spool)
            except OSError:
                pass


class HookServer:
    """Serves hook events on a Unix socket (mode 0600), each in one of its
    worker threads.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._forward = _Forward()
        #: Events served.
        self.served = 0
        self._served_lock = threading.Lock()
        self._stop = threading.Event()
        self._ino = 0
        self._spools = protocol.spool_dir(path)
        #: The reasons events were not served (each logged once).
        self._refused: set[str] = set()
        #: The wrapper's package paths this process runs the hook from.
        self._paths = [os.path.realpath(p) for p in package_paths()]
        self._dirs = _package_dirs()
        #: Connections for the workers (None: a worker's end), the number
        #: of events being served (stop() lets them finish) and of idle
        #: workers, under _cond.
        self._queue: queue.SimpleQueue[socket.socket | None] = \
            queue.SimpleQueue()
        self._cond = threading.Condition()
        self._busy = 0
        self._idle = 0
        self._workers = 0
        #: What the events read of the platform (the next ones check it).
        self.platforms = KnownPlatforms()

    def start(self) -> HookServer:
        """Listen (replacing a socket nobody listens on).

        OSError if it cannot, or if another server listens there.
        """
        os.makedirs(os.path.dirname(self.path), mode=0o755, exist_ok=True)
        _own_directory(self._spools)
        if os.path.exists(self.path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(self.path)
            except OSError:
                os.unlink(self.path)          # left by a killed server
            else:
                raise OSError('another hook server listens on %s'
                              % self.path)
            finally:
                probe.close()
        swept = protocol.sweep_spools(self._spools)
        if swept:
            LOG.info('hook server: removed %d spool file(s) of hook '
                     'processes gone (a server killed before)', swept)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        tmp = '%s.%d.tmp' % (self.path, os.getpid())
        try:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            sock.bind(tmp)
            os.chmod(tmp, 0o600)           # root's hook only
            sock.listen(64)
            os.replace(tmp, self.path)
            self._ino = os.stat(self.path).st_ino
        except BaseException:
            sock.close()
            if os.path.lexists(tmp):
                os.unlink(tmp)
            raise
        self._sock = sock
        core = logging.getLogger('ovs_rdt')
        if self._forward not in core.handlers:
            core.addHandler(self._forward)
        self._thread = threading.Thread(target=self._accept, args=(sock,),
                                        daemon=True, name='hook-server')
        self._thread.start()
        LOG.info('serving the libvirt hook on %s', self.path)
        return self

    def stop(self) -> None:
        """Stop listening, remove the socket, and let the events being
        served finish (up to :data:`STOP_WAIT` seconds in all; one still
        running then is the client's to do again, from its spool, but for a
        release answered early: the rest of it is milliseconds under the
        lock it holds, and if this process dies first the group waits for
        the agent's reconciliation).  Requests connected but not accepted
        yet are returned to their clients.
        """
        deadline = time.monotonic() + STOP_WAIT
        self._stop.set()
        sock, self._sock = self._sock, None
        ours = False
        if sock is not None:
            ours = self._unlink()
            try:
                # No client can connect now; accept() returns those that
                # did (_accept returns them their requests), then fails.
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        if sock is not None:
            sock.close()
        with self._cond:
            while self._busy and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            busy = self._busy
            for _ in range(self._workers):
                self._queue.put(None)
        if ours and not busy:
            try:
                os.rmdir(self._spools)
            except OSError:
                pass                # (a spool a client is still to take)
        logging.getLogger('ovs_rdt').removeHandler(self._forward)

    def _unlink(self) -> bool:
        """Remove the socket, unless it is a later server's; whether it
        was this one's.
        """
        try:
            if os.stat(self.path).st_ino != self._ino:
                return False
            os.unlink(self.path)
        except FileNotFoundError:
            return False
        return True

    def _accept(self, sock: socket.socket) -> None:
        try:
            self._accepting(sock)
        except BaseException as exc:
            # Clients must not hand their XML to a socket nobody accepts
            # on: without it, they do their events themselves.
            if not self._stop.is_set():
                self._unlink()
                LOG.error('hook server: stopped accepting (%s: %s); the '
                          'hook does its events itself', type(exc).__name__,
                          exc)
            raise

    def _accepting(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _addr = sock.accept()
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.05)
                continue
            if self._stop.is_set():
                self._turn_away(conn, ('stopping', 'stopping'), RETURN_WAIT)
                continue
            # An idle worker is woken, not a thread created per event: on
            # a node whose CPUs are busy a new task waits for its first
            # slice (milliseconds, on the path of every VM start).
            with self._cond:
                self._busy += 1
                spawn = not self._idle
                if spawn:
                    self._workers += 1
                else:
                    self._idle -= 1
            if spawn:
                try:
                    threading.Thread(target=self._work, daemon=True,
                                     name='hook-event').start()
                except RuntimeError as exc:        # no thread to be had
                    self._gone(idle=False)
                    self._turn_away(conn, ('cannot start a thread (%s)'
                                           % exc, 'thread'), TIMEOUT)
                    continue
            self._queue.put(conn)

    def _turn_away(self, conn: socket.socket, why: tuple[str, str],
                   wait: float) -> None:
        """Return a request not taken to its client."""
        with conn:
            data = _receive(conn, wait, 'it is not returned (%s); its '
                            'client has lost the domain XML' % why[0])
            if data:
                self._refuse(why)
                _send(conn, protocol.returned(data))

    def _gone(self, idle: bool) -> None:
        """An event done (its worker ``idle`` again, or ended)."""
        with self._cond:
            self._busy -= 1
            if idle:
                self._idle += 1
            else:
                self._workers -= 1
            self._cond.notify_all()

    def _work(self) -> None:
        """A worker: serves the connections queued, until a None."""
        while True:
            conn = self._queue.get()
            if conn is None:
                return
            try:
                self._serve_one(conn)
            except BaseException:
                self._gone(idle=False)
                raise
            self._gone(idle=True)

    def foreign(self, pid: int, uid: int) -> tuple[str, str] | None:
        """Why the event of this client (its ``pid`` and ``uid``) is not this
        process's to run, or None: (the reason, and the same without what
        varies per event).

        The hook must see what libvirt's hook sees: the same user, and the
        same mount and PID namespaces (libvirtd's /run/libvirt, its QEMU
        pids).  A libvirtd in a container of its own, or a sandbox's, runs
        its hook where this server's paths mean something else.
        """
        if uid != os.geteuid():
            return 'uid %d is not this server\'s' % uid, 'uid %d' % uid
        try:
            with open('/proc/%d/status' % pid, 'rb') as fh:
                ids = [line.split()[1:] for line in fh
                       if line.startswith(b'Uid:')][0]
        except (OSError, IndexError):
            return 'cannot read the uids of pid %d' % pid, 'status'
        if any(int(i) != uid for i in ids):
            # (A set-user-ID program: its caller chose its environment.)
            return ('pid %d runs with uids %s' % (pid, b'/'.join(ids).decode()),
                    'uids')
        for ns in ('mnt', 'pid'):
            try:
                theirs = os.readlink('/proc/%d/ns/%s' % (pid, ns))
            except OSError as exc:
                return ('cannot read the %s namespace of pid %d: %s' % (
                    ns, pid, exc.strerror), 'ns ' + ns)
            if theirs != os.readlink('/proc/self/ns/%s' % ns):
                return ('pid %d runs in another %s namespace (%s; libvirtd '
                        'in a container or a sandbox of its own?)'
                        % (pid, ns, theirs), '%s %s' % (ns, theirs))
        return None

    def stale(self, paths: list[str]) -> tuple[str, str] | None:
        """Why this process's code is not the wrapper's, or None."""
        if [os.path.realpath(p) for p in paths] != self._paths:
            return ('the wrapper runs the hook from %s, this process from %s '
                    '(re-run "ovs-rdt install-hook" with its ovs-rdt)'
                    % (':'.join(paths), ':'.join(self._paths)),
                    'paths %r' % paths)
        for path, mtime in self._dirs.items():
            try:
                now = os.stat(path).st_mtime_ns
            except OSError:
                now = None
            if now != mtime:
                return ('%s changed since this process started (an upgrade?): '
                        'restart it to serve the hook with the new code'
                        % path, 'changed')
        return None

    def _refuse(self, why: tuple[str, str]) -> None:
        """Log why an event is not served, once per kind of reason."""
        if why[1] not in self._refused:
            self._refused.add(why[1])
            LOG.warning('hook server: not serving the hook\'s events: %s; '
                        'the hook does them itself', why[0])

    def _serve_one(self, conn: socket.socket) -> None:
        with conn:
            data = _receive(conn, TIMEOUT, 'its client does the event '
                            'itself, if it still has the domain XML')
            if not data:
                return              # a probe (another server starting)
            try:
                taken = self._take(conn, data)
            except Exception as exc:  # noqa: BLE001 - returned, never lost
                taken = Taken(('%s: %s' % (type(exc).__name__, exc),
                               type(exc).__name__), None, None)
            if taken.request is None:
                if taken.why is not None:   # (None: the client is gone)
                    self._refuse(taken.why)
                    _send(conn, protocol.returned(data))
                return
            try:
                self.handle(*taken.request[1:], lambda out: _send(conn, out),
                            self._spool(taken))
            except Exception as exc:  # noqa: BLE001 - the client falls back
                LOG.warning('hook server: an event was not answered (%s: %s);'
                            ' the hook does it itself', type(exc).__name__,
                            exc)

    def _spool(self, taken: Taken) -> str | None:
        """Keep a request taken in its spool file; the file, or None."""
        if taken.spool is None:
            return None
        try:
            protocol.write_spool(taken.spool, taken.raw)
        except OSError as exc:
            self._refuse(('cannot keep a request in %s (%s): a client whose '
                          'event this process does not finish cannot do it '
                          'itself' % (taken.spool, exc.strerror), 'spool'))
            return None
        return taken.spool

    def _take(self, conn: socket.socket, data: bytes) -> Taken:
        """What a client sent, with the head in the stream or in its
        environment, and whether to run it.
        """
        import struct

        pid, uid, _gid = struct.unpack('3i', conn.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize('3i')))
        why = self.foreign(pid, uid)
        if why is not None:
            return Taken(why, None, None)
        spool = None
        if not protocol.in_band(data):
            try:
                head, value = _environ(pid)
            except OSError as exc:
                return Taken(('cannot read the environment of pid %d: %s' % (
                    pid, exc.strerror), 'environ'), None, None)
            if _hung_up(conn):
                # netcat gone (its timeout passed): the pid may be another
                # process's already, and so may be what was read of it.
                return Taken(None, None, None)
            data = head + data
            if value is not None:
                spool = protocol.spool_path(self.path, value)
                if spool is None:
                    self._refuse(('a client names %r for its spool, not a '
                                  'file of %s' % (value, self._spools),
                                  'spool path'))
        request = protocol.parse_request(data)
        if request is None:
            return Taken(('a request not in %s (a wrapper of another version? '
                          're-run "ovs-rdt install-hook")'
                          % protocol.PROTOCOL.decode(), 'protocol'),
                         None, None)
        why = self.stale(request[0])
        if why is not None:
            return Taken(why, None, None)
        return Taken(None, request, spool, data)

    def handle(self, argv: list[str], xml: bytes,
               send: Callable[[bytes], bool],
               spool: str | None = None) -> None:
        """Run one event as the hook would; ``send`` its reply, once: at
        the end, or when the hook answers early (``release``: exit 0,
        the rest of the work done after); then remove its ``spool``.
        """
        served = Served(self._forward, self.platforms, send, spool)
        cpu = time.process_time()
        try:
            rc = hook.run(argv, xml, served)
        finally:
            served.detach()
        with self._served_lock:
            self.served += 1
        served.finish(rc)
        # (The process's CPU: the event's own when it serves one at a time,
        # which is what bench/bench_hook.py reads.)
        LOG.debug('served %s: exit %d%s, %.2f ms of CPU', ' '.join(argv[-4:]),
                  rc, ' (answered 0 first)' if served.answered else '',
                  (time.process_time() - cpu) * 1000)


def _receive(conn: socket.socket, timeout: float, then: str) -> bytes:
    """A client's stream, to its end (bounded as the hook bounds its
    standard input: :func:`hook.read_stdin <libvirt_hooks.hook.read_stdin>`);
    b'' if it cannot be read whole in ``timeout`` seconds (logged, with
    what ``then`` happens).
    """
    try:
        conn.settimeout(timeout)
        with conn.makefile('rb', buffering=0) as stream:
            return hook.read_stdin(stream)  # type: ignore[arg-type]
    except OSError as exc:
        LOG.warning('hook server: a request was not read whole (%s); %s',
                    exc.strerror or exc, then)
        return b''


def _hung_up(conn: socket.socket) -> bool:
    """Whether the client has closed its end (not only its writing side)."""
    import select

    poller = select.poll()
    poller.register(conn, select.POLLHUP)
    return any(event & select.POLLHUP for _, event in poller.poll(0))


def _environ(pid: int) -> tuple[bytes, str | None]:
    """The request's head and the spool file in a shell client's (netcat's)
    environment; (b'', None) without them.  OSError if it cannot be read.
    """
    with open('/proc/%d/environ' % pid, 'rb') as fh:
        env = fh.read()
    head, spool = b'', None
    for item in env.split(b'\0'):
        key, eq, value = item.partition(b'=')
        if key == protocol.ENV_HEAD.encode() and eq:
            head = value
        elif key == protocol.ENV_SPOOL.encode() and eq:
            spool = value.decode('utf-8', 'surrogateescape')
    return head, spool


def _send(conn: socket.socket, data: bytes) -> bool:
    """The reply, then the end of it (the client reads to the end);
    whether it went.

    A client gone (its timeout passed) does the event itself.
    """
    try:
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
    except OSError as exc:
        LOG.warning('hook server: the hook\'s client went before its answer '
                    '(%s); it does the event itself', exc.strerror or exc)
        return False
    return True


def add_arguments(parser: Any) -> None:
    """``ovs-rdt serve-hook`` takes no options of its own."""


def run(settings: Any, args: Any) -> int:
    """``ovs-rdt serve-hook``: serve the hook's events in the foreground.

    What ovs-rdt-agent does with ``[libvirt] hook_server``, for a node that
    runs no agent; until SIGTERM or SIGINT.
    """
    import signal

    from ovs_rdt.exceptions import RDTError

    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    path = socket_path(settings.resctrl.root)
    try:
        server = HookServer(path).start()
    except OSError as exc:
        raise RDTError('cannot serve the hook on %s: %s' % (path, exc))
    print('serving the libvirt hook on %s (the wrapper of "ovs-rdt '
          'install-hook" with [libvirt] hook_server = true asks here)'
          % path, flush=True)
    try:
        done.wait()
    finally:
        server.stop()
    return 0
