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
    node.reinstall = reinstall
    yield node
    for srv in started:
        srv.stop()


def test_parse_request():
    body = b'\0'.join([b'--config-file', b'/etc/x.conf', b'vm1', b'prepare',
                       b'begin', b'-'])
    head = server.header(['/usr/lib/python3/dist-packages']).encode()
    assert head == b'ovs-rdt-hook/1 ["/usr/lib/python3/dist-packages"]'
    assert server.parse_request(head + b'\n' + body + b'\0\0<d/>') == (
        ['/usr/lib/python3/dist-packages'],
        ['--config-file', '/etc/x.conf', 'vm1', 'prepare', 'begin', '-'],
        b'<d/>')
    assert server.parse_request(b'ovs-rdt-hook/2 []\n' + body + b'\0\0<d/>') \
        is None
    assert server.parse_request(b'ovs-rdt-hook/1 nope\n' + body +
                                b'\0\0<d/>') is None
    assert server.parse_request(head + b'\n' + body) is None
    assert server.parse_request(b'') is None


def test_socket_per_resctrl_root():
    a = server.socket_path('/sys/fs/resctrl')
    assert a.startswith('/run/ovs-rdt/hook-') and a.endswith('.sock')
    assert a == server.socket_path('/sys/fs/resctrl/')
    assert a != server.socket_path('/tmp/emu/resctrl')


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
    assert GROUP not in served.groups() and srv.served == 2
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


@pytest.mark.parametrize('fault', ['none', 'closes', 'garbage', 'bare',
                                   'silent'])
def test_a_server_that_does_not_answer_is_done_without(served, monkeypatch,
                                                       fault):
    # None listening; one that closes without a reply (another protocol);
    # one answering nonsense, or a status without the newline that ends
    # it; one that never answers (the client's timeout, 1 s here): the
    # hook does the event itself.
    monkeypatch.setattr(server, 'TIMEOUT', 1)
    served.reinstall()
    stop = threading.Event()
    listener = None
    if fault != 'none':
        os.makedirs(os.path.dirname(served.sock), exist_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(served.sock)
        listener.listen(8)
        held = []

        def answer():
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                if fault == 'closes':
                    conn.close()
                elif fault == 'garbage':
                    conn.sendall(b'yes please')
                    conn.close()
                elif fault == 'bare':           # a status without its line
                    conn.sendall(b'0')
                    conn.close()
                else:
                    held.append(conn)
        threading.Thread(target=answer, daemon=True).start()
    try:
        # (By itself the hook cannot write to the fake tree: a check.)
        res = served.exec(L3_3, 'migrate', 'begin')
        assert (res.returncode, res.stderr) == (0, b''), res.stderr
        done = pids(served, 'migrate begin: capacity check passed')
        assert len(done) == 1 and done[0] != os.getpid()
        res = served.exec(ZERO)
        assert res.returncode == 1
        assert b"'0' must be from 1 to 64" in res.stderr
    finally:
        stop.set()
        if listener is not None:
            listener.close()
            os.unlink(served.sock)


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


def test_stop_lets_the_events_being_served_finish(served, monkeypatch):
    # An agent stopping (SIGTERM) mid-event: the event ends, answered.
    from libvirt_hooks import hook

    begun = threading.Event()
    original = hook.Hook.prepare

    def slow(self, dom):
        begun.set()
        import time
        time.sleep(1.0)
        return original(self, dom)
    monkeypatch.setattr(hook.Hook, 'prepare', slow)
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
