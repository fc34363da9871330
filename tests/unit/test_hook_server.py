"""libvirt_hooks.server: the hook's events served by a long-lived process.

The wrapper is the real one (``install.wrapper_text`` with a socket), run
as libvirt runs it; the server runs in this process over the fake resctrl
tree of test_hook's ``node``.  Whatever the server does (not there,
refusing the protocol, gone mid-event, silent), the event's outcome is
what the hook by itself gives.
"""
import os
import socket
import subprocess
import threading

import pytest

from libvirt_hooks import install
from libvirt_hooks import protocol
from libvirt_hooks import server
from tests.unit.test_domain import rdt, xml
from tests.unit.test_hook import GROUP, L3_3, node  # noqa: F401 (fixture)
from tests.unit.test_hook_wrapper import LIBVIRT_ENV

ZERO = xml(rdt('<rdt:l3 ways="0"/>'))


NETCAT = os.path.exists(install.NETCAT)


@pytest.fixture(params=['sh', 'python'])
def served(request, node, tmp_path):  # noqa: F811 (the fixture above)
    """The node, a wrapper naming a socket, and serve() to start a server.

    The wrapper's client: the shell with netcat, or Python (no netcat).
    """
    if request.param == 'sh' and not NETCAT:
        pytest.skip('no %s (bindep: netcat-openbsd)' % install.NETCAT)
    netcat = install.NETCAT if request.param == 'sh' else '/nonexistent'
    sock = str(tmp_path / 'run-ovs-rdt' / 'hook.sock')
    wrapper = str(tmp_path / 'hooks' / 'qemu.d' / '50-ovs-rdt')

    def reinstall(paths=None):
        with open(wrapper + '.tmp', 'w') as fh:
            fh.write(install.wrapper_text(str(node.config), socket=sock,
                                          netcat=netcat, paths=paths))
        os.chmod(wrapper + '.tmp', 0o755)
        os.replace(wrapper + '.tmp', wrapper)
    os.makedirs(os.path.dirname(wrapper))
    reinstall()
    started = []

    def serve():
        srv = server.HookServer(sock).start()
        started.append(srv)
        return srv

    def run(data, op='prepare', subop='begin', name='vm1'):
        return subprocess.run([wrapper, name, op, subop, '-'], input=data,
                              capture_output=True, env=LIBVIRT_ENV,
                              timeout=120)

    node.sock, node.serve, node.exec = sock, serve, run
    node.reinstall, node.client = reinstall, request.param
    yield node
    for srv in started:
        srv.stop()


def test_parse_request():
    args = [b'--config-file', b'/etc/x.conf', b'vm1', b'prepare', b'begin',
            b'-']
    body = b'6\n' + b''.join(a + b'\n' for a in args)
    head = protocol.header(['/usr/lib/python3/dist-packages']).encode()
    assert head == b'ovs-rdt-hook/3 ["/usr/lib/python3/dist-packages"]'
    parsed = (['/usr/lib/python3/dist-packages'],
              ['--config-file', '/etc/x.conf', 'vm1', 'prepare', 'begin', '-'],
              b'<d/>\n')
    assert protocol.parse_request(head + b'\n' + body + b'<d/>\n') == parsed
    # The XML is what follows the last argument's line, as it is.
    assert protocol.parse_request(head + b'\n' + body)[2] == b''
    assert protocol.parse_request(b'ovs-rdt-hook/1 []\n' + body + b'<d/>') \
        is None
    assert protocol.parse_request(b'ovs-rdt-hook/3 nope\n' + body +
                                  b'<d/>') is None
    for bad in (b'7\n', b'x\n', b'65\n', b'6'):      # count: short, NaN, big
        assert protocol.parse_request(head + b'\n' + bad + body[2:]) is None
    assert protocol.parse_request(head + b'\n' + body[:-3]) is None
    assert protocol.parse_request(head) is None
    assert protocol.parse_request(b'') is None


