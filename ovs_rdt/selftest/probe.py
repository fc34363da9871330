"""The C probe (``probe.c``): built for each run, driven over a pipe.

ovs-rdt is an ``Architecture: all`` Python package; rather than ship a
binary per architecture, the selftest compiles the probe's ~200 lines with
the system's C compiler (``$CC``, else ``cc``) into a temporary directory
of its own (``$TMPDIR``), removed after the run, and runs it through the
descriptor it opened (never a file someone may have put in its place).
"""
from __future__ import annotations

from contextlib import contextmanager
import logging
import os
import shutil
import subprocess
import tempfile
from typing import Iterator

from ovs_rdt.exceptions import ProbeUnavailable

LOG = logging.getLogger(__name__)

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'probe.c')
CFLAGS = ('-O2', '-std=gnu99', '-Wall')
TIMEOUT = 120.0


@contextmanager
def built() -> Iterator[int]:
    """An open descriptor of the probe, compiled now (for :class:`Probe`)."""
    cc = shutil.which(os.environ.get('CC') or 'cc')
    if cc is None:
        raise ProbeUnavailable('no C compiler to build the probe (%s): install one '
                               '(apt-get install gcc) or set CC'
                               % (os.environ.get('CC') or 'cc'))
    try:
        where = tempfile.mkdtemp(prefix='ovsrdt-probe-')
    except OSError as exc:
        raise ProbeUnavailable('no directory to build the probe in: %s' % exc) from None
    try:
        fd = _compile(cc, os.path.join(where, 'ovsrdt-probe'))
        try:
            yield fd
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _compile(cc: str, path: str) -> int:
    try:
        proc = subprocess.run([cc, *CFLAGS, '-o', path, SOURCE], capture_output=True,
                              text=True, timeout=TIMEOUT, check=False)
        if proc.returncode != 0:
            raise ProbeUnavailable('%s could not build %s: %s' % (
                cc, SOURCE, (proc.stderr.strip().splitlines() or ['?'])[-1]))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeUnavailable('%s could not build %s: %s' % (cc, SOURCE, exc)) from None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise ProbeUnavailable('%s is not the probe just built (owner %d, mode %o)'
                               % (path, st.st_uid, st.st_mode))
    LOG.debug('Built the selftest probe %s with %s', path, cc)
    return fd


class Probe:
    """One running probe process (``chase`` or ``stream``)."""

    def __init__(self, binary: int, mode: str, cpu: int, nbytes: int) -> None:
        """``binary``: a descriptor from :func:`built`."""
        self.mode = mode
        try:
            self.proc = subprocess.Popen(
                ['/proc/self/fd/%d' % binary, mode, str(cpu), str(nbytes)],
                pass_fds=(binary,), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True, bufsize=1)
        except OSError as exc:
            raise ProbeUnavailable('cannot run the probe: %s (is %s mounted noexec? '
                                   'set TMPDIR)' % (exc, tempfile.gettempdir())) from None
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
