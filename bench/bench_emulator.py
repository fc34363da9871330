#!/usr/bin/env python3
"""Schemata write latency of the resctrl emulator next to a plain tmpfs file.

Mounts an emulator (``python3 -m ovs_rdt.emulator -d``) in a directory under
/dev/shm, creates a group, and times N writes of a valid ``L3:0=7f0\\n`` to its
schemata file, both as ``write(2)`` on an open descriptor and as
open+write+close (what a shell ``echo >`` does), against the same writes to a
regular file on tmpfs.  Prints p50/p95 in microseconds and the ratio.

    python3 bench/bench_emulator.py [-n 2000] [--profile xeon-gold-6230]
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from typing import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from ovs_rdt.sandbox.emulator import MountedEmulator  # noqa: E402
DATA = b'L3:0=7f0\n'


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(pct / 100 * len(ordered)) - 1, 0)]


def timed(count: int, action: Callable[[], None]) -> list[float]:
    for _ in range(min(count, 100)):            # warm-up
        action()
    out = []
    for _ in range(count):
        start = time.perf_counter_ns()
        action()
        out.append((time.perf_counter_ns() - start) / 1000.0)
    return out


def fd_writer(path: str, rewind: bool) -> tuple[Callable[[], None], Callable[[], None]]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)

    def write() -> None:
        if rewind:
            os.pwrite(fd, DATA, 0)
        else:
            os.write(fd, DATA)
    return write, lambda: os.close(fd)


def open_writer(path: str) -> Callable[[], None]:
    def write() -> None:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, DATA)
        finally:
            os.close(fd)
    return write


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('-n', '--count', type=int, default=2000)
    parser.add_argument('--profile', default='xeon-gold-6230')
    args = parser.parse_args()
    base = '/dev/shm' if os.path.isdir('/dev/shm') else None
    tmp = tempfile.mkdtemp(prefix='bench-emulator-', dir=base)
    plain = os.path.join(tmp, 'plain-schemata')
    emu = MountedEmulator(os.path.join(tmp, 'emu'), args.profile).start()
    root = emu.root
    try:
        os.mkdir(os.path.join(root, 'bench'))
        schemata = os.path.join(root, 'bench', 'schemata')
        rows = []
        for label, emu_path, rewind in (('write(2)', schemata, False),
                                        ('write(2)', plain, True)):
            write, close = fd_writer(emu_path, rewind)
            try:
                rows.append((label, emu_path, timed(args.count, write)))
            finally:
                close()
        for path in (schemata, plain):
            rows.append(('open+write+close', path, timed(args.count, open_writer(path))))
        with open(os.path.join(root, 'info', 'last_cmd_status')) as fh:
            assert fh.read() == 'ok\n'
    finally:
        emu.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print('schemata write latency, %d writes of %r (profile %s), microseconds'
          % (args.count, DATA.decode(), args.profile))
    print('%-38s %10s %10s' % ('', 'p50', 'p95'))
    for i in (0, 2):
        (label, _, emu), (_, _, shm) = rows[i], rows[i + 1]
        e50, e95 = percentile(emu, 50), percentile(emu, 95)
        s50, s95 = percentile(shm, 50), percentile(shm, 95)
        print('%-38s %10.1f %10.1f' % ('emulator  ' + label, e50, e95))
        print('%-38s %10.1f %10.1f' % ('tmpfs     ' + label, s50, s95))
        print('%-38s %9.1fx %9.1fx' % ('ratio     ' + label, e50 / s50, e95 / s95))
    return 0


if __name__ == '__main__':
    sys.exit(main())