def test_head_and_the_request_returned():
    head = protocol.head(['/p'], ['vm1', 'prepare', 'begin', '-'])
    assert head == b'ovs-rdt-hook/3 ["/p"]\n4\nvm1\nprepare\nbegin\n-\n'
    assert protocol.parse_request(head + b'<d/>') == (
        ['/p'], ['vm1', 'prepare', 'begin', '-'], b'<d/>')
    assert protocol.in_band(head) and not protocol.in_band(b'<domain/>')
    assert protocol.returned(b'<d/>\n') == b'-\n<d/>\n\n.'


def test_spool_path_is_a_pid_in_the_server_s_directory(tmp_path):
    sock = str(tmp_path / 'hook-x-3.sock')
    where = protocol.spool_dir(sock)
    assert where == str(tmp_path / 'hook-x-3.spool')
    assert protocol.spool_path(sock, where + '/123') == where + '/123'
    for bad in ('/etc/passwd', where + '/../123', where + '/12a',
                where + '/', where + '/' + '1' * 11, str(tmp_path) + '/123'):
        assert protocol.spool_path(sock, bad) is None, bad


def test_a_spool_is_taken_once_and_only_by_its_event(tmp_path):
    path = str(tmp_path / '42')
    argv = ['--config-file', '/c', 'vm1', 'prepare', 'begin', '-']
    protocol.write_spool(path, protocol.head(['/p'], argv) + b'<d/>')
    assert os.listdir(str(tmp_path)) == ['42']          # (no .tmp left)
    assert protocol.take_spool(path, argv[:2] + ['vm2'] + argv[3:]) is None
    assert os.path.exists(path)                 # another event's: kept
    assert protocol.take_spool(path, argv) == b'<d/>'
    assert not os.path.exists(path)
    assert protocol.take_spool(path, argv) is None


def test_reply_ends_in_a_line_of_its_own():
    assert protocol.reply(0, '') == b'0\n.'
    assert protocol.reply(1, 'ovs-rdt: no\n') == b'1\novs-rdt: no\n.'
    assert protocol.reply(1, 'no') == b'1\nno\n.'


def test_socket_per_resctrl_root():
    a = server.socket_path('/sys/fs/resctrl')
    assert a.startswith('/run/ovs-rdt/hook-') and a.endswith('.sock')
    assert a == server.socket_path('/sys/fs/resctrl/')
    assert a != server.socket_path('/tmp/emu/resctrl')


def wait_served(srv, count):
    """Until the server has served ``count`` events (a release it answered
    early is done a moment after its client exits).
    """
    from ovs_rdt.sandbox.wait import wait_for
    wait_for(lambda: srv.served >= count, 30, '%d events served' % count)
    assert srv.served == count


def pids(bed, what):
    """The pids of the hook log lines that contain ``what``."""
    return [int(line.split('ovs-rdt-hook[')[1].split(']')[0])
            for line in bed.log.read_text().splitlines() if what in line]


def test_served_event_is_the_hook_s(served):
    srv = served.serve()
    assert os.stat(served.sock).st_mode & 0o777 == 0o600
    res = served.exec(L3_3)
    assert (res.returncode, res.stdout, res.stderr) == (0, b'', b'')
    assert srv.served == 1
    assert GROUP in served.groups()
    # Logged by this process (the server), not by the hook's.
    assert pids(served, 'prepare begin: reserved 3 L3 ways') == [os.getpid()]
    assert served.exec(L3_3, 'release', 'end').returncode == 0
    wait_served(srv, 2)           # (answered first, done after)
    assert GROUP not in served.groups()
    # A refusal: the same exit status and line as by itself.
    res = served.exec(ZERO, name="vm '2'")
    assert srv.served == 3
    srv.stop()
    alone = served.exec(ZERO, name="vm '2'")
    assert (res.returncode, res.stdout, res.stderr) == \
        (alone.returncode, alone.stdout, alone.stderr)
    assert res.returncode == 1
    assert res.stderr == ("ovs-rdt: refusing to start domain 'vm '2'': "
                          "<rdt:l3 ways>: '0' must be from 1 to 64\n"
                          ).encode()
    assert len(set(pids(served, "vm '2'"))) == 2     # the server, the hook


