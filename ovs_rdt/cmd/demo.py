"""``ovs-rdt demo``: the application note's NFV cache layout, on real parts.

Only the cache hardware is emulated (``ovs-rdt emulate``); OvS, libvirtd, the
KVM guests, the hook and the agent are the real ones.  The plan is Table 4 of
the application note (the README's References, seed 000): PMDs +
ovs-vswitchd + the VM under test share ``hp`` (0x7f0, isolated), the noisy
neighbours share ``noisy`` (0x2), the OS keeps 0xc, and a fourth guest
takes the way Table 4 leaves free (bit 0) in a dedicated CLOS.

Table 4 is for an 11-way CBM.  On a profile with a wider CBM (``--profile``)
the demo keeps its way counts and order from the highest way down (hp 7,
the OS 2, noisy 1, the rest free: :func:`table4_masks`).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from typing import Any
import urllib.error
import urllib.request

from ovs_rdt.cmd.common import manager_from, resctrl_from
from ovs_rdt.cmd import lifecycle, report, say
from ovs_rdt.cmd.lifecycle import Progress, command_path
from ovs_rdt import conf
from ovs_rdt.conf import Settings
from ovs_rdt.exceptions import RDTError
from ovs_rdt.opts import whole_number
from ovs_rdt.resctrl import Resctrl
from ovs_rdt import sandbox as boxes

PROG = 'ovs-rdt demo'
START_TIMEOUT = 180.0

WORKDIR = '/run/ovs-rdt-demo'

CONFIG = """\
# ovs-rdt demo: the NFV layout of Intel's CAT application note for OvS-DPDK
# (its Table 4), written with explicit masks as an operator copying it would.
[DEFAULT]
log_file = {workdir}/ovs-rdt.log

[resctrl]
root = {root}
sysfs_cpu_root = {sysfs}

[allocation]
pools = hp,noisy
system_min_ways = 2
# The OS and everything else (the note's CLOS 2).
system_l3_cbm = {system:x}

[pool:hp]
# PMD threads, ovs-vswitchd and the VM under test (the note's CLOS 0).
l3_cbm = {hp:x}
isolated = true

[pool:noisy]
# The noisy neighbours (the note's CLOS 1).
l3_cbm = {noisy:x}

[libvirt]
# The demo's private libvirtd, which the agent, status and top read.
uri = {libvirt_uri}

[metrics]
listen = {metrics}

[ovs]
connection = {connection}
vswitchd_pidfile = {vswitchd_pidfile}
rescan_interval = 2
"""

#: The application note's Table 4 in ways, from the highest way down
#: (11-way CBM: 0x7f0, 0xc, 0x2 and way 0 free).
TABLE4_WAYS = (('hp', 7), ('system', 2), ('noisy', 1))


def table4_masks(cbm_len: int) -> dict[str, int]:
    """Table 4's masks scaled to a CBM of ``cbm_len`` ways.

    The same way counts in the same order from the highest way down; the
    ways below are free (Table 4 leaves one, which the dedicated guest
    takes).
    """
    need = sum(ways for _, ways in TABLE4_WAYS) + 1
    if cbm_len < need:
        raise RDTError('the demo needs an L3 CBM of at least %d ways (hp 7, '
                       'the OS 2, noisy 1 and a free way); this profile has '
                       '%d' % (need, cbm_len))
    masks = {}
    top = cbm_len
    for name, ways in TABLE4_WAYS:
        top -= ways
        masks[name] = ((1 << ways) - 1) << top
    return masks


GUESTS = (
    ('ovsrdt-demo-sut', '<rdt:pool name="hp"/>', 'VM under test (pool hp)'),
    ('ovsrdt-demo-noisy1', '<rdt:pool name="noisy"/>',
     'noisy neighbour (pool noisy)'),
    ('ovsrdt-demo-noisy2', '<rdt:pool name="noisy"/>',
     'noisy neighbour (pool noisy)'),
    ('ovsrdt-demo-dedicated', '<rdt:l3 ways="1"/>',
     'dedicated CLOS, 1 isolated way'),
)

GUEST_XML = """\
<domain type='{virt}'>
  <name>{name}</name>
  <memory unit='MiB'>64</memory>
  <vcpu>2</vcpu>
  <metadata>
    <rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">
      {annotation}
    </rdt:rdt>
  </metadata>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices><emulator>{emulator}</emulator></devices>
