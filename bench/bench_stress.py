"""Figures under load: concurrent ``virsh start`` rounds on real parts.

Runs the stress suite's load rounds (``tests/stress/test_load.py``: a
private libvirtd with KVM guests and the hook, the mounted emulator
``xeon-e7-8890-v4``, a private OvS with the agent; PMD threads re-created
and ``ovs-rdt apply`` run at the same moment as the starts) and prints
what they measured: guests started and refused per round, starts/s,
p50/p95/p99 of the hook's own time per event (``handled in X ms`` in its
log: parse, plan and resctrl writes, without the interpreter's start-up,
which bench_hook measures), double-allocated ways and leaked groups.  The
ratio is starts/s against ``BASELINE_STARTS_PER_S`` (one 2-core machine
of the test bed).  Needs root, /dev/kvm, libvirt and OvS.

    python3 bench/bench_stress.py            (one round of 16)
    python3 bench/bench_stress.py --long     (rounds of 16, 32, 16, 32)
    python3 bench/bench_stress.py --all      (the whole stress suite)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
#: starts/s of a 16-guest round on the 2-core test bed (2026-11-22).
BASELINE_STARTS_PER_S = 2.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--long', action='store_true',
                        help='the long budget (OVS_RDT_STRESS=long)')
    parser.add_argument('--all', action='store_true',
                        help='the whole suite, not only the load rounds')
    args = parser.parse_args()
    fd, report = tempfile.mkstemp(prefix='ovsrdt-stress-', suffix='.json')
    os.close(fd)
    env = dict(os.environ, OVS_RDT_STRESS_REPORT=report,
               OVS_RDT_STRESS='long' if args.long else 'quick')
    target = 'tests/stress' if args.all else 'tests/stress/test_load.py'
    try:
        proc = subprocess.run([sys.executable, '-m', 'pytest', '-q',
                               '-p', 'no:cacheprovider', target],
                              cwd=REPO, env=env, capture_output=True,
                              text=True, check=False)
        if proc.returncode != 0:
            print(proc.stdout[-4000:] + proc.stderr[-2000:])
            print('bench_stress: the stress run failed (%d)' % proc.returncode)
            return 1
        with open(report, encoding='utf-8') as fh:
            figures = json.load(fh)
    finally:
        os.unlink(report)
    for key in sorted(figures):
        print('%-48s %s' % (key, figures[key]))
    rates = [v for k, v in figures.items() if k.endswith('starts/s')]
    if rates:
        rate = min(rates)
        print('%-48s %.2f (x%.2f of baseline %.2f)'
              % ('slowest round starts/s', rate, rate / BASELINE_STARTS_PER_S,
                 BASELINE_STARTS_PER_S))
    return 0


if __name__ == '__main__':
    sys.exit(main())