def test_the_core_s_log_records_go_to_the_event_s_log(served, monkeypatch):
    # The core logs through `logging` (the server's own handlers); records
    # of the thread serving an event also go to that event's hook log.
    import logging

    from libvirt_hooks import hook

    def prepare(self, dom):
        self.settings                   # (the log file is configured)
        logging.getLogger('ovs_rdt.manager').warning('kept %s', dom.name)  # (the XML's)
        return 0
    monkeypatch.setattr(hook.Hook, 'prepare', prepare)
    srv = served.serve()
    assert served.exec(L3_3, name='vm7').returncode == 0
    logging.getLogger('ovs_rdt.manager').warning('not an event')
    assert srv.served == 1
    lines = [line for line in served.log.read_text().splitlines()
             if 'kept' in line or 'not an event' in line]
    assert len(lines) == 1 and lines[0].endswith(
        "WARNING domain 'vm7' prepare begin: kept vm1"), lines


def peer_pid(conn):
    import struct
    return struct.unpack('3i', conn.getsockopt(
        socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize('3i')))[0]


def spools(bed):
    where = protocol.spool_dir(bed.sock)
    return sorted(os.listdir(where)) if os.path.isdir(where) else None


@pytest.fixture
def impostor(served):
    """listen(fault): a server on the socket that reads each request,
    keeps it in the client's spool as ours does before it runs an event
    (``spool=False``: as one killed while it read does not), then fails
    the client with ``fault``.
    """
    stop = threading.Event()
    made = []

    def listen(fault, spool=True):
        os.makedirs(protocol.spool_dir(served.sock), exist_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(served.sock)
        made.append(listener)
        if fault == 'dead':             # a killed server's socket
            listener.close()
            return
        listener.listen(8)
        held = []

        def answer():
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                data = server._receive(conn, 60, 'the test fails')
                head, path = server._environ(peer_pid(conn))
                if spool and path:
                    protocol.write_spool(path, head + data)
                if fault == 'closes':
                    conn.close()
                elif fault == 'garbage':
                    conn.sendall(b'yes please')
                    conn.close()
                elif fault == 'bare':           # a status without its line
                    conn.sendall(b'0')
                    conn.close()
                elif fault == 'short':          # cut before its last line
                    conn.sendall(b'0\nwarning: \n')
                    conn.close()
                else:
                    held.append(conn)
        threading.Thread(target=answer, daemon=True).start()
    yield listen
    stop.set()
    for listener in made:
        listener.close()
        os.unlink(served.sock)


@pytest.mark.parametrize('fault', ['none', 'dead', 'closes', 'garbage',
                                   'bare', 'short', 'silent'])
def test_a_server_that_does_not_answer_is_done_without(served, monkeypatch,
                                                       impostor, fault):
    # No socket; a socket nobody listens on (netcat refused: standard
    # input untouched); a server that took the
    # event and then closes without a reply (killed mid-event), answers
    # nonsense, a status without the newline that ends it, or a reply
    # without its last line, or never answers (the client's timeout, 1 s
    # here): the hook does the event itself, with the XML it has (Python)
    # or the server kept (the shell's netcat sent its own).
    monkeypatch.setattr(server, 'TIMEOUT', 1)
    served.reinstall()
    if fault != 'none':
        impostor(fault)
    # (By itself the hook cannot write to the fake tree: a check.)
    res = served.exec(L3_3, 'migrate', 'begin')
    assert (res.returncode, res.stderr) == (0, b''), res.stderr
    done = pids(served, 'migrate begin: capacity check passed')
    assert len(done) == 1 and done[0] != os.getpid()
    res = served.exec(ZERO)
    assert res.returncode == 1
    assert b"'0' must be from 1 to 64" in res.stderr
    assert spools(served) in (None, [])         # each taken


@pytest.mark.parametrize('op', ['migrate', 'started', 'release'])
def test_a_server_killed_while_it_read_loses_only_that_event(
        served, impostor, op):
    # The shell's netcat sent libvirt's XML, and the server died before it
    # kept it: the hook fails that event as with an XML it cannot read,
    # but never stops a guest that has started.  (Python, which read the
    # XML first, does the event itself.)
    if served.client == 'python' and op != 'migrate':
        pytest.skip('the hook by itself cannot write to the fake tree')
    impostor('closes', spool=False)
    res = served.exec(L3_3, op, 'end' if op == 'release' else 'begin')
    if served.client == 'python':
        assert (res.returncode, res.stderr) == (0, b''), res.stderr
        assert len(pids(served, 'capacity check passed')) == 1
        return
    if op == 'release':
        assert (res.returncode, res.stderr) == (0, b'')
        return
    said = served.log.read_text()
    assert 'the hook server did not answer: killed while it read this ' \
        'event, it took the domain XML with it?' in said
    if op == 'migrate':
        assert res.returncode == 1
        assert res.stderr.startswith(b"ovs-rdt: refusing the incoming "
                                     b"migration of domain 'vm1': ")
        assert b'the hook server did not answer' in res.stderr
    else:
        assert (res.returncode, res.stderr) == (0, b'')
        assert 'ERROR' in said and 'stopping' not in said


def test_start_replaces_a_dead_socket_and_refuses_a_live_one(served):
    os.makedirs(os.path.dirname(served.sock))
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(served.sock)                 # a killed server's socket
    dead.close()
    srv = served.serve()
    with pytest.raises(OSError, match='another hook server listens'):
        server.HookServer(served.sock).start()
    assert served.exec(L3_3).returncode == 0 and srv.served == 1
    assert GROUP in served.groups()
    srv.stop()
    assert not os.path.exists(served.sock)


def test_stop_leaves_a_later_server_s_socket(served):
    first = served.serve()
    os.unlink(served.sock)                 # e.g. removed by hand
    second = served.serve()
    first.stop()
    assert os.path.exists(served.sock)
    assert spools(served) == []            # (the later server's spool)
    assert served.exec(L3_3).returncode == 0 and second.served == 1


def test_concurrent_events_and_no_descriptor_leak(served):
    srv = served.serve()
    fds = len(os.listdir('/proc/self/fd'))
    uuids = ['6f1c7a52-8c0e-4d4a-9a61-%012x' % i for i in range(6)]
    docs = [xml(rdt('<rdt:l3 ways="1"/>'), uuid=u) for u in uuids]
    for op, subop in (('prepare', 'begin'), ('release', 'end')):
        results = [None] * len(docs)

        def one(i):
            results[i] = served.exec(docs[i], op, subop, name='vm%d' % i)
        threads = [threading.Thread(target=one, args=(i,))
                   for i in range(len(docs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.returncode for r in results] == [0] * len(docs), \
            [r.stderr for r in results]
        wait_served(srv, len(docs) * (1 if op == 'prepare' else 2))
        groups = {'ovsrdt-vm-' + u for u in uuids}
        if op == 'prepare':
            assert groups <= set(served.groups())
        else:
            assert not groups & set(served.groups())
    assert srv.served == 2 * len(docs)
    assert len(os.listdir('/proc/self/fd')) == fds


def test_without_its_packages_the_shell_part_still_sees_the_xml(tmp_path):
    # The packages gone and no server: the client read the XML, and the
    # shell fallback must see it again to refuse a VM that asks.
    conf = tmp_path / 'ovs-rdt.conf'
    conf.write_text('')
    path = str(tmp_path / 'qemu.d' / '50-ovs-rdt')
    install.install(path, str(conf), paths=[str(tmp_path / 'gone')],
                    socket=str(tmp_path / 'none.sock'))
    res = subprocess.run([path, 'vm1', 'prepare', 'begin', '-'], input=L3_3,
                         capture_output=True, env=LIBVIRT_ENV, timeout=60)
    assert res.returncode == 1
    assert b'cannot import its packages' in res.stderr
    res = subprocess.run([path, 'vm1', 'prepare', 'begin', '-'],
                         input=xml(), capture_output=True, env=LIBVIRT_ENV,
                         timeout=60)
    assert (res.returncode, res.stderr) == (0, b'')


def slowed(monkeypatch, owner, name, seconds):
    """``owner.name`` made ``seconds`` slower; the event set as it begins."""
    import time

    begun = threading.Event()
    original = getattr(owner, name)

    def slow(self, *args):
        begun.set()
        time.sleep(seconds)
        return original(self, *args)
    monkeypatch.setattr(owner, name, slow)
    return begun


def test_stop_lets_the_events_being_served_finish(served, monkeypatch):
    # An agent stopping (SIGTERM) mid-event: the event ends, answered.
    from libvirt_hooks import hook

    begun = slowed(monkeypatch, hook.Hook, 'prepare', 1.0)
    srv = served.serve()
    result = []
    thread = threading.Thread(target=lambda: result.append(
        served.exec(L3_3)))
    thread.start()
    assert begun.wait(30)
    srv.stop()
    assert not os.path.exists(served.sock)
    thread.join(60)
    assert result[0].returncode == 0, result[0].stderr
    assert srv.served == 1 and GROUP in served.groups()
    assert pids(served, 'prepare begin: reserved') == [os.getpid()]


def test_only_the_wrapper_s_own_code_is_served(served, tmp_path, caplog):
    # A wrapper of another installation (another virtualenv) is not served;
    # nor, after an upgrade in place, is any wrapper until a restart.
    import libvirt_hooks

    srv = served.serve()
    site = tmp_path / 'other-site'
    site.mkdir()
    for pkg in ('libvirt_hooks', 'ovs_rdt'):
        os.symlink(os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(libvirt_hooks.__file__))), pkg), str(site / pkg))
    served.reinstall(paths=[str(site)])
    res = served.exec(L3_3, 'migrate', 'begin')
    assert res.returncode == 0, res.stderr
    assert srv.served == 0
    assert pids(served, 'migrate begin: capacity check')[0] != os.getpid()
    served.reinstall()
    assert served.exec(L3_3, 'migrate', 'begin').returncode == 0
    assert srv.served == 1
    pkg_dir = os.path.dirname(os.path.abspath(libvirt_hooks.__file__))
    before = os.stat(pkg_dir).st_mtime_ns
    os.utime(pkg_dir, ns=(before, before + 10 ** 9))      # "upgraded"
    try:
        for _ in range(2):
            assert served.exec(L3_3, 'migrate', 'begin').returncode == 0
        assert srv.served == 1
    finally:
        os.utime(pkg_dir, ns=(before, before))
    assert served.exec(L3_3, 'migrate', 'begin').returncode == 0
    assert srv.served == 2
    warned = [r.getMessage() for r in caplog.records
              if 'not serving the hook' in r.getMessage()]
    assert len(warned) == 2, warned         # each kind of reason once
    assert 'changed since this process started' in warned[1]


