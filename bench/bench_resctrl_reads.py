"""What the hook's reads cost through the FUSE emulator vs plain files.

Reads the platform and every group (what a hook ``prepare`` reads) from a
mounted emulator and from a plain-file copy of the same tree, p50 of 50.
The difference is the emulator's FUSE round trips, which a real kernel's
resctrl (in-kernel files) does not pay.

    python3 bench/bench_resctrl_reads.py
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from ovs_rdt.emulator.profiles import DEFAULT_PROFILE  # noqa: E402
from ovs_rdt.resctrl import Resctrl  # noqa: E402
from ovs_rdt.sandbox.emulator import copy_tree, MountedEmulator  # noqa: E402


def p50(root: str, sysfs: str, runs: int = 50) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        rc = Resctrl(root, sysfs)
        rc.platform()
        rc.groups()
        times.append(time.perf_counter() - began)
    return sorted(times)[runs // 2] * 1e3


def main() -> int:
    tmp = tempfile.mkdtemp(prefix='ovsrdt-bench-reads-')
    emu = MountedEmulator(os.path.join(tmp, 'emu'), DEFAULT_PROFILE).start()
    mnt, sysfs, copy = emu.root, emu.sysfs, os.path.join(tmp, 'copy')
    try:
        for name in ('ovsrdt-pool-hp', 'ovsrdt-pool-noisy', 'ovsrdt-vm-x'):
            os.mkdir(os.path.join(mnt, name))
        copy_tree(mnt, copy)
        fuse = p50(mnt, sysfs)
        plain = p50(copy, sysfs)
    finally:
        emu.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print('platform() + groups() (4 groups), p50 of 50')
    print('  through the FUSE emulator : %6.2f ms' % fuse)
    print('  same tree as plain files  : %6.2f ms' % plain)
    print('  ratio emulator/plain      : %6.1fx' % (fuse / plain))
    return 0


if __name__ == '__main__':
    sys.exit(main())
