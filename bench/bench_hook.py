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
2. The hook's own CPU: user + system time of the hook process (``wait4``'s
   rusage: the emulator's FUSE service time, spent in its own process,
   does not count) for one prepare + release pair of a VM asking for 2
   ways, through the installed wrapper, against two ``python3 -c pass``
   of the same interpreter in a bare venv, on an empty node and on a node
   already holding 6 VM groups.  Target: <= 1.6x.  On the empty node, an
   ablation: each start-up trick of the hook undone in turn (the module it
   avoids imported first, or ``main_once`` replaced by a plain ``main``);
   a trick that saves under 0.3 ms per event has no place in the hook.
3. ``virsh start`` + ``virsh destroy`` of a minimal KVM guest (TESTBED.md),
   libvirtd restarted without any hook, then with the hook installed
   (needs root, /dev/kvm and libvirt; skipped otherwise or with --no-virsh).

    python3 bench/bench_hook.py [--runs 30] [--cpu-runs 30] [--starts 8]
        [--no-virsh] [--only cpu|events|virsh]
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, REPO)

from ovs_rdt.cmd import install_hook as install  # noqa: E402
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


def cpu_of(cmd: list[str], data: bytes = b'', env: dict | None = None
           ) -> float:
    """User + system seconds of the process ``cmd`` runs as.

    RUSAGE_CHILDREN grows by exactly that process's rusage when it is
    reaped (the wrapper's ``sh`` execs the interpreter: one process; the
    emulator daemon and the fake QEMU are not reaped meanwhile).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    timed(cmd, data, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime
            + after.ru_stime - before.ru_stime)


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


def pinned_xml(index: int, cpus: str) -> bytes:
    uuid = '6f1c7a52-8c0e-4d4a-9a61-%012x' % (0x100 + index)
    return ("<domain type='kvm'><name>big%d</name><uuid>%s</uuid>"
            "<metadata>%s</metadata><memory unit='KiB'>65536</memory>"
            "<vcpu placement='static' cpuset='%s'>2</vcpu>"
            "<os><type arch='x86_64' machine='pc-i440fx-7.2'>hvm</type></os>"
            "<devices><emulator>/usr/bin/qemu-system-x86_64</emulator>"
            "</devices></domain>" % (
                index, uuid, ANNOTATION.replace('ways="2"', 'ways="1"'),
                cpus)).encode()


def bare_python(tmp: str) -> str:
    """The same interpreter in a virtualenv of its own, with nothing in it.

    ``python3 -c pass`` from the project's development venv also runs the
    editable install's import finder that ``site`` loads from a ``.pth``
    (pathlib, re, importlib.util: it triples the start-up); a node's venv
    with ovs-rdt installed from a wheel has no such file.  The hook itself
    runs with ``-I -S`` and never loads it.
    """
    path = os.path.join(tmp, 'bare-venv')
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', path],
                   check=True)
    return os.path.join(path, 'bin', 'python3')


def wrapper_code() -> str:
    """The Python the wrapper runs (``-c``), from the shipped wrapper."""
    found = re.search(r"-I -S -c '(.*?)' \"\$0\" \"\$packages\"",
                      install.shipped_wrapper(), re.S)
    assert found, 'no -c code in libvirt_hooks/wrapper.sh'
    return found.group(1)


#: What each start-up trick of the hook saves, measured by undoing it: the
#: hook run as the wrapper runs it, with this Python first (or changed).
#: A trick that saves under 0.3 ms of CPU per event goes.
ABLATION = (
    ('as shipped', ''),
    ('+ import typing (TYPE_CHECKING = False in the hook\'s modules)',
     'import typing'),
    ('+ import logging (hook.Log, ovs_rdt.logs: no logging module)',
     'import logging'),
    ('+ import contextlib (resctrl.files._Lock, not @contextmanager)',
     'import contextlib'),
    ('+ import argparse (hook.parse_args instead of argparse)',
     'import argparse'),
    ('- gc.disable() and os._exit() (hook.main_once)', None),
)


def cpu_node(runs: int, vms: int, ablation: bool) -> dict[str, float]:
    """p50 CPU ms of a prepare + release pair of the hook as libvirt runs
    it (the installed wrapper: sh, exec'ing Python), on a node already
    holding ``vms`` VM groups, against ``python3 -c pass``; with
    ``ablation``, each :data:`ABLATION` variant run directly (no sh).
    """
    tmp = tempfile.mkdtemp(prefix='ovsrdt-bench-hookcpu-')
    emu = mount_emulator(tmp)
    try:
        bare = bare_python(tmp)
        run_dir = os.path.join(tmp, 'run')
        os.mkdir(run_dir)
        config = os.path.join(tmp, 'ovs-rdt.conf')
        write_config(config, emu.root, emu.sysfs, run_dir)
        wrapper = install.hook_path(os.path.join(tmp, 'hooks'))
        install.install(wrapper, config)
        for i in range(vms):
            timed([wrapper, 'big%d' % i, 'prepare', 'begin', '-'],
                  pinned_xml(i, '0-19' if i % 2 else '20-39'), LIBVIRT_ENV)
        groups = [n for n in os.listdir(emu.root)
                  if n.startswith('ovsrdt-vm-')]
        assert len(groups) == vms, groups
        annotated = domain_xml('vm1', UUID, ANNOTATION)
        py = sys.executable
        code = wrapper_code()
        variants = {}
        for label, prelude in (ABLATION if ablation else ()):
            if prelude is None:
                body = code.replace(
                    'main_once(sys.argv[1], sys.argv[3:])',
                    'sys.argv[1:3] = []\nsys.exit(main())').replace(
                    'import main_once', 'import main')
                assert 'main_once' not in body
            else:
                body = prelude + '\n' + code
            variants[label] = [py, '-I', '-S', '-c', body, wrapper,
                               install.package_dir(), '--config-file',
                               config]
        rows: dict[str, list[float]] = {'python3 -c pass': [],
                                        'prepare + release': []}
        for _ in range(runs):
            rows['python3 -c pass'].append(cpu_of([bare, '-c', 'pass']))
            rows['prepare + release'].append(sum(
                cpu_of([wrapper, 'vm1', op, subop, '-'], annotated,
                       LIBVIRT_ENV)
                for op, subop in (('prepare', 'begin'), ('release', 'end'))))
            for label, cmd in variants.items():
                rows.setdefault(label, []).append(sum(
                    cpu_of(cmd + ['vm1', op, subop, '-'], annotated,
                           LIBVIRT_ENV)
                    for op, subop in (('prepare', 'begin'),
                                      ('release', 'end'))))
        return {k: p50(v) for k, v in rows.items()}
    finally:
        emu.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def bench_cpu(runs: int) -> None:
    print('hook CPU, one prepare + release pair as libvirt runs it (one '
          'process per event: user + system time; p50 of %d rounds; '
          'python3 = %s in a bare venv; target <= 1.60x two python3 -c '
          'pass)' % (runs, sys.executable))
    worst = 0.0
    for label, vms in (('empty node', 0), ('node with 6 VM groups', 6)):
        res = cpu_node(runs, vms, ablation=vms == 0)
        base = res['python3 -c pass']
        pair = res['prepare + release']
        ratio = pair / (2 * base)
        worst = max(worst, ratio)
        print('  %-22s python3 -c pass %.2f ms; prepare + release %.2f ms: '
              '%.2fx two python3 -c pass' % (label, base, pair, ratio))
        if vms:
            continue
        shipped = res['as shipped']
        print('  ablation (the pair run directly, without sh; CPU ms and '
              'per event against as shipped):')
        for name, _ in ABLATION:
            print('    %-66s %7.2f %+6.2f' % (name, res[name],
                                              (res[name] - shipped) / 2))
    print('  worst ratio: %.2fx, target <= 1.60x: %s'
          % (worst, 'met' if worst <= 1.6 else 'NOT met'))


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
    parser.add_argument('--cpu-runs', type=int, default=30)
    parser.add_argument('--no-virsh', action='store_true')
    parser.add_argument('--only', choices=('cpu', 'events', 'virsh'))
    args = parser.parse_args()
    if args.only in (None, 'events'):
        bench_events(args.runs)
    if args.only in (None, 'cpu'):
        bench_cpu(args.cpu_runs)
    if args.only in (None, 'virsh') and not args.no_virsh:
        bench_virsh(args.starts)
    return 0


if __name__ == '__main__':
    sys.exit(main())
