"""``ovs-rdt sandbox``: try ovs-rdt here, touching none of the host's
daemons.

``start`` mounts the resctrl emulator, starts a private Open vSwitch
(ovsdb-server and ovs-vswitchd with PMD threads) and a private libvirtd
with the ovs-rdt hook in a hook directory of its own, all below
``--workdir`` (:mod:`ovs_rdt.sandbox`, the parts ``ovs-rdt demo`` and the
tests run on), writes the configuration file that the hook, the agent and
the ``ovs-rdt`` commands read, and prints how to reach each part.  They
run on after it returns.  ``status`` says what runs and prints the same;
``env`` prints it as shell variables (``eval "$(ovs-rdt sandbox env)"``);
``stop`` ends it all: guests, daemons, the mount and the files.

What was started is recorded as ``ovs-rdt demo --keep`` records it
(:class:`ovs_rdt.sandbox.Sandbox`, ``<workdir>/state.json``), and started
and ended by the same code (:mod:`ovs_rdt.cmd.lifecycle`).  The agent is
not started: the operator runs it in the foreground (doc/try-it.md).
"""
from __future__ import annotations

import argparse
import os
import shlex
from typing import Any

from ovs_rdt.cmd import lifecycle, say
from ovs_rdt.cmd.lifecycle import Progress, command_path
from ovs_rdt.conf import Settings
from ovs_rdt.exceptions import RDTError
from ovs_rdt.emulator.profiles import DEFAULT_PROFILE, PROFILES
from ovs_rdt.inputs import cpulists
from ovs_rdt.opts import CONFIG_ENV
from ovs_rdt import sandbox as boxes

PROG = 'ovs-rdt sandbox'
WORKDIR = '/run/ovs-rdt-sandbox'
ACTIONS = ('start', 'status', 'env', 'stop')
START_TIMEOUT = 180.0
#: ``mount -t resctrl -o ...`` options the emulator takes.
MOUNT_OPTIONS = ('cdp', 'mba_MBps', 'debug')