def test_release_is_answered_once_locked_and_what_follows_waits(
        served, monkeypatch):
    """``release end`` (libvirt ignores its status) is answered as soon as
    the hook holds the resctrl lock, the removal done after; the next
    change, even by a hook process the server never sees, waits for it on
    the lock (else this ``prepare`` could go first and the release then
    remove the group it made).
    """
    from ovs_rdt import manager

    original = manager.CacheManager.release
    go = threading.Event()

    def release(self, name):
        assert go.wait(30)
        return original(self, name)
    monkeypatch.setattr(manager.CacheManager, 'release', release)
    srv = served.serve()
    assert served.exec(L3_3).returncode == 0 and GROUP in served.groups()
    res = served.exec(L3_3, 'release', 'end')      # returns, still blocked
    assert (res.returncode, res.stderr) == (0, b'')
    assert GROUP in served.groups() and srv.served == 1
    result = []
    again = threading.Thread(target=lambda: result.append(
        served.run(L3_3)))                         # the hook by itself
    again.start()
    again.join(0.5)
    assert not result                              # waits for the lock
    go.set()
    again.join(60)
    assert result == [0]
    wait_served(srv, 2)
    assert GROUP in served.groups()                # the later prepare's
    lines = [line for line in served.log.read_text().splitlines()
             if 'removed group' in line or 'reserved 3' in line]
    assert ['removed' in line for line in lines] == [False, True, False]


