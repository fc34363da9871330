"""The Debian packages built as a Debian buildd builds them, and installed
as a new machine installs them (issue 38): opt-in, minutes long, run with
``tox -e buildd`` (root; Debian's archive reachable), not by tools/test.sh.

* the source packages (tools/build.py: .dsc, orig and debian tarballs) are
  built in a bookworm chroot made by mmdebstrap from Debian's archive
  (variant buildd) holding only what ``apt-get build-dep`` installs from
  each one's Build-Depends, with the unit tests (no ``nocheck``); the
  manual pages must be help text, not a traceback (a Build-Depends missing
  ``python3-libvirt`` made ``ovs-rdt-agent.1`` one);
* each binary package is installed with apt in a new minimal chroot
  (variant minbase: no build tool, no Python library) and its commands
  run: its Depends are enough.  python3-ovs-rdt-nova cannot install on
  Debian 12 (nova 26; it needs Nova 34), and apt must say exactly that.

Times are printed (``-s``): mmdebstrap, the builds, the installs.
"""
from __future__ import annotations

import glob
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Iterator

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SUITE = 'bookworm'
MIRROR = os.environ.get('OVS_RDT_DEBIAN_MIRROR',
                        'http://deb.debian.org/debian')


def timed(what: str, *cmd: str, timeout: float = 1800
          ) -> subprocess.CompletedProcess:
    began = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True,
                         timeout=timeout)
    print('%s: %.0f s' % (what, time.monotonic() - began), flush=True)
    assert res.returncode == 0, '%s failed:\n%s' % (
        what, (res.stdout + res.stderr)[-4000:])
    return res


def mmdebstrap(variant: str, hooks: list[str], what: str
               ) -> subprocess.CompletedProcess:
    """A chroot of ``variant`` that runs ``hooks`` (customize hooks) and is
    then thrown away (format null).
    """
    args = ['mmdebstrap', '--mode=root', '--variant=%s' % variant,
            '--format=null', '--include=ca-certificates']
    for hook in hooks:
        args.append('--customize-hook=%s' % hook)
    return timed(what, *args, SUITE, '/dev/null', MIRROR)


@pytest.fixture(scope='module')
def sources() -> Iterator[str]:
    """The source packages tools/build.py makes, in a directory of their
    own (with the binary packages it built on this host, unused here).
    """
    if os.geteuid() != 0 or shutil.which('mmdebstrap') is None:
        pytest.fail('needs root and mmdebstrap (apt-get install mmdebstrap)',
                    pytrace=False)
    out = tempfile.mkdtemp(prefix='ovsrdt-buildd-')
    try:
        timed('tools/build.py (source packages)', sys.executable,
              os.path.join(REPO, 'tools', 'build.py'), '--outdir',
              os.path.join(out, 'host'), '--nocheck')
        yield out
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope='module')
def built(sources: str) -> str:
    """Both source packages built in one buildd chroot, ovs-rdt first (its
    chroot then holds nothing but its own Build-Depends): the .debs.
    """
    host = os.path.join(sources, 'host')
    dscs = sorted(glob.glob(os.path.join(host, '*.dsc')),
                  key=lambda p: not os.path.basename(p).startswith('ovs-rdt'))
    files = [p for p in glob.glob(os.path.join(host, '*'))
             if p.endswith(('.dsc', '.orig.tar.gz', '.debian.tar.xz'))]
    out = os.path.join(sources, 'buildd')
    os.makedirs(out)
    steps = []
    for dsc in dscs:
        name = os.path.basename(dsc)
        steps.append(
            'cd /build && rm -rf src && dpkg-source -x %s src && cd src && '
            'apt-get -y --no-install-recommends build-dep . >/build/%s.deps '
            '2>&1 && dpkg-buildpackage -us -uc -b >/build/%s.log 2>&1 || '
            '{ tail -n 60 /build/%s.deps /build/%s.log; exit 1; }'
            % (name, name, name, name, name))
    mmdebstrap('buildd', [
        # /proc read-write, as sbuild has it (the unit tests name threads).
        'mount -o remount,rw "$1/proc"',
        'mkdir -p "$1/build"',
        'copy-in %s /build' % ' '.join(files),
        'chroot "$1" sh -ec "%s"' % ' && '.join(
            s.replace('"', '\\"') for s in steps),
        'chroot "$1" sh -c "mkdir /build/out && mv /build/*.deb '
        '/build/*.log /build/out/"',
        'copy-out /build/out %s' % out,
    ], 'mmdebstrap buildd + build-dep + dpkg-buildpackage (both sources)')
    return os.path.join(out, 'out')