CONFIG = """\
# ovs-rdt sandbox in {workdir}: what the libvirt hook, ovs-rdt-agent and
# the ovs-rdt commands read ("ovs-rdt sandbox start" wrote it; "stop"
# removes it).  Edit it at will: the hook reads it at every guest event,
# the agent when it starts and at SIGHUP.
[DEFAULT]
log_file = {workdir}/ovs-rdt.log

[resctrl]
# The emulated resctrl (profile {profile}).
root = {root}
sysfs_cpu_root = {sysfs}

[allocation]
pools = hp

[pool:hp]
l3_ways = 4

[libvirt]
# The sandbox's libvirtd: its read-only socket, and where it keeps its
# QEMU pidfiles (its /run/libvirt/qemu, seen from outside its mount
# namespace).{libvirt_note}
uri = {libvirt_uri}
qemu_run_dir = {qemu_run_dir}

[ovs]
# The sandbox's Open vSwitch.{ovs_note}
connection = {connection}
vswitchd_pidfile = {vswitchd_pidfile}
rescan_interval = 2
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('action', choices=ACTIONS,
                        help='start: mount the emulator, start a private '
                        'OvS and a private libvirtd with the hook; status: '
                        'what runs and how to reach it; env: the same as '
                        'shell variables (eval "$(ovs-rdt sandbox env)"); '
                        'stop: end it all')
    parser.add_argument('--workdir', default=WORKDIR,
                        help='where the sandbox keeps everything (default '
                        '%s)' % WORKDIR)

    start = parser.add_argument_group('start')
    start.add_argument('--profile', default=DEFAULT_PROFILE,
                       choices=sorted(PROFILES),
                       help='emulated platform (default %(default)s)')
    start.add_argument('--mount-option', action='append', default=[],
                       choices=MOUNT_OPTIONS, dest='mount_options',
                       help='mount the emulated resctrl with "-o OPTION" '
                       '(repeatable): cdp, mba_MBps, debug')
    start.add_argument('--emulator-only', action='store_true',
                       help='the emulated resctrl alone')
    start.add_argument('--no-libvirt', action='store_true',
                       help='no private libvirtd')
    start.add_argument('--no-ovs', action='store_true',
                       help='no private Open vSwitch')
    start.add_argument('--pmd-cpu-mask', default='0x1', metavar='MASK',
                       help='the private ovs-vswitchd\'s pmd-cpu-mask: a '
                       'PMD thread (and a dummy-pmd port) on each of these '
                       'host CPUs (default 0x1)')
    start.add_argument('--start-timeout', type=float, default=START_TIMEOUT,
                       help='seconds to wait for each daemon to answer '
                       '(default %.0f: a cold libvirtd probes QEMU first)'
                       % START_TIMEOUT)


def run(settings: Settings, args: argparse.Namespace) -> int:

    box = boxes.Sandbox(args.workdir)
    if args.action == 'start':
        return start(box, args)
    if not lifecycle.set_up(args.workdir):
        say('sandbox', 'no sandbox in %s (start one with "%s")'
            % (args.workdir, sandbox_command('start', args.workdir)))
        return 1
    if args.action == 'stop':
        return lifecycle.teardown(box, PROG)
    if args.action == 'env':
        print(env(box), end='')
        return 0
    running = box.running()
    print(parts(box, running))
    print(usage(box))
    return 0 if all(running.values()) else 1


def wanted(args: argparse.Namespace) -> tuple[str, ...]:
    out = ['emulator']
    if not (args.emulator_only or args.no_ovs):
        out.append('ovs')
    if not (args.emulator_only or args.no_libvirt):
        out.append('libvirt')
    return tuple(out)


def pmd_cores(mask: str) -> list[int]:
    """The host CPUs of ``--pmd-cpu-mask``; RDTError if this machine lacks
    one (OvS would wait for a PMD thread that never comes).
    """
    cores = sorted(cpulists.from_mask(mask, '--pmd-cpu-mask'))
    if not cores:
        raise RDTError('--pmd-cpu-mask: %r names no CPU' % mask)
    usable = os.sched_getaffinity(0)
    lacking = [c for c in cores if c not in usable]
    if lacking:
        raise RDTError('--pmd-cpu-mask: %r asks for CPUs %s, which this machine '
                       'does not have (it has CPUs %s)'
                       % (mask, cpulists.to_text(lacking),
                          cpulists.to_text(usable)))
    return cores


def start(box: Any, args: argparse.Namespace) -> int:
    want = wanted(args)
    problems = [] if os.geteuid() == 0 else [
        'run as root: the sandbox mounts FUSE and starts daemons']
    problems += lifecycle.missing(want)
    cores: list[int] = []
    if 'ovs' in want:
        try:
            cores = pmd_cores(args.pmd_cpu_mask)
        except RDTError as exc:
            problems.append(str(exc))
    if problems:
        for line in problems:
            say('sandbox', line)
        return 2
    if lifecycle.set_up(args.workdir):
        say('sandbox', 'a sandbox (or a demo) is already set up in %s; end it '
            'with "%s"' % (args.workdir, sandbox_command('stop', args.workdir)))
        return 1
    box.state['sandbox'] = list(want)
    box.save()
    progress = Progress(len(want))
    options = list(dict.fromkeys(args.mount_options))

    def job() -> None:
        progress.step('mounting the emulated resctrl (%s%s)' % (
            args.profile, ''.join(' -o ' + o for o in options)),
            lambda: box.mount_emulator(args.profile, options))
        write_config(box, want)
        if 'ovs' in want:
            progress.step(
                'starting ovsdb-server and ovs-vswitchd (bridge br0, '
                'pmd-cpu-mask=%s: PMD threads on CPU %s)'
                % (args.pmd_cpu_mask, ','.join(map(str, cores))),
                lambda: box.start_ovs(len(cores), args.pmd_cpu_mask,
                                      args.start_timeout))
        if 'libvirt' in want:
            progress.step('starting a private libvirtd with the ovs-rdt hook '
                          '(a first start probes QEMU: up to a minute)',
                          lambda: box.start_libvirtd(box.config_file,
                                                     args.start_timeout))

    failed = lifecycle.guarded(box, PROG, job)
    if failed is not None:
        return failed
    print()
    print(parts(box, box.running()))
    print(usage(box))
    return 0


def write_config(box: Any, want: tuple[str, ...]) -> None:
    emu, ovs, lv = box.emulator, box.ovs, box.libvirtd
    with open(box.config_file, 'w', encoding='utf-8') as fh:
        fh.write(CONFIG.format(
            workdir=box.workdir, profile=emu.profile, root=emu.root,
            sysfs=emu.sysfs, libvirt_uri=lv.ro_uri,
            qemu_run_dir=lv.qemu_run_dir, connection=ovs.connection,
            vswitchd_pidfile=ovs.vswitchd_pidfile,
            libvirt_note='' if 'libvirt' in want else
            '\n# Not started (--no-libvirt or --emulator-only).',
            ovs_note='' if 'ovs' in want else
            '\n# Not started (--no-ovs or --emulator-only).'))


def sandbox_command(action: str, workdir: str) -> str:
    return '%s sandbox %s%s' % (command_path(), action, '' if
                                workdir == WORKDIR else
                                ' --workdir ' + shlex.quote(workdir))


def parts(box: Any, running: dict[str, int | None]) -> str:
    """What runs (pids), and the one command that reaches each part."""
    def pid(name: str) -> str:
        return '%s %s' % (name, running[name] or 'NOT RUNNING')

    emu = box.emulator
    lines = ['Sandbox in %s (the host\'s resctrl, OvS and libvirtd are not '
             'used):' % box.workdir,
             '  resctrl   emulated %s (%s): ls %s'
             % (emu.profile or '?', pid('emulator'), emu.root)]
    if 'ovs-vswitchd' in running:
        lines.append('  OvS       %s, %s: ovs-vsctl --db=%s show'
                     % (pid('ovsdb-server'), pid('ovs-vswitchd'),
                        box.ovs.connection))
    if 'libvirtd' in running:
        lv = box.libvirtd
        lines.append("  libvirt   %s, hook %s: virsh -c '%s' list --all"
                     % (pid('libvirtd'), os.path.join(lv.hooks_dir,
                                                      '50-ovs-rdt'), lv.uri))
        why = boxes.kvm_problem()
        if why:
            lines.append("            no KVM here (%s): give guests "
                         "<domain type='qemu'>" % why)
    if 'ovs-rdt-agent' in running:
        lines.append('  agent     %s' % pid('ovs-rdt-agent'))
    lines.append('  config    %s (the hook, the agent and ovs-rdt read it; '
                 'log: %s)' % (box.config_file,
                               os.path.join(box.workdir, 'ovs-rdt.log')))
    return '\n'.join(lines)


def usage(box: Any) -> str:
    conf = shlex.quote(box.config_file)
    reach = ['ovs-rdt', 'ovs-rdt-agent'] + (
        ['virsh'] if box.state.get('libvirtd') else []) + (
        ['ovs-vsctl'] if box.state.get('ovs') else [])
    return '\n'.join((
        'Use it:',
        '  %s --config-file %s status' % (command_path(), conf),
        '  %s --config-file %s     (in the foreground; Ctrl-C ends it)'
        % (command_path('ovs-rdt-agent'), conf),
        '  eval "$(%s)"     (then %s and %s alone reach the sandbox)'
        % (sandbox_command('env', box.workdir), ', '.join(reach[:-1]),
           reach[-1]),
        'End it: %s' % sandbox_command('stop', box.workdir)))


def env(box: Any) -> str:
    """Shell variables for the parts that were started: ``OVS_RDT_CONF``
    (what ``ovs-rdt`` and ``ovs-rdt-agent`` read when no --config-file is
    given), ``OVS_RDT_RESCTRL``, and libvirt's and OvS's own.
    """
    values = [(CONFIG_ENV, box.config_file),
              ('OVS_RDT_RESCTRL', box.emulator.root)]
    if box.state.get('libvirtd'):
        values.append(('LIBVIRT_DEFAULT_URI', box.libvirtd.uri))
    if box.state.get('ovs'):
        # ovs-vsctl's default database is $OVS_RUNDIR/db.sock.
        values.append(('OVS_RUNDIR', box.ovs.dir))
    return ''.join('%s=%s; export %s\n' % (name, shlex.quote(value), name)
                   for name, value in values)
