"""One live migration between two nodes, with and without the hook.

Two nodes side by side (``ovs_rdt.sandbox.node``: node ``a`` an emulated
Xeon Gold 6230, node ``b`` an E7-8890 v4, each a private libvirtd with its
own host UUID), a KVM guest of 64 MiB without a disk asking for
``<rdt:l3 ways="3"/>``.  A round starts the guest on ``a``, times ``virsh
migrate --live --p2p`` (what Nova asks for) to ``b`` and back, and destroys
it; the rounds take turns between no hook at all, a hook that only exits
0 (libvirt's own cost of running one) and the ovs-rdt hook (one process per
event, as installed by ``ovs-rdt install-hook``), libvirtd reloaded in
between, so the machine's drift hits all alike.  Prints the p50 wall time
of a migration, the ratios (target <= 1.2x), and how long the hook's
events of one migration took in all (its own ``handled in`` log lines:
destination ``migrate``, ``prepare``, ``started``; source ``release``; the
wrapper ends the other events in the shell), per event and in all, with
the ratio that time alone gives (on a shared 2-core machine the wall times
are noisy).  The guest is migrated just after it starts: once it has settled, libvirt
here spends 1 s retrying the removal of the source's vCPU cgroup (EBUSY),
which would hide the hook's cost.

Needs root, /dev/kvm (or OVS_RDT_TCG=1), libvirt and FUSE.

    python3 bench/bench_migration.py [--rounds 6]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, REPO)

from ovs_rdt import atomicfile  # noqa: E402
from ovs_rdt.cmd import install_hook as install  # noqa: E402
from ovs_rdt.sandbox.node import Node, migrate  # noqa: E402
from ovs_rdt.sandbox.wait import SandboxError, wait_for  # noqa: E402

VIRT_TYPE = 'qemu' if os.environ.get('OVS_RDT_TCG') == '1' else 'kvm'
NAME = 'ovsrdt-bench-mig'
CONFIG = ('[DEFAULT]\nlog_file = %s\ndebug = true\n'
          '[allocation]\nsystem_min_ways = 2\n')
HANDLED = re.compile(r"domain '%s' (\w+ \w+): handled in ([0-9.]+) ms"
                     % NAME)


def guest_xml() -> str:
    return ("<domain type='%s'><name>%s</name><uuid>%s</uuid><metadata>"
            '<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1"><rdt:l3 ways="3"/>'
            "</rdt:rdt></metadata><memory unit='MiB'>64</memory>"
            "<vcpu>2</vcpu><os><type arch='x86_64' machine='pc'>hvm</type>"
            "</os><devices><emulator>/usr/bin/qemu-system-x86_64</emulator>"
            "</devices></domain>" % (VIRT_TYPE, NAME, uuid.uuid4()))


SETTINGS = ('without the hook', 'an exit-0 hook', 'the hook')
#: libvirt's own cost of running a hook at all (the XML formatted, a fork
#: and exec per event): a wrapper that only exits 0.
NULL_HOOK = '#!/bin/sh\n%s (a benchmark\'s do-nothing hook)\nexit 0\n' % (
    install.MARKER)


def set_hook(nodes: list[Node], setting: str) -> None:
    for node in nodes:
        if setting == 'without the hook':
            install.uninstall(node.hook)
        elif setting == 'an exit-0 hook':
            atomicfile.write(node.hook, NULL_HOOK, mode=0o755)
        else:
            install.install(node.hook, node.config_file)
        node.libvirtd.reload()      # libvirtd looks for hooks again
    for node in nodes:
        wait_for(lambda: node.libvirtd.virsh('version', check=False)
                 .returncode == 0, 60, 'libvirtd after SIGHUP')


def hook_ms(node: Node) -> dict[str, float]:
    """Event -> ms the hook took, from its log since the last call."""
    log = os.path.join(node.workdir, 'hook.log')
    try:
        with open(log, encoding='utf-8') as fh:
            text = fh.read()
        os.unlink(log)
    except FileNotFoundError:
        return {}
    out: dict[str, float] = {}
    for event, ms in HANDLED.findall(text):
        out[event] = out.get(event, 0.0) + float(ms)
    return out


def events_of(src: Node, dst: Node) -> dict[tuple[str, str], float]:
    """(role, event) -> ms of one migration's four hook events."""
    spent: dict[tuple[str, str], float] = {}

    def collect() -> bool:
        for role, node in (('destination', dst), ('source', src)):
            for event, ms in hook_ms(node).items():
                spent[role, event] = spent.get((role, event), 0.0) + ms
        return len(spent) >= 4
    try:
        wait_for(collect, 10, 'the hook events of a migration', step=0.02)
    except SandboxError:
        pass
    if len(spent) != 4:
        raise SystemExit('expected 4 hook events, got %s' % sorted(spent))
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=6,
                        help='rounds per setting (each: there and back)')
    args = parser.parse_args()
    if os.geteuid() != 0:
        print('bench_migration: needs root (private libvirtds)')
        return 1
    work = tempfile.mkdtemp(prefix='ovsrdt-bench-mig-', dir='/dev/shm'
                            if os.path.isdir('/dev/shm') else None)
    os.chmod(work, 0o755)
    a = Node(os.path.join(work, 'a'), 'a', 'xeon-gold-6230')
    b = Node(os.path.join(work, 'b'), 'b', 'xeon-e7-8890-v4')
    nodes = [a, b]
    times: dict[str, list[float]] = {k: [] for k in SETTINGS}
    events: dict[str, dict[str, list[float]]] = {k: {} for k in SETTINGS}
    problems: list[str] = []
    try:
        for node in nodes:
            os.makedirs(node.workdir)
            node.start(CONFIG % os.path.join(node.workdir, 'hook.log'),
                       die_with_parent=True)
        xml = os.path.join(work, 'guest.xml')
        with open(xml, 'w', encoding='utf-8') as fh:
            fh.write(guest_xml())
        a.libvirtd.virsh('define', xml)
        for _ in range(args.rounds):
            for setting in SETTINGS:
                set_hook(nodes, setting)
                a.libvirtd.virsh('start', NAME)
                for node in nodes:
                    hook_ms(node)
                for src, dst in ((a, b), (b, a)):
                    start = time.perf_counter()
                    res = migrate(src.libvirtd, dst.libvirtd, NAME)
                    times[setting].append(time.perf_counter() - start)
                    if res.returncode != 0:
                        raise SystemExit('migration %s -> %s failed: %s' % (
                            src.name, dst.name, res.stderr.strip()))
                    if setting in SETTINGS[:2]:
                        continue
                    spent = events_of(src, dst)
                    per = events[setting]
                    per.setdefault('total', []).append(sum(spent.values()))
                    for (role, event), ms in spent.items():
                        per.setdefault('%s %s' % (role, event),
                                       []).append(ms)
                a.libvirtd.virsh('destroy', NAME)
    finally:
        for node in nodes:
            problems += node.stop()
        if not problems:
            shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(times['without the hook']) * 1000
    fastest = min(times['without the hook'])
    print('live migration of a 64 MiB %s guest, a (Gold 6230) <-> b '
          '(E7-8890 v4), %d migrations each' % (
              VIRT_TYPE.upper(), len(times['without the hook'])))
    for setting in SETTINGS:
        p50 = statistics.median(times[setting]) * 1000
        print('  %-26s %8.0f ms p50 (min %.0f, max %.0f)  %5.2fx (of the '
              'fastest: %.2fx)' % (
                  setting, p50, min(times[setting]) * 1000,
                  max(times[setting]) * 1000, p50 / base,
                  min(times[setting]) / fastest))
    for setting in SETTINGS[2:]:
        per = events[setting]
        spent = statistics.median(per['total'])
        print('  the hook\'s own time, %-9s %5.0f ms p50 (%s), (without + '
              'it) / without: %.2fx' % (
                  setting + ':', spent, ', '.join(
                      '%s %.1f' % (k, statistics.median(v))
                      for k, v in sorted(per.items()) if k != 'total'),
                  (base + spent) / base))
    ratio = statistics.median(times['the hook']) * 1000 / base
    print('  target <= 1.20x (the hook): %.2fx, %s' % (
        ratio, 'met' if ratio <= 1.2 else 'NOT met'))
    if problems:
        print('teardown problems: %s' % '; '.join(problems))
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
