"""tools/demo.sh on a bare machine: how long from a fresh clone to the
demo's end, its installs included (issue 38: about a minute).

    python3 bench/bench_demo_bare.py [--ref COMMIT] [--keep-chroot DIR]

A bare Debian 12 is made with mmdebstrap from Debian's archive (variant
minbase, plus python3, git and ca-certificates: a clone needs git, and
Debian's cloud images have python3), with device nodes for KVM and FUSE,
the host's /sys, a read-write /proc, and what a new machine of this kind
has besides Debian (its local CA certificates and /etc/pip.conf); a clone of this tree goes in, and
``tools/demo.sh`` runs there, timed: its apt-get of bindep.txt's "demo"
profile from Debian's archive, the .venv (Debian's builds of the
requirements, mfusepy from PyPI), then ``ovs-rdt demo``.  Printed: the
packages it installed, the time of each part, and the total against the
one-minute goal.  Root; minutes (mmdebstrap itself is not counted).
"""
from __future__ import annotations

import argparse
import glob
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
#: The machine's /dev: a mount of its own (libvirt's QEMU namespace wants
#: one) with the nodes a machine has, KVM and FUSE among them (what setup.sh
#: does to /dev/kvm stays there).
DEV = '; '.join(
    ['mount -t tmpfs -o mode=755 dev "$1/dev"',
     'mkdir "$1/dev/pts" "$1/dev/shm" "$1/dev/net"',
     'mount -t devpts -o newinstance,ptmxmode=666 devpts "$1/dev/pts"',
     'mount -t tmpfs shm "$1/dev/shm"', 'ln -s pts/ptmx "$1/dev/ptmx"'] +
    ['mknod -m %s "$1/dev/%s" c %s' % node for node in (
        ('666', 'null', '1 3'), ('666', 'zero', '1 5'), ('666', 'full', '1 7'),
        ('666', 'random', '1 8'), ('666', 'urandom', '1 9'),
        ('666', 'tty', '5 0'), ('600', 'kvm', '10 232'),
        ('666', 'fuse', '10 229'), ('666', 'net/tun', '10 200'))])
#: Inside the chroot: the demo timed, its parts from setup.sh's own lines.
RUN = r'''
set -e
cd /root/ovs-rdt
began=$(date +%s.%N)
bash tools/demo.sh > /root/demo.log 2>&1 || { tail -n 40 /root/demo.log; exit 1; }
ended=$(date +%s.%N)
echo "demo.sh total: $(echo "$ended - $began" | bc) s"
cat /root/demo.log
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--ref', default='HEAD',
                        help='the commit to clone (default HEAD; an older '
                        'one for the baseline)')
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
        sha = subprocess.run(['git', 'rev-parse', args.ref], cwd=REPO,
                             capture_output=True, text=True,
                             check=True).stdout.strip()
        subprocess.run(['git', 'checkout', '-q', sha], cwd=clone, check=True)
        script = os.path.join(work, 'run.sh')
        with open(script, 'w') as fh:
            fh.write(RUN)
        hooks = [
            # A writable /proc, as a machine has it.
            'mount -o remount,rw "$1/proc"',
            'mkdir -p "$1/root"',
            'copy-in %s %s /root' % (clone, script),
        ]
        # What a new machine of this kind has besides Debian: the local CA
        # certificates and pip configuration its network needs.
        local_cas = sorted(glob.glob('/usr/local/share/ca-certificates/*'))
        if local_cas:
            hooks += ['mkdir -p "$1/usr/local/share/ca-certificates"',
                      'copy-in %s /usr/local/share/ca-certificates'
                      % ' '.join(local_cas),
                      'chroot "$1" update-ca-certificates >/dev/null']
        if os.path.exists('/etc/pip.conf'):
            hooks.append('copy-in /etc/pip.conf /etc')
        hooks += [
            # In a mount namespace of its own (gone with the demo, whatever
            # it did) whose root is the bare machine's, as a machine's is
            # (pivot_root, not chroot: the demo's private libvirtd and
            # what it runs in its namespace see the same /), with the
            # host's /sys.
            'unshare --mount --propagation private sh -ec \''
            'mount --rbind /sys "$1/sys"; %s; mount --rbind "$1" "$1"; '
            'cd "$1"; mkdir -p .oldroot; pivot_root . .oldroot; '
            'umount -l /.oldroot; rmdir /.oldroot; '
            'exec /bin/sh /root/run.sh\' - "$1"' % DEV,
        ]
        target = args.keep_chroot or '/dev/null'
        cmd = ['mmdebstrap', '--mode=root', '--variant=minbase',
               '--include=python3,git,ca-certificates,bc',
               '--format=%s' % ('directory' if args.keep_chroot else 'null')]
        cmd += ['--customize-hook=%s' % h for h in hooks]
        began = time.monotonic()
        res = subprocess.run(cmd + ['bookworm', target, MIRROR],
                             capture_output=True, text=True)
        # (mmdebstrap passes the hooks' output on on its standard error.)
        out = res.stdout + res.stderr
        if res.returncode != 0:
            print(out[-4000:], file=sys.stderr)
            return 1
        for line in out.splitlines():
            if line.startswith(('demo.sh total', '== ', 'Demo set up',
                                'Torn down')):
                print(line[:160])
        total = [float(line.split()[2]) for line in out.splitlines()
                 if line.startswith('demo.sh total:')][0]
        print('mmdebstrap and the demo: %.0f s; demo.sh: %.0f s, %.2fx the '
              'one-minute goal' % (time.monotonic() - began, total,
                                   total / GOAL))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