def test_a_refusal_is_never_answered_early(served):
    srv = served.serve()
    res = served.exec(ZERO)
    assert res.returncode == 1 and b"'0' must be from 1 to 64" in res.stderr
    assert srv.served == 1


def test_stop_finishes_a_release_it_has_answered(served, monkeypatch):
    from ovs_rdt import manager

    begun = slowed(monkeypatch, manager.CacheManager, 'release', 0.5)
    srv = served.serve()
    assert served.exec(L3_3).returncode == 0
    assert served.exec(L3_3, 'release', 'end').returncode == 0
    assert begun.wait(30)
    srv.stop()
    assert GROUP not in served.groups() and srv.served == 2


@pytest.mark.parametrize('name', ['a$b`c\'d"e\\f $(x) ${y}', 'two\nlines'])
def test_arguments_reach_the_server_as_they_are(served, name):
    # The shell expands "$1" once (into netcat's environment), never
    # what it holds;
    # an argument with a newline (the protocol's separator) is not asked
    # for: the hook does that event itself.
    srv = served.serve()
    res = served.exec(ZERO, name=name)
    assert srv.served == (0 if '\n' in name else 1)
    srv.stop()
    alone = served.exec(ZERO, name=name)
    assert res.returncode == alone.returncode == 1
    assert res.stderr == alone.stderr
    assert b'$(x) ${y}' in res.stderr or b'two' in res.stderr


