"""``ovs-rdt emulate`` / ``python3 -m ovs_rdt.emulator``: mount the emulator.

``add_arguments()`` and ``run()`` are shared by the operator CLI and
``__main__``.  mfusepy is imported only when mounting, so ``--help`` works
without it.  With ``-d`` the command returns only once the mount is live
(exit 0), or prints a one-line error and exits non-zero.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
import logging
import os
import select
import sys
import tempfile
import time
from typing import Callable, Optional

from ovs_rdt.emulator.divergences import DIVERGENCES
from ovs_rdt.emulator.kparse import bitmap_list_string, bitmap_string
from ovs_rdt.emulator.monitor import DEFAULT_FOOTPRINT, Footprints
from ovs_rdt.emulator.profiles import DEFAULT_PROFILE, PROFILES, Profile, get_profile
from ovs_rdt.emulator.schemas import Mount, parse_mount_options

LOG = logging.getLogger(__name__)

READY_TIMEOUT = 30.0
#: How error lines name the program (``python3 -m ovs_rdt.emulator`` too).
PROG = 'ovs-rdt emulate'


def _error(text: str) -> None:
    """``PROG: error: TEXT``, the form of every ovs-rdt CLI error line
    (:func:`ovs_rdt.cmd.say`; the emulator imports nothing of the rest).
    """
    print('%s: error: %s' % (PROG, text), file=sys.stderr)


class EmulatorError(Exception):
    """A problem reported to the user as one line, without a traceback."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``emulate``.

    Destinations are prefixed ``emu_`` to stay clear of the operator CLI's
    own options (oslo.config/oslo.log).
    """
    parser.add_argument('--profile', dest='emu_profile', default=DEFAULT_PROFILE,
                        choices=sorted(PROFILES),
                        help='emulated platform (default: %(default)s)')
    parser.add_argument('-d', '--daemon', dest='emu_daemon', action='store_true',
                        help='run in the background once the mount is ready')
    parser.add_argument('--sysfs-dir', dest='emu_sysfs_dir', metavar='DIR',
                        help='write a sysfs CPU/cache topology tree for the profile '
                             '(online, cpuN/cache/index3/{id,level,shared_cpu_list})')
    parser.add_argument('--footprints', dest='emu_footprints', metavar='FILE',
                        help='JSON {"<tid>": bytes, "comm:<name>": bytes, "default": bytes}'
                             '; re-read when it changes')
    parser.add_argument('--default-footprint', dest='emu_default_footprint', type=int,
                        metavar='BYTES',
                        help='cache footprint of a task not in --footprints (default: '
                             '%d, or outside the default group while it runs the '
                             'memory its process has resident if more)' % DEFAULT_FOOTPRINT)
    parser.add_argument('--faults', dest='emu_faults', metavar='FILE',
                        help='inject errors: "OP PATH ERRNO [COUNT]" a line, '
                             're-read when it changes (see doc/emulator.md)')
    parser.add_argument('--diverge', dest='emu_diverge', action='append', default=[],
                        metavar='NAME', choices=sorted(DIVERGENCES),
                        help='differ from the kernel in one way (repeatable; to '
                             'prove "ovs-rdt selftest" notices): %s'
                             % ', '.join(sorted(DIVERGENCES)))
    parser.add_argument('-o', '--mount-options', dest='emu_mount_options', default='',
                        metavar='OPTS',
                        help='resctrl mount options, as for mount -t resctrl -o: '
                             'cdp, mba_MBps, debug (comma-separated)')
    parser.add_argument('--set', dest='emu_set', action='append', default=[],
                        metavar='FIELD=VALUE',
                        help='override a profile field, e.g. --set num_rmids=8 '
                             '(see doc/emulator.md)')
    parser.add_argument('--pid-file', dest='emu_pid_file', metavar='FILE',
                        help='write the emulator pid here')
    parser.add_argument('--log-file', dest='emu_log_file', metavar='FILE',
                        help='log here (the daemon logs nowhere by default)')
    parser.add_argument('--verbose', dest='emu_verbose', action='store_true',
                        help='debug logging, including every FUSE request')
    parser.add_argument('emu_mountpoint', metavar='MOUNTPOINT', help='an existing directory')


@dataclass(frozen=True)
class Options:
    """What ``run()`` needs, with absolute paths (the daemon changes to /)."""

    profile: Profile
    mountpoint: str
    mount: Mount = Mount()
    daemon: bool = False
    sysfs_dir: Optional[str] = None
    footprints: Optional[str] = None
    faults: Optional[str] = None
    default_footprint: Optional[int] = None
    pid_file: Optional[str] = None
    log_file: Optional[str] = None
    verbose: bool = False
    diverge: frozenset[str] = frozenset()


def _abs(path: Optional[str]) -> Optional[str]:
    return os.path.abspath(path) if path else None


def options(args: argparse.Namespace) -> Options:
    """Validate the parsed arguments; :class:`EmulatorError` on a bad value."""
    pairs = []
    for item in args.emu_set:
        key, sep, value = item.partition('=')
        if not sep:
            raise EmulatorError('--set needs FIELD=VALUE, not %r' % item)
        pairs.append((key.strip(), value.strip()))
    try:
        profile = get_profile(args.emu_profile).with_overrides(pairs)
        mount = parse_mount_options(profile, getattr(args, 'emu_mount_options', '') or '')
    except ValueError as exc:
        raise EmulatorError(str(exc)) from None
    return Options(profile=profile, mountpoint=os.path.abspath(args.emu_mountpoint),
                   mount=mount,
                   daemon=args.emu_daemon, sysfs_dir=_abs(args.emu_sysfs_dir),
                   footprints=_abs(args.emu_footprints),
                   faults=_abs(getattr(args, 'emu_faults', None)),
                   default_footprint=args.emu_default_footprint,
                   pid_file=_abs(args.emu_pid_file), log_file=_abs(args.emu_log_file),
                   verbose=args.emu_verbose,
                   diverge=frozenset(getattr(args, 'emu_diverge', None) or ()))


def _check_mountpoint(path: str) -> None:
    if not os.path.isdir(path):
        raise EmulatorError('mountpoint %s does not exist or is not a directory' % path)
    if os.path.ismount(path):
        raise EmulatorError('%s is already a mount point' % path)
    if not os.path.exists('/dev/fuse'):
        raise EmulatorError('/dev/fuse is missing (load the fuse module)')
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError, AttributeError) as exc:
        from ovs_rdt.install_advice import emulator as advice
        raise EmulatorError('FUSE is not usable: %s (%s)' % (
            str(exc).splitlines()[0], advice())) from None


def _write(path: str, text: str) -> None:
    with open(path, 'w', encoding='ascii') as fh:
        fh.write(text)


def _cpulist(cpus: list[int]) -> str:
    return bitmap_list_string(cpus) + '\n'


def write_node_sysfs(profile: Profile, root: str) -> None:
    """``ROOT/node``: like ``/sys/devices/system/node`` (NUMA node -> CPUs)."""
    base = os.path.join(root, 'node')
    os.makedirs(base, exist_ok=True)
    last = len(profile.nodes) - 1
    for name in ('online', 'possible', 'has_cpu', 'has_memory', 'has_normal_memory'):
        _write(os.path.join(base, name), '0-%d\n' % last if last else '0\n')
    for node in profile.nodes:
        cpus = profile.cpus_of_node(node)
        ndir = os.path.join(base, 'node%d' % node)
        os.makedirs(ndir, exist_ok=True)
        _write(os.path.join(ndir, 'cpulist'), _cpulist(cpus))
        _write(os.path.join(ndir, 'cpumap'),
               bitmap_string(sum(1 << c for c in cpus), profile.nr_cpu_ids) + '\n')


def write_sysfs(profile: Profile, root: str, diverge: frozenset[str] = frozenset()
                ) -> None:
    """A ``/sys/devices/system/cpu``-like tree describing the profile, with
    the NUMA nodes in ``node/`` and a ``cpuN/nodeM`` link per CPU (the L3
    ids from 1 under the ``cache-ids`` divergence).
    """
    ncpu = profile.num_cpus
    os.makedirs(root, exist_ok=True)
    _write(os.path.join(root, 'online'), '0-%d\n' % (ncpu - 1))
    _write(os.path.join(root, 'present'), '0-%d\n' % (ncpu - 1))
    _write(os.path.join(root, 'possible'), '0-%d\n' % (profile.nr_cpu_ids - 1))
    write_node_sysfs(profile, root)
    for cpu in range(ncpu):
        dom = profile.l3_of(cpu)
        shared = profile.cpus_of(dom)
        package = profile.cpus_of_socket(profile.socket_of(cpu))
        node = profile.node_of(cpu)
        base = os.path.join(root, 'cpu%d' % cpu)
        cache = os.path.join(base, 'cache', 'index3')
        topo = os.path.join(base, 'topology')
        os.makedirs(cache, exist_ok=True)
        os.makedirs(topo, exist_ok=True)
        if cpu:
            _write(os.path.join(base, 'online'), '1\n')
        link = os.path.join(base, 'node%d' % node)
        if not os.path.islink(link):
            os.symlink(os.path.join('..', 'node', 'node%d' % node), link)
        files = {
            os.path.join(cache, 'id'): '%d\n' % (dom + ('cache-ids' in diverge)),
            os.path.join(cache, 'level'): '3\n',
            os.path.join(cache, 'type'): 'Unified\n',
            os.path.join(cache, 'size'): '%dK\n' % (profile.l3_size // 1024),
            os.path.join(cache, 'ways_of_associativity'): '%d\n' % profile.cbm_len,
            os.path.join(cache, 'coherency_line_size'): '64\n',
            os.path.join(cache, 'number_of_sets'): '%d\n'
            % (profile.l3_size // 64 // profile.cbm_len),
            os.path.join(cache, 'shared_cpu_list'): bitmap_list_string(shared) + '\n',
            os.path.join(cache, 'shared_cpu_map'):
                bitmap_string(sum(1 << c for c in shared), profile.nr_cpu_ids) + '\n',
            os.path.join(topo, 'physical_package_id'): '%d\n' % profile.socket_of(cpu),
            os.path.join(topo, 'die_id'): '0\n',
            os.path.join(topo, 'core_id'): '%d\n' % profile.core_of(cpu),
            os.path.join(topo, 'thread_siblings_list'):
                bitmap_list_string(profile.siblings_of(cpu)) + '\n',
            os.path.join(topo, 'core_siblings_list'): _cpulist(package),
            os.path.join(topo, 'package_cpus_list'): _cpulist(package),
        }
        for path, text in files.items():
            _write(path, text)


def _serve(opts: Options, on_ready: Optional[Callable[[], None]] = None) -> None:
    from ovs_rdt.emulator.faults import Faults
    from ovs_rdt.emulator import fs
    from ovs_rdt.emulator.model import ResctrlModel

    footprints = Footprints(opts.footprints, opts.default_footprint)
    model = ResctrlModel(opts.profile, footprints=footprints, mount=opts.mount,
                         diverge=opts.diverge)
    if opts.diverge:
        LOG.warning('Diverging from the kernel: %s', ', '.join(sorted(opts.diverge)))
    fs.mount(model, opts.mountpoint, on_ready=on_ready, debug=opts.verbose,
             faults=Faults(opts.faults, opts.diverge))


def _first_line(path: str) -> str:
    try:
        with open(path, encoding='utf-8', errors='replace') as fh:
            for line in fh:
                if line.strip():
                    return line.strip()
    except OSError:
        pass
    return ''


def _daemonize(opts: Options) -> int:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(wfd)
        return _await_child(rfd, pid, opts.mountpoint)
    os.close(rfd)
    rc = 1
    try:
        os.setsid()
        os.chdir('/')
        rc = _daemon_main(opts, wfd)
    finally:
        os._exit(rc)


def _await_child(rfd: int, pid: int, mountpoint: str) -> int:
    deadline = time.monotonic() + READY_TIMEOUT
    chunks = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([rfd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            break
        chunk = os.read(rfd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(rfd)
    message = b''.join(chunks).decode('utf-8', 'replace').strip()
    if message == 'ok':
        return 0
    if not message:
        message = ('the emulator did not become ready within %ds'
                   % READY_TIMEOUT if time.monotonic() >= deadline
                   else 'the emulator exited before %s was mounted' % mountpoint)
    _error(message.splitlines()[0])
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return 1


def _daemon_main(opts: Options, wfd: int) -> int:
    """In the daemon: serve, reporting 'ok' or the mount error on ``wfd``."""
    state = {'ready': False}
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    errlog = tempfile.NamedTemporaryFile(prefix='ovs-rdt-emulator-', delete=False)
    os.dup2(errlog.fileno(), 2)

    def ready() -> None:
        os.dup2(devnull, 2)
        os.write(wfd, b'ok\n')
        os.close(wfd)
        state['ready'] = True

    try:
        if opts.pid_file:
            _write(opts.pid_file, '%d\n' % os.getpid())
        _serve(opts, on_ready=ready)
        return 0
    except Exception as exc:        # reported to the waiting parent as one line
        if not state['ready']:
            detail = _first_line(errlog.name) or str(exc) or type(exc).__name__
            os.write(wfd, ('cannot mount %s: %s\n'
                           % (opts.mountpoint, detail)).encode())
        LOG.exception('Emulator failed')
        return 1
    finally:
        errlog.close()
        os.unlink(errlog.name)
        if opts.pid_file:
            try:
                os.unlink(opts.pid_file)
            except OSError:
                pass


def _setup_logging(opts: Options) -> None:
    if logging.getLogger().handlers:
        return
    level = logging.DEBUG if opts.verbose else logging.INFO
    if opts.log_file:
        logging.basicConfig(filename=opts.log_file, level=level,
                            format='%(asctime)s %(process)d %(levelname)s %(name)s %(message)s')
    elif not opts.daemon:
        logging.basicConfig(level=logging.DEBUG if opts.verbose else logging.WARNING,
                            format='%(levelname)s %(name)s %(message)s')


def run(args: argparse.Namespace) -> int:
    """Mount an emulated resctrl at MOUNTPOINT; 0 once live (-d) or unmounted."""
    try:
        opts = options(args)
        _check_mountpoint(opts.mountpoint)
        if opts.sysfs_dir:
            try:
                write_sysfs(opts.profile, opts.sysfs_dir, opts.diverge)
            except OSError as exc:
                raise EmulatorError('cannot write the sysfs tree in %s: %s'
                                    % (opts.sysfs_dir, exc.strerror)) from None
    except EmulatorError as exc:
        _error(str(exc))
        return 1
    _setup_logging(opts)
    if opts.daemon:
        return _daemonize(opts)
    try:
        if opts.pid_file:
            _write(opts.pid_file, '%d\n' % os.getpid())
        _serve(opts)
    except Exception as exc:
        LOG.debug('Mount failed', exc_info=True)
        _error('cannot mount %s: %s' % (opts.mountpoint, exc))
        return 1
    finally:
        if opts.pid_file and os.path.exists(opts.pid_file):
            os.unlink(opts.pid_file)
    return 0
