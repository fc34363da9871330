"""What the wrapper's client and the hook server say to each other, and the
spool that keeps a request the server took.

Protocol ``ovs-rdt-hook/3``.  A request is a head (a line of the protocol's
name, a space and the wrapper's package directories in JSON: :func:`header`;
a line with the number of arguments; the arguments a line each) and the
domain XML.  The shell's client is netcat, and netcat reads libvirt's
standard input itself: the client never holds the XML, and the head travels
in netcat's environment (:data:`ENV_HEAD`; the server reads it from
``/proc/<pid>/environ``, having checked that the client runs as its user,
real and effective, in its mount and PID namespaces), the stream being the
XML alone.  The Python client, which reads the XML first, sends the head
at the start of the stream.  A client asks only for arguments without a
newline (libvirt refuses one in a domain name).  The client shuts down its
writing side at the end.

The reply is one of:

* the exit status in decimal and a newline, what the hook wrote for
  libvirt (lines, each ending in a newline), and a last line ``.`` without
  one (:func:`reply`);
* ``-``, a newline, the stream as the server received it, a newline and
  ``.`` (:func:`returned`): the server did not take the event (another
  protocol, other code, another namespace, stopping); the client, which no
  longer has the XML, does the event itself with this copy.

A reply cut short is none.  Before it runs an event, the server keeps the
request in a spool file the shell client names (:data:`ENV_SPOOL`,
``<spool dir>/<the client shell's pid>``) and removes it once its reply is
sent: a server that dies or stays silent mid-event leaves it, and the
client does the event itself from it (:func:`take_spool`).  A server that
has not kept a request yet loses its XML if it dies or stops answering:
killed while it reads one (or with clients connected it has not accepted
yet), or frozen (SIGSTOP) before it accepts them; the hook then fails
that event as with a domain XML it cannot read
(:func:`libvirt_hooks.hook.run`) after netcat's wait (:data:`TIMEOUT
<libvirt_hooks.server.TIMEOUT>` when frozen).

Pure: the standard library only, but for the server's :func:`write_spool`
(the wrapper's fallback imports the rest).
"""
from __future__ import annotations

import os

#: The protocol's version: in its name, and in the socket's (a wrapper of
#: another version finds no server, and does its events itself).
VERSION = 3
PROTOCOL = b'ovs-rdt-hook/%d' % VERSION
#: The most arguments a request may have.
MAX_ARGS = 64
#: netcat's environment: the request's head (:func:`head`), and the spool
#: file the server keeps the request in while it runs the event.
ENV_HEAD = 'OVS_RDT_HOOK'
ENV_SPOOL = 'OVS_RDT_HOOK_SPOOL'


def header(paths: list[str]) -> str:
    """The request's first line: the protocol and the package directories
    the wrapper runs the hook from (JSON: one line, whatever the paths).
    """
    import json
    return '%s %s' % (PROTOCOL.decode(), json.dumps(paths))


def head(paths: list[str], argv: list[str]) -> bytes:
    """A request's head: :func:`header`, the number of arguments and the
    arguments, each line ending in a newline.
    """
    return ('%s\n%d\n%s' % (header(paths), len(argv), ''.join(
        a + '\n' for a in argv))).encode('utf-8', 'surrogateescape')


def in_band(data: bytes) -> bool:
    """Whether the stream starts with a head, of any version (the Python
    client), rather than the XML.
    """
    return data.startswith(PROTOCOL.partition(b'/')[0] + b'/')


def parse_request(data: bytes
                  ) -> tuple[list[str], list[str], bytes] | None:
    """(the wrapper's package paths, arguments, domain XML) of a request
    (head and XML), None if not one of ours.
    """
    import json

    line, nl, rest = data.partition(b'\n')
    protocol, _, paths = line.partition(b' ')
    if protocol != PROTOCOL or not nl:
        return None
    count, nl, rest = rest.partition(b'\n')
    if not nl or not count.isdigit() or int(count) > MAX_ARGS:
        return None
    args = []
    for _ in range(int(count)):
        arg, nl, rest = rest.partition(b'\n')
        if not nl:
            return None
        args.append(arg)
    try:
        where = json.loads(paths.decode('utf-8', 'surrogateescape'))
    except ValueError:
        return None
    if not isinstance(where, list) or not all(isinstance(p, str)
                                              for p in where):
        return None
    argv = [a.decode('utf-8', 'surrogateescape') for a in args]
    return where, argv, rest


def reply(status: int, text: str) -> bytes:
    """The answer to a request: the status line, ``text`` (lines) and the
    last line, ``.``.
    """
    if text and not text.endswith('\n'):
        text += '\n'
    return b'%d\n%s.' % (status, text.encode('utf-8', 'replace'))


def returned(data: bytes) -> bytes:
    """The reply to a request not taken: the stream back, for the client
    to do the event itself.
    """
    return b'-\n%s\n.' % data


def spool_dir(socket: str) -> str:
    """Where a server on ``socket`` keeps the requests it runs."""
    return os.path.splitext(socket)[0] + '.spool'


def spool_path(socket: str, value: str) -> str | None:
    """The spool file of a request, from the client's :data:`ENV_SPOOL`:
    a pid in the server's spool directory, None for anything else.
    """
    where, _, pid = value.rpartition('/')
    if where != spool_dir(socket) or not pid.isdigit() or len(pid) > 10:
        return None
    return value


def write_spool(path: str, request: bytes) -> None:
    """Keep ``request`` (head and XML) in ``path``, whole or not at all."""
    from ovs_rdt import atomicfile     # (the server's; the fallback only takes)
    # (It must outlive the server, not the host: /run is a tmpfs.)
    atomicfile.write(path, request, mode=0o600, durable=False)


def take_spool(path: str, argv: list[str]) -> bytes | None:
    """The XML a server kept for this event (its arguments ``argv``), and
    the file removed; None if there is none.
    """
    try:
        with open(path, 'rb') as fh:
            data = fh.read()
    except OSError:
        return None
    request = parse_request(data)
    if request is None or request[1] != argv:
        return None                 # (another event's: the sweep's)
    try:
        os.unlink(path)
    except OSError:
        pass
    return request[2]


def sweep_spools(directory: str) -> int:
    """Remove the spool files of clients that are gone, and any a server
    did not finish writing; how many.
    """
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        if name.isdigit():
            try:
                os.kill(int(name), 0)
                continue                # (its client may still want it)
            except ProcessLookupError:
                pass
            except OSError:
                continue
        try:
            os.unlink(os.path.join(directory, name))
            removed += 1
        except OSError:
            pass
    return removed
