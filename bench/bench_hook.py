"""The libvirt hook's cost: wall time per event, and ``virsh start``.

1. Each hook event as libvirt runs it: the installed wrapper (``ovs-rdt
   install-hook``'s, here in a temporary hooks directory) exec'd with
   ``<domain> <op> <subop> -``, the domain XML on standard input, libvirt's
   environment (``LC_ALL=C`` and ``PATH`` only).  resctrl is the emulator
   (``xeon-gold-6230``, FUSE); the QEMU is a process that looks like one in
   /proc (``-uuid``, threads ``CPU n/KVM``).  Each round runs, interleaved:
   ``python3 -c pass`` and ``python3 -I -S -c pass`` (same interpreter),
   the wrapper's floor (``/bin/sh`` checking and exec'ing it), then
   prepare, started and release of a VM with ``<rdt:l3 ways="2"/>``, then
   prepare of a VM that asks for nothing (the common case).  p50 of
   the rounds and the ratio to ``python3 -c pass``.
2. ``virsh start`` + ``virsh destroy`` of a minimal KVM guest (TESTBED.md),
   libvirtd restarted without any hook, then with the hook installed
   (needs root, /dev/kvm and libvirt; skipped otherwise or with --no-virsh).

    python3 bench/bench_hook.py [--runs 30] [--starts 8] [--no-virsh]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, REPO)

from libvirt_hooks import install  # noqa: E402
from ovs_rdt.emulator.profiles import DEFAULT_PROFILE  # noqa: E402
from ovs_rdt.sandbox.emulator import MountedEmulator  # noqa: E402

UUID = '6f1c7a52-8c0e-4d4a-9a61-0c5a3b7e2d10'
LIBVIRT_ENV = {'LC_ALL': 'C', 'PATH': '/usr/sbin:/usr/bin:/sbin:/bin'}

FAKE_QEMU = r'''
import threading, time
ready = threading.Semaphore(0)
def vcpu(i):
    with open('/proc/self/task/%d/comm' % threading.get_native_id(), 'w') as f:
        f.write('CPU %d/KVM' % i)
    ready.release()
    time.sleep(3600)
for i in range(2):
    threading.Thread(target=vcpu, args=(i,), daemon=True).start()
for i in range(2):
    ready.acquire()
print('ready', flush=True)
time.sleep(3600)
'''


def domain_xml(name: str, uuid: str, metadata: str) -> bytes:
    return ("<domain type='kvm' id='1'><name>%s</name><uuid>%s</uuid>"
            "<metadata>%s</metadata><memory unit='KiB'>65536</memory>"
            "<vcpu placement='static'>2</vcpu>"
            "<os><type arch='x86_64' machine='pc-i440fx-7.2'>hvm</type></os>"
            "<devices><emulator>/usr/bin/qemu-system-x86_64</emulator>"
            "</devices></domain>" % (name, uuid, metadata)).encode()


ANNOTATION = ('<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1"><rdt:l3 ways="2"/>'
              '</rdt:rdt>')


def timed(cmd: list[str], data: bytes = b'', env: dict | None = None) -> float:
    start = time.perf_counter()
    res = subprocess.run(cmd, input=data, env=env, capture_output=True)
    elapsed = time.perf_counter() - start
    if res.returncode != 0 or res.stdout:
        raise SystemExit('%s failed (%d): %s%s' % (
            ' '.join(cmd), res.returncode, res.stderr.decode().strip(),
            ' stdout: %r' % res.stdout if res.stdout else ''))
    return elapsed


def mount_emulator(tmp: str) -> MountedEmulator:
    return MountedEmulator(os.path.join(tmp, 'emu'), DEFAULT_PROFILE).start()


def write_config(path: str, root: str, sysfs: str, run_dir: str) -> None:
    with open(path, 'w', encoding='utf-8') as fh:
        fh.write('[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n'
                 '[allocation]\nsystem_min_ways = 2\n'
                 '[libvirt]\nqemu_run_dir = %s\n' % (root, sysfs, run_dir))


def p50(values: list[float]) -> float:
    return statistics.median(values) * 1000


def bench_events(runs: int) -> None:
    tmp = tempfile.mkdtemp(prefix='ovsrdt-bench-hook-')
    emu = mount_emulator(tmp)
    root, sysfs = emu.root, emu.sysfs
    qemu = None
    try:
        run_dir = os.path.join(tmp, 'run')
        os.mkdir(run_dir)
        config = os.path.join(tmp, 'ovs-rdt.conf')
        write_config(config, root, sysfs, run_dir)
        wrapper = install.hook_path(os.path.join(tmp, 'hooks'))
        install.install(wrapper, config)
        qemu = subprocess.Popen(
            ['qemu-system-x86_64', '-c', FAKE_QEMU, '-name', 'guest=vm1',
             '-uuid', UUID], executable=sys.executable, stdout=subprocess.PIPE)
        assert qemu.stdout is not None and qemu.stdout.readline() == b'ready\n'
        with open(os.path.join(run_dir, 'vm1.pid'), 'w') as fh:
            fh.write('%d\n' % qemu.pid)
        annotated = domain_xml('vm1', UUID, ANNOTATION)
        plain = domain_xml('vm2', '6f1c7a52-8c0e-4d4a-9a61-0c5a3b7e2d11', '')
        rows: dict[str, list[float]] = {k: [] for k in (
            'python3 -c pass', 'python3 -I -S -c pass',
            'sh exec python3 -I -S', 'prepare begin', 'started begin',
            'release end', 'prepare (asks nothing)')}
        py = sys.executable
        # The wrapper's floor: /bin/sh checks the interpreter, then execs it.
        sh_floor = ['/bin/sh', '-c', '[ -x "$0" ] && exec "$0" -I -S -c pass',
                    py]
        for _ in range(runs):
            rows['python3 -c pass'].append(timed([py, '-c', 'pass']))
            rows['python3 -I -S -c pass'].append(
                timed([py, '-I', '-S', '-c', 'pass']))
            rows['sh exec python3 -I -S'].append(timed(sh_floor))
            for key, op, subop in (('prepare begin', 'prepare', 'begin'),
                                   ('started begin', 'started', 'begin'),
                                   ('release end', 'release', 'end')):
                rows[key].append(timed([wrapper, 'vm1', op, subop, '-'],
                                       annotated, LIBVIRT_ENV))
            rows['prepare (asks nothing)'].append(
                timed([wrapper, 'vm2', 'prepare', 'begin', '-'], plain,
                      LIBVIRT_ENV))
        base = p50(rows['python3 -c pass'])
        bare = p50(rows['python3 -I -S -c pass'])
        print('hook events (%d rounds, %s, wrapper %s)' % (runs, py, wrapper))
        print('  %-24s %8s %8s %19s %12s' % ('', 'p50 ms', 'min ms',
                                             'p50/python3 -c pass',
                                             'p50/-I -S'))
        for key, values in rows.items():
            print('  %-24s %8.1f %8.1f %18.2fx %11.2fx' % (
                key, p50(values), min(values) * 1000, p50(values) / base,
                p50(values) / bare))
    finally:
        if qemu is not None:
            qemu.kill()
            qemu.wait()
        emu.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def bench_virsh(starts: int) -> None:
    from tests.functional.fixtures.libvirt import libvirt_missing
    from tests.functional.fixtures.libvirt import LibvirtTestbed

    why = libvirt_missing()
    if why:
        print('virsh start: skipped (%s)' % why)
        return
    tmp = tempfile.mkdtemp(prefix='ovsrdt-bench-virsh-')
    os.chmod(tmp, 0o755)
    emu = mount_emulator(tmp)
    root, sysfs = emu.root, emu.sysfs
    testbed = LibvirtTestbed(tmp, 'bench')
    try:
        testbed.setup()                    # hook installed, libvirtd fresh
        testbed.configure(root, sysfs, pools={})
        guest = testbed.define(ANNOTATION)

        def cycle() -> list[float]:
            out = []
            for _ in range(starts):
                start = time.perf_counter()
                testbed.start(guest)
                out.append(time.perf_counter() - start)
                testbed.destroy(guest)
            return out

        with_hook = cycle()
        install.uninstall(testbed.hook)
        testbed.restart_libvirtd()         # no hook scanned at start now
        without = cycle()
        install.install(testbed.hook, testbed.config)
        testbed.restart_libvirtd()
        print('virsh start + guest boot to "running" (%d starts each)'
              % starts)
        print('  %-24s %9.1f ms p50' % ('without the hook', p50(without)))
        print('  %-24s %9.1f ms p50 (+%.1f ms, %.2fx)' % (
            'with the hook', p50(with_hook), p50(with_hook) - p50(without),
            p50(with_hook) / p50(without)))
    finally:
        testbed.cleanup()
        emu.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=30)
    parser.add_argument('--starts', type=int, default=8)
    parser.add_argument('--no-virsh', action='store_true')
    args = parser.parse_args()
    bench_events(args.runs)
    if not args.no_virsh:
        bench_virsh(args.starts)
    return 0


if __name__ == '__main__':
    sys.exit(main())
