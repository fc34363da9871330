"""``ovs-rdt install-hook``: install (or remove) the libvirt hook wrapper.

The wrapper is ``libvirt_hooks/wrapper.sh`` as shipped, with its settings
block filled in: the Python interpreter that runs ``ovs-rdt`` now, the
directory that holds the ``libvirt_hooks`` and ``ovs_rdt`` packages, and
every ``--config-file`` and ``--config-dir`` given to ``install-hook``, in
order (none: the default file, as for every command; see
:func:`ovs_rdt.conf.config_paths`).  libvirt runs hooks with almost no
environment: that block is all the hook knows.

libvirtd looks for hook scripts when it starts (and on SIGHUP): after the
first install, restart (or reload) libvirtd.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Sequence

import libvirt_hooks
import ovs_rdt
from ovs_rdt.cmd import say
from ovs_rdt.conf import DEFAULT_CONFIG_DIR, DEFAULT_CONFIG_FILE
from ovs_rdt.exceptions import ConfigError, RDTError
from ovs_rdt.opts import config_args
from ovs_rdt.resctrl import Resctrl
from ovs_rdt import atomicfile, conf
from ovs_rdt.conf import Settings

DEFAULT_HOOKS_DIR = '/etc/libvirt/hooks'
HOOK_NAME = '50-ovs-rdt'
#: On the second line of every wrapper ovs-rdt wrote (this release's and
#: earlier ones): what :func:`is_ours` looks for.
MARKER = '# ovs-rdt libvirt hook wrapper'
_SETTINGS = ('# -- settings (filled in by "ovs-rdt install-hook") --\n',
             '# -- end of settings --\n')


def hook_path(hooks_dir: str | None, name: str = HOOK_NAME) -> str:
    """Where the wrapper goes: ``<hooks dir>/qemu.d/<name>``.

    ``hooks_dir`` is libvirt's hook directory; one that already ends in
    ``qemu.d`` is taken as is.
    """
    base = (hooks_dir or DEFAULT_HOOKS_DIR).rstrip('/') or '/'
    if os.path.basename(base) != 'qemu.d':
        base = os.path.join(base, 'qemu.d')
    return os.path.join(base, name)


def config_arguments(config_files: Sequence[str] | str,
                     config_dirs: Sequence[str] = ()) -> list[str]:
    """The hook's command-line options for these files and directories
    (absolute: libvirt runs the hook from another directory).
    """
    if isinstance(config_files, str):
        config_files = [config_files]
    out: list[str] = []
    for opt, paths in (('--config-file', config_files),
                       ('--config-dir', config_dirs)):
        for path in paths:
            out += [opt, os.path.abspath(path)]
    return out


def package_dir() -> str:
    """The directory holding both ``libvirt_hooks`` and ``ovs_rdt``."""
    dirs = {os.path.dirname(os.path.dirname(os.path.abspath(
        pkg.__file__ or ''))) for pkg in (libvirt_hooks, ovs_rdt)}
    if len(dirs) != 1:
        raise ConfigError('the libvirt hook needs libvirt_hooks and ovs_rdt '
                          'in one directory; they are in %s'
                          % ' and '.join(sorted(dirs)))
    return dirs.pop()


def shipped_wrapper() -> str:
    """``libvirt_hooks/wrapper.sh`` as the package ships it."""
    path = os.path.join(os.path.dirname(os.path.abspath(
        libvirt_hooks.__file__ or '')), 'wrapper.sh')
    with open(path, encoding='utf-8') as fh:
        return fh.read()


def wrapper_text(config_files: Sequence[str] | str,
                 config_dirs: Sequence[str] = (), python: str | None = None,
                 packages: str | None = None) -> str:
    """The shipped wrapper with its settings block for this interpreter,
    package directory and configuration.
    """
    python = os.path.abspath(python or sys.executable)
    packages = packages or package_dir()
    options = config_arguments(config_files, config_dirs)
    shown = ' '.join(options) or '(none: %s)' % defaults_text()
    text = shipped_wrapper()
    begin = text.index(_SETTINGS[0]) + len(_SETTINGS[0])
    end = text.index(_SETTINGS[1])
    settings = ('# config: %s\npython=%s\npackages=%s\nconfig=%s\n' % (
        shown.replace('\n', ' '), shlex.quote(python), shlex.quote(packages),
        shlex.quote(' '.join(shlex.quote(o) for o in options))))
    return text[:begin] + settings + text[end:]


def defaults_text() -> str:
    """What a command reads when no configuration is named."""
    return '%s and %s/*.conf if they exist' % (DEFAULT_CONFIG_FILE,
                                               DEFAULT_CONFIG_DIR)


def packaged(path: str) -> ConfigError | None:
    """Why ``path`` is not ours to replace or remove: a symbolic link is
    a package's hook (the Debian package links its program in
    /usr/libexec/ovs-rdt there and removes the link with itself).
    """
    if not os.path.islink(path):
        return None
    return ConfigError(
        '%s is a symbolic link to %s, a package\'s hook (removed with the '
        'package): not changing it; the Debian package\'s hook reads '
        '/etc/ovs-rdt/ovs-rdt.conf and /etc/ovs-rdt/ovs-rdt.conf.d/*.conf, '
        'or install this one under another --hooks-dir'
        % (path, os.readlink(path)))


def is_ours(path: str) -> bool:
    try:
        with open(path, encoding='utf-8', errors='replace') as fh:
            return MARKER in fh.read(4096)
    except OSError:
        return False


def install(path: str, config_files: Sequence[str] | str,
            config_dirs: Sequence[str] = (), python: str | None = None,
            packages: str | None = None) -> None:
    """Write the wrapper atomically, mode 0755.

    Refuses to replace a file that is not an ovs-rdt wrapper.
    """
    link = packaged(path)
    if link is not None:
        raise link
    if os.path.lexists(path) and not is_ours(path):
        raise ConfigError('%s exists and is not an ovs-rdt hook wrapper; '
                          'not replacing it' % path)
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    atomicfile.write(path, wrapper_text(config_files, config_dirs, python,
                                        packages), mode=0o755)


def uninstall(path: str) -> bool:
    """Remove the wrapper; False if there was none."""
    if not os.path.lexists(path):
        return False
    link = packaged(path)
    if link is not None:
        raise link
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


def managed_guests(settings: Settings) -> list[str]:
    """Names of running guests in ovsrdt-vm- groups (best effort)."""
    from ovs_rdt.cmd.status import collect
    try:
        plan = collect(Resctrl.from_settings(settings))
    except (RDTError, OSError):
        return []
    return sorted({m['name'] for dom in plan['domains']
                   for row in dom['groups'] if row['kind'] == 'vm'
                   for m in row['members'] if m['kind'] == 'vm'})


def run(settings: Settings, args: argparse.Namespace) -> int:

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
                say('install-hook', '%d guest(s) still run in ovs-rdt groups '
                    '(%s); when they stop, their ovsrdt-vm- groups and ways '
                    'stay until ovs-rdt-agent\'s reconciliation removes them'
                    % (len(running), ', '.join(running)), 'warning')
        else:
            print('%s was not installed' % path)
        return 0

    # What this command read is what the hook reads: the same options, in
    # the same order, by the same rule (missing ones were refused above).
    files, dirs = config_args(args)
    if not files and not dirs and not os.path.exists(
            conf.DEFAULT_CONFIG_FILE):
        say('install-hook', '%s does not exist; the hook uses the defaults '
            'until it does' % conf.DEFAULT_CONFIG_FILE, 'warning')
    conf.load_files(conf.config_paths(files, dirs))  # as the hook will
    replaced = os.path.exists(path)
    install(path, files, dirs)
    print('%s %s (config %s, python %s)'
          % ('replaced' if replaced else 'installed', path,
             ' '.join(config_arguments(files, dirs)) or defaults_text(),
             sys.executable))
    # libvirtd lists qemu.d/ at every event once it found hooks at its
    # start: a wrapper replaced in place runs from the next event.
    print('libvirtd runs it from the next guest event' if replaced
          else restart)
    return 0
