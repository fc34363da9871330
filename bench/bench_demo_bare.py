"""tools/demo.sh on a bare machine: how long from a fresh clone to the
demo's end, its installs included (issue 38: about a minute).

    python3 bench/bench_demo_bare.py [--keep-chroot DIR]

A bare Debian 12 is made with mmdebstrap from Debian's archive (variant
minbase, plus python3, git and ca-certificates: a clone needs git, and
Debian's cloud images have python3), with device nodes for KVM and FUSE,
the host's /sys and a read-write /proc; a clone of this tree goes in, and
``tools/demo.sh`` runs there, timed: its apt-get of bindep.txt's "demo"
profile from Debian's archive, the .venv (Debian's builds of the
requirements, mfusepy from PyPI), then ``ovs-rdt demo``.  Printed: the
packages it installed, the time of each part, and the total against the
one-minute goal.  Root; minutes (mmdebstrap itself is not counted).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOAL = 60.0
MIRROR = os.environ.get('OVS_RDT_DEBIAN_MIRROR',
                        'http://deb.debian.org/debian')
#: Inside the chroot: the demo timed, its parts from setup.sh's own lines.
RUN = r'''
set -e
cd /root/ovs-rdt
began=$(date +%s.%N)
bash tools/demo.sh > /root/demo.log 2>&1 || { tail -n 40 /root/demo.log; exit 1; }
ended=$(date +%s.%N)
echo "demo.sh total: $(echo "$ended - $began" | bc) s"
grep -E '^== ' /root/demo.log
grep -E 'ok \(' /root/demo.log | sed 's/^/  /'
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--keep-chroot', metavar='DIR',
                        help='make the chroot there and keep it')
    args = parser.parse_args()
    if os.geteuid() != 0 or shutil.which('mmdebstrap') is None:
        print('bench_demo_bare: needs root and mmdebstrap (apt-get install '
              'mmdebstrap)', file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix='ovsrdt-bare-')
    try:
        clone = os.path.join(work, 'ovs-rdt')
        subprocess.run(['git', 'clone', '-q', '--no-hardlinks', REPO, clone],
                       check=True)
        script = os.path.join(work, 'run.sh')
        with open(script, 'w') as fh:
            fh.write(RUN)
        hooks = [
            # KVM and FUSE as device nodes of its own (what setup.sh does
            # to /dev/kvm stays in the chroot), the host's /sys and a
            # writable /proc, as a machine has them.
            'mknod -m 600 "$1/dev/kvm" c 10 232',
            'mknod -m 666 "$1/dev/fuse" c 10 229',
            'mount -o remount,rw "$1/proc"',
            'mkdir -p "$1/root"',
            'copy-in %s %s /root' % (clone, script),
            # One hook: /sys is unmounted again whatever the demo did.
            'mount --rbind /sys "$1/sys" && { chroot "$1" sh /root/run.sh; '
            'rc=$?; umount -R -l "$1/sys"; exit $rc; }',
        ]
        target = args.keep_chroot or '/dev/null'
        cmd = ['mmdebstrap', '--mode=root', '--variant=minbase',
               '--include=python3,git,ca-certificates,bc',
               '--format=%s' % ('directory' if args.keep_chroot else 'null')]
        cmd += ['--customize-hook=%s' % h for h in hooks]
        began = time.monotonic()
        res = subprocess.run(cmd + ['bookworm', target, MIRROR],
                             capture_output=True, text=True)
        print(res.stdout.strip())
        if res.returncode != 0:
            print(res.stderr[-3000:], file=sys.stderr)
            return 1
        total = [float(line.split()[2]) for line in res.stdout.splitlines()
                 if line.startswith('demo.sh total:')][0]
        print('mmdebstrap and the demo: %.0f s; demo.sh: %.0f s, %.2fx the '
              'one-minute goal' % (time.monotonic() - began, total,
                                   total / GOAL))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
