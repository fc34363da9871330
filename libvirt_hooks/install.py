"""``ovs-rdt install-hook``: install (or remove) the libvirt hook wrapper.

libvirt runs every executable in ``/etc/libvirt/hooks/qemu.d/`` with almost
no environment, so the wrapper binds everything the hook needs: the Python
interpreter that runs ``ovs-rdt`` now, where the ``libvirt_hooks`` and
``ovs_rdt`` packages are, and every ``--config-file`` and ``--config-dir``
given to ``install-hook``, in order (none: the default file, as for every
command; see :func:`ovs_rdt.conf.config_paths`).  It runs the hook
module directly, in isolated mode without ``site`` (``python3 -I -S``): no
environment variable, user site or ``.pth`` file can change what runs as
root, and start-up is as fast as the interpreter gets.  If the interpreter
or the packages are gone, it fails safe (see ``_FALLBACK``).

libvirtd looks for hook scripts when it starts (and on SIGHUP): after the
first install, restart (or reload) libvirtd.
"""
from __future__ import annotations

import os
import sys

from libvirt_hooks.hook import EVENTS

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any, Sequence

DEFAULT_HOOKS_DIR = '/etc/libvirt/hooks'
HOOK_NAME = '50-ovs-rdt'
MARKER = '# ovs-rdt libvirt hook wrapper'
#: OpenBSD netcat (Debian's netcat-openbsd): the shell's client of the hook
#: server (``-U``, ``-N``); without it, Python is.
NETCAT = '/bin/nc.openbsd'
#: The arguments libvirt gives a hook: domain, operation, sub-operation,
#: extra (``-`` when none): what the shell's client sends.
LIBVIRT_ARGS = ('$1', '$2', '$3', '$4')


def hook_path(hooks_dir: str | None, name: str = HOOK_NAME) -> str:
    """Where the wrapper goes: ``<hooks dir>/qemu.d/<name>``.

    ``hooks_dir`` is libvirt's hook directory; one that already ends in
    ``qemu.d`` is taken as is.
    """
    base = (hooks_dir or DEFAULT_HOOKS_DIR).rstrip('/') or '/'
    if os.path.basename(base) != 'qemu.d':
        base = os.path.join(base, 'qemu.d')
    return os.path.join(base, name)


# The wrapper's Python (double quotes only: it goes between sh's '...').
# Its first argument says what to do: "ask" the hook server first (with
# nothing imported but _socket; libvirt_hooks.protocol: the protocol, and
# why every failure there means "do it here"), run the hook itself ("self"),
# or run it after the shell's netcat asked and had no answer
# ("spool:<file>": the XML is what standard input still holds, else what
# the server kept in that file).  If the import fails (the packages
# removed or broken under a wrapper that stays) it hands over to the
# wrapper's shell part, the XML on its standard input again.
#
# The process lives for one event, so it skips the work that only pays off
# in a long-lived one, a third of its CPU: the cyclic garbage collector
# (it runs over every object the imports create, again and again) and the
# interpreter's teardown (every module and object freed one by one; the
# kernel frees the memory and closes the files, flock included, at _exit).
# The hook writes nothing buffered but standard error, flushed first.
_BODY = """\
import gc
import sys
gc.disable()
argv = %(config)s + sys.argv[3:]
data = sys.stdin.buffer.read() if sys.stdin is not None else b""
rc = None
if sys.argv[1] == "ask" and not any("\\n" in a for a in argv):
    try:
        import _socket
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        s.settimeout(%(timeout)d)
        s.connect(%(socket)s)
        s.sendall(("%%s\\n%%d\\n" %% (%(protocol)s, len(argv)) + "".join(
            a + "\\n" for a in argv)).encode("utf-8", "surrogateescape") + data)
        s.shutdown(_socket.SHUT_WR)
        reply = []
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply.append(chunk)
        reply = b"".join(reply)
        head, nl, err = reply[:-1].partition(b"\\n")
        if reply.endswith(b"\\n.") and head.isdigit() and len(head) <= 3:
            rc = int(head)
            sys.stderr.buffer.write(err)
    except Exception:
        rc = None
if rc is None:
    sys.path += %(paths)s
    try:
        from libvirt_hooks import domain  # noqa: F401 (every event needs it)
        from libvirt_hooks.hook import run
    except Exception as exc:
        import os
        os.environ["OVS_RDT_HOOK_FAILED"] = "cannot import its packages (%%s: %%s)" %% (
            type(exc).__name__, exc)
        if not data.strip() and sys.argv[1][:6] == "spool:":
            try:
                with open(sys.argv[1][6:], "rb") as fh:
                    data = fh.read()   # (the request: the XML is in it)
            except OSError:
                pass
        fd = os.memfd_create("domain-xml")
        os.write(fd, data)
        os.lseek(fd, 0, 0)
        os.dup2(fd, 0)
        os.execv("/bin/sh", ["/bin/sh"] + sys.argv[2:])
    sys.stdout = sys.stderr   # nothing may reach the stdout pipe (libvirt)
    mode = sys.argv[1]
    rc = run(argv, data, spool=mode[6:] if mode[:6] == "spool:" else None)
sys.stdout.flush()
sys.stderr.flush()
import os
os._exit(rc)
"""