def ask(sock, request):
    """The server's whole reply to ``request`` (as the Python client)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with conn:
        conn.connect(sock)
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        got = b''
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                return got
            got += chunk


def test_a_request_of_another_protocol_is_returned_and_logged_once(
        served, caplog):
    # E.g. a client of another version (ovs-rdt-hook/1 joined the
    # arguments with NULs): the stream back, so that it does the work.
    srv = served.serve()
    old = (protocol.header([]).replace('/3', '/1').encode() + b'\n' +
           b'\0'.join([b'vm1', b'prepare', b'begin', b'-']) + b'\0\0<d/>')
    for _ in range(2):
        got = ask(served.sock, old)
        assert got == protocol.returned(old) == b'-\n' + old + b'\n.'
    assert srv.served == 0
    warned = [r.getMessage() for r in caplog.records
              if 'a request not in ovs-rdt-hook/3' in r.getMessage()]
    assert len(warned) == 1, warned


def connected(path):
    """How many sockets of /proc/net/unix are bound to ``path``: the
    listener, and one per connection not accepted yet.
    """
    with open('/proc/net/unix') as fh:
        return sum(1 for line in fh if line.rstrip().endswith(' ' + path))


def test_stop_returns_the_requests_not_accepted_yet(served, monkeypatch):
    # A client connected while the server stops: its request comes back
    # (else netcat's XML would be gone with the socket), and it does the
    # event itself.
    from ovs_rdt.sandbox.wait import wait_for

    begun = slowed(monkeypatch, server.HookServer, '_accept', 2.0)
    srv = served.serve()
    assert begun.wait(30)
    result = []
    thread = threading.Thread(target=lambda: result.append(
        served.exec(L3_3, 'migrate', 'begin')))
    thread.start()
    bound = srv._sock.getsockname()       # (the socket's name before rename)
    wait_for(lambda: connected(bound) >= 2, 30, 'a client waiting')
    srv.stop()
    thread.join(60)
    assert (result[0].returncode, result[0].stderr) == (0, b'')
    assert srv.served == 0
    done = pids(served, 'migrate begin: capacity check passed')
    assert len(done) == 1 and done[0] != os.getpid()


def test_the_spool_holds_the_event_while_it_runs(served, monkeypatch):
    from libvirt_hooks import hook

    begun = slowed(monkeypatch, hook.Hook, 'prepare', 0.5)
    srv = served.serve()
    assert spools(served) == []
    result = []
    thread = threading.Thread(target=lambda: result.append(
        served.exec(L3_3)))
    thread.start()
    assert begun.wait(30)
    kept = spools(served)
    if served.client == 'sh':
        assert len(kept) == 1 and kept[0].isdigit()
        with open(os.path.join(protocol.spool_dir(served.sock), kept[0]),
                  'rb') as fh:
            request = protocol.parse_request(fh.read())
        assert request[1][-4:] == ['vm1', 'prepare', 'begin', '-']
        assert request[2] == L3_3
    else:
        assert kept == []                   # (Python has its own copy)
    thread.join(60)
    assert result[0].returncode == 0
    assert spools(served) == []
    srv.stop()
    assert spools(served) is None


def test_start_sweeps_the_spools_of_clients_gone(tmp_path):
    sock = str(tmp_path / 'hook.sock')
    where = protocol.spool_dir(sock)
    os.makedirs(where)
    gone = subprocess.Popen(['true'])
    gone.wait()
    for name in (str(gone.pid), str(os.getpid()), '12.tmp'):
        (tmp_path / 'hook.spool' / name).write_bytes(b'x')
    srv = server.HookServer(sock).start()
    try:
        assert os.listdir(where) == [str(os.getpid())]
    finally:
        srv.stop()
    assert os.listdir(where) == [str(os.getpid())]     # not removed


def test_another_namespace_s_request_is_returned(served, monkeypatch):
    # (E.g. a libvirtd in a container of its own: the functional tests run
    # one.)  The shell's client gets its XML back and does the event.
    srv = served.serve()
    monkeypatch.setattr(server.HookServer, 'foreign', lambda self, pid, uid: (
        'pid %d runs in another mnt namespace' % pid, 'ns mnt'))
    res = served.exec(L3_3, 'migrate', 'begin')
    assert (res.returncode, res.stderr) == (0, b''), res.stderr
    assert srv.served == 0
    done = pids(served, 'migrate begin: capacity check passed')
    assert len(done) == 1 and done[0] != os.getpid()


def test_no_thread_for_an_event_returns_it(served, monkeypatch, caplog):
    srv = served.serve()

    class NoThread:
        def __init__(self, *args, **kwargs):
            pass

        def start(self):
            raise RuntimeError("can't start new thread")
    monkeypatch.setattr(server.threading, 'Thread', NoThread)
    res = served.exec(L3_3, 'migrate', 'begin')
    assert (res.returncode, res.stderr) == (0, b''), res.stderr
    assert srv.served == 0
    assert pids(served, 'capacity check passed')[0] != os.getpid()
    assert any("cannot start a thread (can't start new thread)" in
               r.getMessage() for r in caplog.records)


def test_an_event_is_served_without_its_spool(served, monkeypatch, caplog):
    srv = served.serve()

    def full(path, request):
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(protocol, 'write_spool', full)
    for _ in range(2):
        res = served.exec(L3_3, 'migrate', 'begin')
        assert (res.returncode, res.stderr) == (0, b'')
    assert srv.served == 2
    warned = [r.getMessage() for r in caplog.records
              if 'cannot keep a request' in r.getMessage()]
    assert len(warned) == (1 if served.client == 'sh' else 0), warned


def test_a_server_slower_than_the_client_s_wait(served, monkeypatch):
    # The client's netcat gives up (1 s here) and the wrapper does the
    # event with the server's spool; the server's late answer finds no
    # client, and no spool file is left.
    from libvirt_hooks import hook

    monkeypatch.setattr(server, 'TIMEOUT', 1)
    served.reinstall()
    begun = slowed(monkeypatch, hook.Hook, 'check', 2.5)
    srv = served.serve()
    res = served.exec(L3_3, 'migrate', 'begin')
    assert (res.returncode, res.stderr) == (0, b''), res.stderr
    assert begun.is_set()
    done = pids(served, 'capacity check passed')
    assert done and done[0] != os.getpid()     # the client's own
    wait_served(srv, 1)
    assert spools(served) == []


def test_an_error_reading_a_request_returns_it(served, caplog):
    srv = served.serve()
    bad = (protocol.head(['\udc80'], ['vm1', 'migrate', 'begin', '-'])
           + L3_3)
    assert ask(served.sock, bad) == protocol.returned(bad)
    assert srv.served == 0
    assert not any(r.exc_info for r in caplog.records)


def test_a_set_user_id_client_is_not_served(served):
    # Effective uid root, real uid nobody: its caller chose its environment
    # (and with it the head: the config the hook reads).
    import sys
    srv = served.serve()
    code = (
        'import os, socket, sys\n'
        'os.setresuid(65534, 0, 0)\n'
        's = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n'
        's.connect(sys.argv[1])\n'
        's.sendall(sys.stdin.buffer.read())\n'
        's.shutdown(socket.SHUT_WR)\n'
        'out = b""\n'
        'while True:\n'
        '    c = s.recv(65536)\n'
        '    if not c:\n'
        '        break\n'
        '    out += c\n'
        'sys.stdout.buffer.write(out)\n')
    request = protocol.head([], ['vm1', 'migrate', 'begin', '-']) + L3_3
    res = subprocess.run([sys.executable, '-c', code, served.sock],
                         input=request, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout == protocol.returned(request)
    assert srv.served == 0


def test_a_client_gone_is_told_apart():
    a, b = socket.socketpair()
    with a, b:
        b.shutdown(socket.SHUT_WR)          # netcat -N: done sending
        assert not server._hung_up(a)
        b.close()
        assert server._hung_up(a)


def test_a_stale_spool_never_replaces_the_xml_on_standard_input(
        node, tmp_path):  # noqa: F811 (the fixture)
    from libvirt_hooks import hook

    argv = ['--config-file', str(node.config), 'vm1', 'migrate', 'begin',
            '-']
    spool = str(tmp_path / '123')
    protocol.write_spool(spool, protocol.head([], argv) + ZERO)
    assert hook.run(argv, L3_3, spool=spool) == 0       # not ZERO's refusal
    assert os.path.exists(spool)
    assert hook.run(argv, b'', spool=spool) == 1        # taken: ZERO's
    assert not os.path.exists(spool)


def test_without_its_packages_the_shell_part_reads_the_spool(
        served, impostor, tmp_path):
    # Packages gone while a server took the event and died: the shell
    # fallback refuses a VM whose XML (in the spool) asks for ovs-rdt.
    if served.client == 'python':
        pytest.skip('the Python client keeps the XML itself')
    served.reinstall(paths=[str(tmp_path / 'gone')])
    impostor('closes')
    res = served.exec(L3_3)
    assert res.returncode == 1, res.stderr
    assert b'cannot import its packages' in res.stderr
    res = served.exec(xml())
    assert (res.returncode, res.stderr) == (0, b'')
