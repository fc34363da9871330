"""The C probe (``probe.c``): built on first use, driven over a pipe.

ovs-rdt is an ``Architecture: all`` Python package; rather than ship a
binary per architecture, the selftest compiles the probe's ~200 lines with
the system's C compiler (``$CC``, else ``cc``) the first time it needs it,
into ``$XDG_CACHE_HOME/ovs-rdt`` (``~/.cache/ovs-rdt``), named after a
hash of the source and the compiler, so that an upgrade builds it again.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile

from ovs_rdt.exceptions import ProbeUnavailable

LOG = logging.getLogger(__name__)

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'probe.c')
CFLAGS = ('-O2', '-std=gnu99', '-Wall')
TIMEOUT = 120.0


def cache_dir() -> str:
    base = os.environ.get('XDG_CACHE_HOME') or os.path.join(
        os.path.expanduser('~'), '.cache')
    return os.path.join(base, 'ovs-rdt')


def build() -> str:
    """The probe's path, compiled now if this source was never built."""
    cc = shutil.which(os.environ.get('CC') or 'cc')
    if cc is None:
        raise ProbeUnavailable('no C compiler to build the probe (%s): install one '
                               '(apt-get install gcc) or set CC'
                               % (os.environ.get('CC') or 'cc'))
    with open(SOURCE, 'rb') as fh:
        digest = hashlib.sha256(fh.read() + os.path.realpath(cc).encode()
                                + ' '.join(CFLAGS).encode()).hexdigest()[:16]
    where = cache_dir()
    path = os.path.join(where, 'ovsrdt-probe-' + digest)
    if os.access(path, os.X_OK):
        return path
    os.makedirs(where, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix='.ovsrdt-probe-', dir=where)
    os.close(fd)
    try:
        proc = subprocess.run([cc, *CFLAGS, '-o', tmp, SOURCE], capture_output=True,
                              text=True, timeout=TIMEOUT, check=False)
        if proc.returncode != 0:
            raise ProbeUnavailable('%s could not build %s: %s' % (
                cc, SOURCE, (proc.stderr.strip().splitlines() or ['?'])[-1]))
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    LOG.info('Built the selftest probe %s with %s', path, cc)
    return path


class Probe:
    """One running probe process (``chase`` or ``stream``)."""

    def __init__(self, binary: str, mode: str, cpu: int, nbytes: int) -> None:
        self.mode = mode
        self.proc = subprocess.Popen([binary, mode, str(cpu), str(nbytes)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.expect('ready')

    @property
    def pid(self) -> int:
        return self.proc.pid

    def expect(self, word: str) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith(word):
            self.stop()
            raise ProbeUnavailable('the probe (%s) said %r, expected %r (exit status %s)'
                                   % (self.mode, line.strip(), word, self.proc.poll()))
        return line

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + '\n')
        self.proc.stdin.flush()

    def init(self) -> None:
        self.send('init')
        self.expect('ok')

    def measure(self, seconds: float) -> float:
        """Nanoseconds per access over ``seconds`` of walking."""
        self.send('measure %g' % seconds)
        return float(self.expect('ns').split()[1])

    def go(self) -> None:
        self.send('go')

    def stop(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