# How the wrapper starts the hook.  With a hook server's socket (``[libvirt]
# hook_server``) and OpenBSD netcat, the shell itself is the client
# (libvirt_hooks.protocol): netcat, the one process it starts (the last
# command of its $(...), which the subshell execs), reads libvirt's XML
# from standard input itself and has the request's head in its
# environment.  Every process counts, on a loaded node most of all: a
# fork waits for a CPU.  The reply's first line is the exit status, its
# last a "." (a reply cut short is none).  A server that does not take the
# event returns the XML ("-"), and Python runs the hook with it; with no
# answer at all, Python runs the hook with what a server that took the
# event left in its spool, else with what standard input still holds
# (all of it when none was listening).  Without netcat, or for other than
# libvirt's four arguments, Python asks the server (a client that reads the
# XML first and imports nothing but _socket); without a socket it runs the
# hook.  Arguments with a newline (the protocol's separator; libvirt
# refuses one in a domain name) are not asked for by either.
_RUN = """\
py=%(py)s
body=%(body)s
if [ -z "${OVS_RDT_HOOK_FAILED-}" ] && [ -x "$py" ]; then
%(served)s    exec "$py" -I -S -c "$body" %(mode)s "$0" "$@"
fi
"""
_SERVED = """\
    sock=%(socket)s
    nl='
'
    if [ -S "$sock" ] && [ -x %(netcat)s ] && [ $# -eq %(argc)d ]; then
        spool=%(spool)s/$$
        case "$*" in *"$nl"*) ;; *)
            reply=$(%(env_head)s=%(head)s"%(args)s" %(env_spool)s=$spool \\
                %(netcat)s -N -U -w %(timeout)d "$sock" 2>/dev/null)
            case "$reply" in
            [0-9]*"$nl.")
                rc=${reply%%%%"$nl"*}
                case "$rc" in [0-9]|[0-9][0-9]|[0-9][0-9][0-9])
                    reply=${reply%%.}
                    printf '%%s' "${reply#*"$nl"}" >&2
                    exit "$rc" ;;
                esac ;;
            "-$nl"*"$nl.")
                reply=${reply#-"$nl"}
                printf '%%s' "${reply%%"$nl."}" |
                    "$py" -I -S -c "$body" self "$0" "$@"
                exit $? ;;
            esac ;;
        esac
        exec "$py" -I -S -c "$body" "spool:$spool" "$0" "$@"
    fi
"""

# What the wrapper does when the hook cannot run: its interpreter is gone
# (a removed virtualenv) or its packages are.  A traceback and exit 1 at
# every event would make libvirt refuse every VM start and, at the next
# libvirtd restart (``reconnect``), kill every running guest.  Instead only
# a strict event of a VM whose XML asks for ovs-rdt is refused (unless
# ``[libvirt] on_failure = warn``); everything else exits 0, logged.
_FALLBACK = """\
why=${OVS_RDT_HOOK_FAILED:-%(why)s}
xml=$(cat)
refuse=
case "$2" in prepare|started|migrate|restore)
    case "$xml" in *urn:ovs-rdt:libvirt:1*|*'"rdt:'*) refuse=1 ;; esac ;;
esac
if [ -n "$refuse" ] && grep -Eqs \\
        '^[[:space:]]*on_failure[[:space:]]*[=:][[:space:]]*["'"'"']?warn' \\
        %(config)s </dev/null; then
    refuse=
fi
msg="domain '$1' $2 $3: the ovs-rdt hook $why; reinstall ovs-rdt and\\
 re-run \\"ovs-rdt install-hook\\", or remove $0"
logger -t ovs-rdt-hook -p daemon.warning -- "$msg" 2>/dev/null
if [ -n "$refuse" ]; then
    printf 'ovs-rdt: refusing %%s\\n' "$msg" >&2
    exit 1
fi
exit 0
"""