</domain>
"""

#: ``mount -t resctrl -o ...`` options the emulator takes.
MOUNT_OPTIONS = ('cdp', 'mba_MBps', 'debug')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--profile', default='xeon-gold-6230',
                        help='emulated platform (default xeon-gold-6230)')
    parser.add_argument('--mount-option', action='append', default=[],
                        choices=MOUNT_OPTIONS, dest='mount_options',
                        help='mount the emulated resctrl with "-o OPTION", '
                        'as the kernel takes it (repeatable): cdp (code and '
                        'data masks), mba_MBps (MB: in MiB/s), debug')
    parser.add_argument('--keep', action='store_true',
                        help='leave everything running for exploration; '
                        'end it with "ovs-rdt demo --teardown"')
    parser.add_argument('--teardown', action='store_true',
                        help='tear down what "ovs-rdt demo --keep" left running')
    parser.add_argument('--tcg', action='store_true',
                        help='run the guests without KVM (software emulation)')
    parser.add_argument('--workdir', default=WORKDIR,
                        help='where the demo keeps its state (default %s)'
                        % WORKDIR)
    parser.add_argument('--top-seconds', type=whole_number(), default=3,
                        help='seconds of "ovs-rdt top" to show (default 3)')
    parser.add_argument('--metrics-listen', default='127.0.0.1:9468',
                        metavar='HOST:PORT',
                        help='where the demo\'s ovs-rdt-agent serves '
                        'Prometheus metrics (default 127.0.0.1:9468)')
    parser.add_argument('--start-timeout', type=float, default=START_TIMEOUT,
                        help='seconds to wait for each daemon to answer '
                        '(default %.0f: a cold libvirtd probes QEMU first)'
                        % START_TIMEOUT)


def missing_prerequisites(tcg: bool) -> list[str]:
    out = []
    if os.geteuid() != 0:
        out.append('run as root: the demo mounts FUSE and starts libvirtd')
    out += lifecycle.missing(('emulator', 'ovs', 'libvirt'))
    if not tcg and os.path.exists('/dev/kvm'):
        why = boxes.kvm_problem()
        if why:
            out.append(why + ' (or rerun with --tcg)')
    return out


def run(settings: Settings, args: argparse.Namespace) -> int:

    if args.teardown:
        return lifecycle.teardown(boxes.Sandbox(args.workdir), PROG)
    if not args.tcg and not os.path.exists('/dev/kvm'):
        print('ovs-rdt demo: /dev/kvm does not exist: running the guests '
              'with software emulation (TCG) instead of KVM', flush=True)
        args.tcg = True
    problems = missing_prerequisites(args.tcg)
    if problems:
        for line in problems:
            say('demo', line)
        return 2
    if lifecycle.set_up(args.workdir):
        say('demo', 'a demo is already set up in %s; end it with "%s demo '
            '--teardown"' % (args.workdir, command_path()))
        return 2
    box = boxes.Sandbox(args.workdir)
    box.save()
    began = time.monotonic()

    def job() -> None:
        _main_job(box, args)
        print('\nDemo set up and shown in %.1f s.' % (time.monotonic() - began))
        if args.keep:
            cli = command_path()
            teardown = cli + ' demo --teardown' + (
                ' --workdir ' + args.workdir if args.workdir != WORKDIR else '')
            print('Left running (--keep). Explore with:\n'
                  '  %s --config-file %s/ovs-rdt.conf status\n'
                  '  %s --config-file %s/ovs-rdt.conf top\n'
                  "  virsh -c '%s' list\n"
                  'and end it with: %s'
                  % (cli, args.workdir, cli, args.workdir,
                     box.libvirtd.uri, teardown))

    failed = lifecycle.guarded(box, PROG, job)
    if failed is not None:
        return failed
    return 0 if args.keep else lifecycle.teardown(box, PROG)


TABLE4 = (  # the application note's Table 4: (who, CoS, CBM)
    ('PMD1', '0', '0x7F0'), ('PMD2', '0', '0x7F0'),
    ('ovs-vswitchd', '0', '0x7F0'), ('VM1 - SUT', '0', '0x7F0'),
    ('VM2 - Noisy Neighbor', '1', '0x2'), ('VM3 - Noisy Neighbor', '1', '0x2'),
    ('OS', '2', '0xC'),
)


def placed(plan: dict, domain: int = 0) -> list[tuple[str, str, str, int]]:
    """(who, group, CBM, ways) for every member, as Table 4 lists them."""
    dom = next(d for d in plan['domains'] if d['domain'] == domain)
    rows = []
    # Table 4's order: the shared CLOSes, then the OS, then the rest.
    order = {'pool': 0, 'ovs-pmd': 0, 'default': 1}
    for row in sorted(dom['groups'], key=lambda r: order.get(r['kind'], 2)):
        cbm = '0x' + row['cbm']
        if row['kind'] == 'default':
            rows.append(('OS', 'default (root)', cbm, row['ways']))
            continue
        for member in row['members']:
            if member['kind'] == 'ovs-vswitchd':
                for core in sorted(member['pmds']):
                    rows.append(('PMD c%02d' % core, row['group'], cbm,
                                 row['ways']))
                rows.append(('ovs-vswitchd', row['group'], cbm, row['ways']))
            elif member['kind'] == 'vm':
                rows.append(('VM ' + member['name'], row['group'], cbm,
                             row['ways']))
    return rows


def table4(plan: dict) -> str:
    """The application note's Table 4 next to what is placed here (cache
    domain 0).
    """
    lines = ['Seed 000 Table 4 ("CAT with Aggressors")  vs  this node, cache '
             'domain 0:',
             '  %-22s %-4s %-6s | %-24s %-40s %-6s %s'
             % ('Process/VM', 'CoS', 'CBM', 'here', 'group', 'CBM', 'ways')]
    here = placed(plan)
    for i in range(max(len(TABLE4), len(here))):
        left = TABLE4[i] if i < len(TABLE4) else ('', '', '')
        right = here[i] if i < len(here) else ('', '', '', '')
        lines.append('  %-22s %-4s %-6s | %-24s %-40s %-6s %s'
                     % (left + right))
    return '\n'.join(lines)


def _main_job(box: Any, args: argparse.Namespace) -> None:
    from ovs_rdt.cmd import status, top

    progress = Progress(10)
    options = list(dict.fromkeys(args.mount_options))
    root, sysfs = progress.step(
        'mounting the emulated resctrl (%s%s)' % (
            args.profile, ''.join(' -o ' + o for o in options)),
        lambda: box.mount_emulator(args.profile, options))
    masks = table4_masks(Resctrl(root, sysfs).platform().cbm_len)
    config_file = os.path.join(args.workdir, 'ovs-rdt.conf')
    with open(config_file, 'w') as fh:
        fh.write(CONFIG.format(workdir=args.workdir, root=root, sysfs=sysfs,
                               connection=box.ovs.connection,
                               metrics=args.metrics_listen,
                               vswitchd_pidfile=box.ovs.vswitchd_pidfile,
                               libvirt_uri=box.libvirtd.ro_uri,
                               **masks))
    settings = conf.load(config_file)
    progress.step('ovs-rdt apply: pools hp=0x%x (isolated), noisy=0x%x, '
                  'default group 0x%x'
                  % (masks['hp'], masks['noisy'], masks['system']),
                  lambda: manager_from(settings).apply())
    progress.step('starting ovsdb-server and ovs-vswitchd (netdev bridge, 2 '
                  'dummy-pmd ports, pmd-cpu-mask=0x3)',
                  lambda: box.start_ovs(2, '0x3', args.start_timeout))
    progress.step('ovs-vsctl set Open_vSwitch . other_config:rdt-pmd-pool=hp '
                  'other_config:rdt-vswitchd=pmd',
                  lambda: box.vsctl('set', 'Open_vSwitch', '.',
                                    'other_config:rdt-pmd-pool=hp',
                                    'other_config:rdt-vswitchd=pmd'))

    def agent_ok() -> str | bool:
        status = box.vsctl('--if-exists', 'get', 'Open_vSwitch', '.',
                           'external_ids:rdt-status').strip('"')
        if status.startswith('error'):
            raise RDTError('ovs-rdt-agent reports %s' % status)
        return status.startswith('ok') and status

    progress.step('starting a private libvirtd with the ovs-rdt hook '
                  '(first start probes QEMU: up to a minute)',
                  lambda: box.start_libvirtd(config_file, args.start_timeout))
    progress.step('starting ovs-rdt-agent (PMD threads + ovs-vswitchd -> hp)',
                  lambda: (box.start_agent(config_file),
                           boxes.wait_for(agent_ok, args.start_timeout,
                                          'the agent\'s rdt-status')))
    emulator = shutil.which('qemu-system-x86_64') or 'qemu-system-x86_64'
    virt = 'qemu' if args.tcg else 'kvm'

    def start_guests() -> None:
        for name, annotation, _ in GUESTS:
            box.define_and_start(name, GUEST_XML.format(
                virt=virt, name=name, annotation=annotation,
                emulator=emulator))

    progress.step('virsh define + start: %s' % ', '.join(
        '%s (%s)' % (n, d) for n, _, d in GUESTS), start_guests)
    resctrl = resctrl_from(settings)

    plan = progress.step('reading the cache plan (ovs-rdt status)',
                         lambda: status.collect(resctrl))
    print('\n' + report.render(plan, sys.stdout.isatty()))
    print('\n' + table4(plan))

    def show_top() -> None:
        print()
        ns = argparse.Namespace(interval=1.0, once=False, no_clear=True,
                                iterations=args.top_seconds)
        top.run(settings, ns)     # (ends quietly on Ctrl-C: see step())

    progress.step('%d s of ovs-rdt top' % args.top_seconds, show_top)

    def show_metrics() -> None:
        url = 'http://%s/metrics' % args.metrics_listen
        text = boxes.wait_for(lambda: _scrape(url), args.start_timeout,
                              'the agent\'s metrics at ' + url)
        families = groups_per_metric(text)
        print('\ncurl %s (Prometheus; doc/metrics.md):' % url)
        for name in sorted(families):
            print('  %-36s %d groups' % (name, len(families[name])))

    progress.step('the agent\'s Prometheus metrics', show_metrics)


def groups_per_metric(text: str) -> dict[str, set[str]]:
    """The resctrl groups each ``ovs_rdt_`` sample of a Prometheus text
    exposition labels (``group``), by sample name (a counter's
    ``_created`` time left out: it is not a metric of its own).
    """
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            group = sample.labels.get('group')
            if sample.name.startswith('ovs_rdt_') and group is not None \
                    and not sample.name.endswith('_created'):
                out.setdefault(sample.name, set()).add(group)
    return out


def _scrape(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode('utf-8', 'replace')
    except (OSError, urllib.error.URLError):
        return None
