"""``ovs-rdt emulate`` / ``python3 -m ovs_rdt.emulator``: mount the emulator.

``add_arguments()`` and ``run()`` are shared by the operator CLI and
``__main__``.  mfusepy is imported only when mounting, so ``--help`` works
without it.  With ``-d`` the command returns only once the mount is live
(exit 0), or prints a one-line error and exits non-zero.
"""
from __future__ import annotations

import argparse
import logging
import os
import select
import sys
import tempfile
import time
from typing import Callable, Optional

from ovs_rdt.emulator.kparse import bitmap_list_string, bitmap_string
from ovs_rdt.emulator.profiles import DEFAULT_PROFILE, PROFILES, Profile, get_profile

LOG = logging.getLogger(__name__)

READY_TIMEOUT = 30.0


class EmulatorError(Exception):
    """A problem reported to the user as one line, without a traceback."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--profile', default=DEFAULT_PROFILE, choices=sorted(PROFILES),
                        help='emulated platform (default: %(default)s)')
    parser.add_argument('-d', '--daemon', action='store_true',
                        help='run in the background once the mount is ready')
    parser.add_argument('--sysfs-dir', metavar='DIR',
                        help='write a sysfs CPU/cache topology tree for the profile '
                             '(cpuN/cache/index3/{id,level,shared_cpu_list}, online)')
    parser.add_argument('--footprints', metavar='FILE',
                        help='JSON {"<tid>": bytes, "comm:<name>": bytes, "default": bytes}; '
                             're-read when it changes')
    parser.add_argument('--default-footprint', type=int, metavar='BYTES',
                        default=2 * 1024 * 1024,
                        help='cache footprint of a task not in --footprints '
                             '(default: %(default)s)')
    parser.add_argument('--set', action='append', default=[], metavar='FIELD=VALUE',
                        dest='profile_set',
                        help='override a profile field, e.g. --set num_rmids=8 '
                             '(see doc/emulator.md)')
    parser.add_argument('--pid-file', metavar='FILE', help='write the daemon pid here')
    parser.add_argument('--log-file', metavar='FILE', help='log here (daemon default: none)')
    parser.add_argument('--verbose', action='store_true', help='log every FUSE request')
    parser.add_argument('mountpoint', metavar='MOUNTPOINT', help='an existing directory')


def _profile(args: argparse.Namespace) -> Profile:
    pairs = []
    for item in args.profile_set:
        key, sep, value = item.partition('=')
        if not sep:
            raise EmulatorError('--set needs FIELD=VALUE, not %r' % item)
        pairs.append((key.strip(), value.strip()))
    try:
        return get_profile(args.profile).with_overrides(pairs)
    except ValueError as exc:
        raise EmulatorError(str(exc)) from None


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
        raise EmulatorError('FUSE is not usable: %s (install fuse3 and mfusepy)'
                            % str(exc).splitlines()[0]) from None


def _write(path: str, text: str) -> None:
    with open(path, 'w', encoding='ascii') as fh:
        fh.write(text)


def write_sysfs(profile: Profile, root: str) -> None:
    """A ``/sys/devices/system/cpu``-like tree describing the profile."""
    ncpu = profile.num_cpus
    os.makedirs(root, exist_ok=True)
    _write(os.path.join(root, 'online'), '0-%d\n' % (ncpu - 1))
    _write(os.path.join(root, 'present'), '0-%d\n' % (ncpu - 1))
    _write(os.path.join(root, 'possible'), '0-%d\n' % (profile.nr_cpu_ids - 1))
    for cpu in range(ncpu):
        dom = profile.socket_of(cpu)
        shared = profile.cpus_of(dom)
        base = os.path.join(root, 'cpu%d' % cpu)
        cache = os.path.join(base, 'cache', 'index3')
        topo = os.path.join(base, 'topology')
        os.makedirs(cache, exist_ok=True)
        os.makedirs(topo, exist_ok=True)
        if cpu:
            _write(os.path.join(base, 'online'), '1\n')
        files = {
            os.path.join(cache, 'id'): '%d\n' % dom,
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
            os.path.join(topo, 'physical_package_id'): '%d\n' % dom,
            os.path.join(topo, 'die_id'): '0\n',
            os.path.join(topo, 'core_id'): '%d\n' % profile.core_of(cpu),
            os.path.join(topo, 'thread_siblings_list'):
                bitmap_list_string(profile.siblings_of(cpu)) + '\n',
            os.path.join(topo, 'core_siblings_list'): bitmap_list_string(shared) + '\n',
            os.path.join(topo, 'package_cpus_list'): bitmap_list_string(shared) + '\n',
        }
        for path, text in files.items():
            _write(path, text)


def _serve(args: argparse.Namespace, profile: Profile,
           on_ready: Optional[Callable[[], None]] = None) -> None:
    from ovs_rdt.emulator import fs
    from ovs_rdt.emulator.model import Resctrl
    from ovs_rdt.emulator.monitor import Footprints

    footprints = Footprints(args.footprints, args.default_footprint)
    model = Resctrl(profile, footprints=footprints)
    fs.mount(model, os.path.abspath(args.mountpoint), on_ready=on_ready,
             debug=args.verbose)


def _first_line(path: str) -> str:
    try:
        with open(path, encoding='utf-8', errors='replace') as fh:
            for line in fh:
                if line.strip():
                    return line.strip()
    except OSError:
        pass
    return ''


def _daemonize(args: argparse.Namespace, profile: Profile) -> int:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(wfd)
        return _await_child(rfd, pid, args.mountpoint)
    os.close(rfd)
    rc = 1
    try:
        os.setsid()
        rc = _daemon_main(args, profile, wfd)
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
        message = ('error: the emulator did not become ready within %ds'
                   % READY_TIMEOUT if time.monotonic() >= deadline
                   else 'error: the emulator exited before %s was mounted' % mountpoint)
    print(message.splitlines()[0], file=sys.stderr)
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return 1


def _daemon_main(args: argparse.Namespace, profile: Profile, wfd: int) -> int:
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
        if args.pid_file:
            _write(args.pid_file, '%d\n' % os.getpid())
        _serve(args, profile, on_ready=ready)
        return 0
    except Exception as exc:        # reported to the waiting parent as one line
        LOG.exception('Emulator failed')
        if not state['ready']:
            detail = _first_line(errlog.name) or str(exc) or type(exc).__name__
            os.write(wfd, ('error: cannot mount %s: %s\n'
                           % (args.mountpoint, detail)).encode())
        return 1
    finally:
        errlog.close()
        os.unlink(errlog.name)
        if args.pid_file:
            try:
                os.unlink(args.pid_file)
            except OSError:
                pass


def _setup_logging(args: argparse.Namespace) -> None:
    if logging.getLogger().handlers:
        return
    level = logging.DEBUG if args.verbose else logging.INFO
    if args.log_file:
        logging.basicConfig(filename=args.log_file, level=level,
                            format='%(asctime)s %(process)d %(levelname)s %(name)s %(message)s')
    elif not args.daemon:
        logging.basicConfig(level=logging.WARNING if not args.verbose else level,
                            format='%(levelname)s %(name)s %(message)s')


def run(args: argparse.Namespace) -> int:
    """Mount an emulated resctrl at ``args.mountpoint``; 0 on clean unmount."""
    try:
        profile = _profile(args)
        mountpoint = os.path.abspath(args.mountpoint)
        _check_mountpoint(mountpoint)
        if args.sysfs_dir:
            try:
                write_sysfs(profile, args.sysfs_dir)
            except OSError as exc:
                raise EmulatorError('cannot write the sysfs tree in %s: %s'
                                    % (args.sysfs_dir, exc.strerror)) from None
    except EmulatorError as exc:
        print('error: %s' % exc, file=sys.stderr)
        return 1
    _setup_logging(args)
    if args.daemon:
        return _daemonize(args, profile)
    try:
        if args.pid_file:
            _write(args.pid_file, '%d\n' % os.getpid())
        _serve(args, profile)
    except Exception as exc:
        LOG.debug('Mount failed', exc_info=True)
        print('error: cannot mount %s: %s' % (mountpoint, exc), file=sys.stderr)
        return 1
    finally:
        if args.pid_file and os.path.exists(args.pid_file):
            os.unlink(args.pid_file)
    return 0