# The events the hook does nothing for (``start begin``, ``stopped end``,
# ``attach begin``...) end in the shell, without starting Python: a VM
# start runs two interpreters, a stop one, a live migration four.  Standard
# input is left unread: libvirt's virCommandProcessIO ignores the EPIPE of a
# hook that closed it early ("child closed stdin early, ignoring EPIPE").
_SKIP = """\
case "$2 $3" in %(events)s) ;; *) exit 0 ;; esac
"""


def _sh_quote(text: str) -> str:
    import shlex
    return shlex.quote(text)


def config_arguments(config_files: Sequence[str] | str,
                     config_dirs: Sequence[str] = ()) -> list[str]:
    """The hook's command-line options for these files and directories
    (absolute: libvirt runs the hook from another directory).

    A path with a newline is refused: the hook server's protocol carries
    an argument a line (:mod:`libvirt_hooks.server`).
    """
    from ovs_rdt.exceptions import ConfigError

    if isinstance(config_files, str):
        config_files = [config_files]
    out: list[str] = []
    for opt, paths in (('--config-file', config_files),
                       ('--config-dir', config_dirs)):
        for path in paths:
            if '\n' in path:
                raise ConfigError('%s %r: the hook cannot be given a path '
                                  'with a newline' % (opt, path))
            out += [opt, os.path.abspath(path)]
    return out


def wrapper_text(config_files: Sequence[str] | str,
                 config_dirs: Sequence[str] = (), python: str | None = None,
                 paths: list[str] | None = None, socket: str | None = None,
                 netcat: str = NETCAT) -> str:
    """The wrapper script.

    A ``/bin/sh`` script that ends the events the hook ignores, asks the
    hook server on ``socket`` if one is given (``netcat``, else Python),
    and execs ``<python> -I -S -c <body>`` to run the hook itself.  A
    ``#!`` line naming the interpreter would, once that interpreter is gone
    (a removed virtualenv), fail every event before any code of ours runs,
    and libvirt kills a guest whose ``reconnect`` hook fails; the shell
    checks first (under 1 ms).  The package paths go *after* the standard
    library, where ``site`` puts them: a stray ``enum`` or ``logging`` in a
    dist-packages directory must not shadow the stdlib.
    """
    import json

    from libvirt_hooks import protocol
    from libvirt_hooks import server
    from ovs_rdt.conf import DEFAULT_CONFIG_FILE

    python = os.path.abspath(python or sys.executable)
    paths = server.package_paths() if paths is None else paths
    options = config_arguments(config_files, config_dirs)
    args = ''.join(a + '\n' for a in LIBVIRT_ARGS)
    # The request's head up to libvirt's arguments (the shell's).
    head = protocol.head(paths, options + list(LIBVIRT_ARGS)).decode(
        'utf-8', 'surrogateescape')[:-len(args)]
    body = _BODY % {'paths': json.dumps(paths), 'config': json.dumps(options),
                    'timeout': server.TIMEOUT,
                    'socket': json.dumps(socket or ''),
                    'protocol': json.dumps(protocol.header(paths))}
    served = ''
    if socket:
        served = _SERVED % {
            'socket': _sh_quote(socket), 'netcat': _sh_quote(netcat),
            'spool': _sh_quote(protocol.spool_dir(socket)),
            'env_head': protocol.ENV_HEAD, 'env_spool': protocol.ENV_SPOOL,
            'head': _sh_quote(head), 'timeout': server.TIMEOUT,
            'argc': len(LIBVIRT_ARGS), 'args': args}
    # The files the fallback looks into for on_failure = warn.
    files = [_sh_quote(v) if o == '--config-file' else _sh_quote(v) + '/*.conf'
             for o, v in zip(options[::2], options[1::2])]
    shown = ' '.join(options) or '(none: %s if it exists)' % (
        DEFAULT_CONFIG_FILE)
    return ('#!/bin/sh\n%s (written by "ovs-rdt install-hook"; do not edit)\n'
            '# config: %s\n' % (MARKER, shown)
            + ('# hook server: %s\n' % socket.replace('\n', ' ')
               if socket else '')
            + _SKIP % {'events': '|'.join(
                "'%s %s'" % event for event in sorted(EVENTS))}
            + _RUN % {'py': _sh_quote(python), 'body': _sh_quote(body),
                      'served': served, 'mode': 'ask' if socket else 'self'}
            + _FALLBACK % {
                'why': _sh_quote('cannot run: %s is missing' % python),
                'config': ' '.join(files) or _sh_quote(DEFAULT_CONFIG_FILE)})