def test_manual_pages_are_help_text(built: str) -> None:
    deb = glob.glob(os.path.join(built, 'ovs-rdt_*_all.deb'))[0]
    tree = tempfile.mkdtemp(prefix='ovsrdt-buildd-deb-')
    try:
        subprocess.run(['dpkg-deb', '-x', deb, tree], check=True)
        for cmd in ('ovs-rdt', 'ovs-rdt-agent'):
            with gzip.open(os.path.join(tree, 'usr/share/man/man1/%s.1.gz'
                                        % cmd), 'rt') as fh:
                page = fh.read()
            assert 'Traceback' not in page and 'No module named' not in page
            assert '\\-\\-config\\-file' in page, page[:2000]
    finally:
        shutil.rmtree(tree)
    # The unit tests ran in the build (no nocheck).
    log = glob.glob(os.path.join(built, 'ovs-rdt_*.dsc.log'))[0]
    with open(log, encoding='utf-8', errors='replace') as fh:
        text = fh.read()
    assert ' passed' in text and 'tests/unit' in text, text[-3000:]


def test_each_package_installs_and_runs_alone(built: str) -> None:
    debs = {os.path.basename(p).split('_')[0]: p
            for p in glob.glob(os.path.join(built, '*.deb'))}
    assert set(debs) == {'ovs-rdt', 'python3-ovs-rdt', 'python3-ovs-rdt-nova',
                         'ovs-rdt-emulator', 'python3-mfusepy'}, debs
    node = ' '.join('/debs/' + os.path.basename(debs[n]) for n in (
        'python3-ovs-rdt', 'ovs-rdt', 'ovs-rdt-emulator', 'python3-mfusepy'))
    checks = ' && '.join([
        'ovs-rdt --version', 'ovs-rdt --help >/dev/null',
        'ovs-rdt-agent --help >/dev/null', 'ovs-rdt-hook 2>&1 | grep -q usage',
        'ovs-rdt emulate --help >/dev/null',
        'python3 -c "import ovs_rdt.emulator.fs, libvirt_hooks.hook, '
        'ovs_rdt.agent.service"',
        'test -L /etc/libvirt/hooks/qemu.d/50-ovs-rdt',
        'test -f /etc/ovs-rdt/ovs-rdt.conf',
    ])
    nova = '/debs/' + os.path.basename(debs['python3-ovs-rdt-nova'])
    res = mmdebstrap('minbase', [
        'mkdir -p "$1/debs"',
        'copy-in %s /debs' % ' '.join(debs.values()),
        'chroot "$1" sh -ec "apt-get -y --no-install-recommends install '
        '%s >/debs/install.log 2>&1 || { tail -n 40 /debs/install.log; '
        'exit 1; }"' % node,
        'chroot "$1" sh -ec \'%s\'' % checks.replace("'", "'\\''"),
        # Nova 34 is not in Debian 12: apt refuses, naming the version.
        'chroot "$1" sh -c "apt-get -y -s install %s; true"' % nova,
    ], 'mmdebstrap minbase + apt-get install (node, emulator) + checks')
    out = res.stdout + res.stderr
    assert 'python3-nova (>= 2:34.0.0~)' in out and \
        '2:26' in out, out[-3000:]