def is_ours(path: str) -> bool:
    try:
        with open(path, encoding='utf-8', errors='replace') as fh:
            return MARKER in fh.read(4096)
    except OSError:
        return False


def install(path: str, config_files: Sequence[str] | str,
            config_dirs: Sequence[str] = (), python: str | None = None,
            paths: list[str] | None = None,
            socket: str | None = None) -> None:
    """Write the wrapper atomically, mode 0755.

    Refuses to replace a file that is not an ovs-rdt wrapper.
    """
    from ovs_rdt import atomicfile
    from ovs_rdt.exceptions import ConfigError

    if os.path.lexists(path) and not is_ours(path):
        raise ConfigError('%s exists and is not an ovs-rdt hook wrapper; '
                          'not replacing it' % path)
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    atomicfile.write(path, wrapper_text(config_files, config_dirs, python,
                                        paths, socket), mode=0o755)


def uninstall(path: str) -> bool:
    """Remove the wrapper; False if there was none."""
    from ovs_rdt.exceptions import ConfigError

    if not os.path.lexists(path):
        return False
    if not is_ours(path):
        raise ConfigError('%s is not an ovs-rdt hook wrapper; not removing '
                          'it' % path)
    os.unlink(path)
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        '--hooks-dir', default=DEFAULT_HOOKS_DIR,
        help='libvirt\'s hook directory; the wrapper goes to '
             'HOOKS_DIR/qemu.d/%s (default: %s)' % (HOOK_NAME,
                                                    DEFAULT_HOOKS_DIR))
    parser.add_argument(
        '--uninstall', action='store_true',
        help='remove the wrapper instead of installing it')


def managed_guests(settings: Any) -> list[str]:
    """Names of running guests in ovsrdt-vm- groups (best effort)."""
    from ovs_rdt.cmd.status import collect
    from ovs_rdt.exceptions import RDTError
    from ovs_rdt.resctrl import Resctrl
    try:
        plan = collect(Resctrl.from_settings(settings))
    except (RDTError, OSError):
        return []
    return sorted({m['name'] for dom in plan['domains']
                   for row in dom['groups'] if row['kind'] == 'vm'
                   for m in row['members'] if m['kind'] == 'vm'})


def run(settings: Any, args: argparse.Namespace) -> int:
    from ovs_rdt import conf

    path = hook_path(getattr(args, 'hooks_dir', None))
    restart = ('libvirtd looks for hook scripts only when it starts or '
               'reloads: restart libvirtd (or send it SIGHUP) for this to '
               'take effect')
    if getattr(args, 'uninstall', False):
        if uninstall(path):
            print('removed %s (libvirtd lists qemu.d/ on every event: it no '
                  'longer runs it)' % path)
            running = managed_guests(settings)
            if running:
                print('warning: %d guest(s) still run in ovs-rdt groups (%s); '
                      'when they stop, their ovsrdt-vm- groups and ways stay '
                      'until ovs-rdt-agent\'s reconciliation removes them'
                      % (len(running), ', '.join(running)), file=sys.stderr)
        else:
            print('%s was not installed' % path)
        return 0
    from ovs_rdt.opts import config_args

    # What this command read is what the hook reads: the same options, in
    # the same order, by the same rule (missing ones were refused above).
    files, dirs = config_args(args)
    if not files and not dirs and not os.path.exists(
            conf.DEFAULT_CONFIG_FILE):
        print('warning: %s does not exist; the hook uses the defaults until '
              'it does' % conf.DEFAULT_CONFIG_FILE, file=sys.stderr)
    read = conf.load_files(conf.config_paths(files, dirs))  # the hook's
    socket = None
    if read.libvirt.hook_server:
        from libvirt_hooks.server import socket_path
        socket = socket_path(read.resctrl.root)
    install(path, files, dirs, socket=socket)
    print('installed %s (config %s, python %s)'
          % (path, ' '.join(config_arguments(files, dirs))
             or conf.DEFAULT_CONFIG_FILE + ' if it exists', sys.executable))
    if socket:
        print('the hook asks ovs-rdt-agent first, on %s (and does the work '
              'itself when no agent answers there)' % socket)
    print(restart)
    return 0
