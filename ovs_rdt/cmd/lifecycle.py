"""What ``ovs-rdt demo`` and ``ovs-rdt sandbox`` share: real parts started
under one guard, left running, found again and torn down.

Both start a :class:`ovs_rdt.sandbox.Sandbox`, which records every part in
``<workdir>/state.json`` as it starts it.  :func:`guarded` runs the start:
an error (one line, never a traceback) or an interrupt (Ctrl-C, SIGTERM)
tears down whatever had started.  What ``demo --keep`` or ``sandbox start``
left running is ended from that file alone by :func:`teardown`, from
another process.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import sys
import time
from typing import Any, Callable, Sequence

from ovs_rdt.exceptions import RDTError
from ovs_rdt import install_advice

#: What each part runs: (command, the Debian package that has it).
TOOLS = {
    'emulator': (('fusermount3', 'fuse3'),),
    'ovs': (('ovs-vswitchd', 'openvswitch-switch'),
            ('ovsdb-server', 'openvswitch-switch')),
    'libvirt': (('libvirtd', 'libvirt-daemon-system'),
                ('virsh', 'libvirt-clients'),
                ('qemu-system-x86_64', 'qemu-system-x86')),
}

#: The signals that asked the run to end (SIGINT, SIGTERM).
INTERRUPTED: list[int] = []


def raise_interrupt(signum: int, frame: Any) -> None:
    INTERRUPTED.append(signum)
    raise KeyboardInterrupt


class Progress:
    """``[n/total] text ... ok (1.2 s)`` lines, one per step."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.n = 0
        self.start = time.monotonic()

    def step(self, text: str, fn: Callable[[], Any]) -> Any:
        self.n += 1
        print('[%d/%d] %s ...' % (self.n, self.total, text), end=' ',
              flush=True)
        began = time.monotonic()
        try:
            result = fn()
            if INTERRUPTED:
                # A Ctrl-C that something on the way caught (``top`` ends
                # quietly on one) still ends the run.
                raise KeyboardInterrupt
        except BaseException:
            print('FAILED', flush=True)
            raise
        print('ok (%.1f s)' % (time.monotonic() - began), flush=True)
        return result


def say(text: str, stream: Any) -> None:
    """Print, unless the reader went away (``ovs-rdt demo | head``): the
    teardown that follows must run all the same.
    """
    try:
        print(text, file=stream, flush=True)
    except OSError:
        pass


def one_line(exc: BaseException) -> str:
    if isinstance(exc, (RDTError, OSError)):
        if isinstance(exc, OSError) and exc.filename:
            return '%s: %s' % (exc.strerror or exc, exc.filename)
        return str(exc)
    return 'internal error: %s: %s (please report it)' % (
        type(exc).__name__, exc)


def command_path(name: str = 'ovs-rdt') -> str:
    """How to call ``name`` (a console script of this installation): bare
    when it is the one on PATH, else its path.
    """
    here = os.path.join(os.path.dirname(sys.executable), name)
    on_path = shutil.which(name)
    if on_path and os.path.realpath(on_path) == os.path.realpath(here):
        return name
    return here if os.path.exists(here) else name


def importable(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def missing(parts: Sequence[str]) -> list[str]:
    """What this machine lacks to run ``parts`` (keys of :data:`TOOLS`),
    one line each naming the fix.
    """
    out = []
    if 'emulator' in parts:
        if not os.path.exists('/dev/fuse'):
            out.append('/dev/fuse is missing: load the fuse module '
                       '(modprobe fuse)')
        lacking = [m for m in ('ovs_rdt.emulator', 'mfusepy')
                   if not importable(m)]
        if lacking:
            out.append('the resctrl emulator needs %s: %s' % (
                ' and '.join(lacking), install_advice.emulator()))
    for part in parts:
        for cmd, pkg in TOOLS[part]:
            if shutil.which(cmd) is None:
                out.append('%s not found: apt-get install %s' % (cmd, pkg))
    return out


def set_up(workdir: str) -> bool:
    """Whether ``workdir`` holds parts left running (its state file)."""
    return os.path.exists(os.path.join(workdir, 'state.json'))


def guarded(box: Any, prog: str, job: Callable[[], None]) -> int | None:
    """Run ``job``; on an error or an interrupt, tear ``box`` down and
    return the exit status (1, 130); None when ``job`` ran to its end.
    """
    signal.signal(signal.SIGTERM, raise_interrupt)
    # Also when started with SIGINT ignored (a background job of a script
    # without job control: Python then leaves it ignored), so that an
    # interrupt still tears everything down.
    signal.signal(signal.SIGINT, raise_interrupt)
    try:
        job()
    except KeyboardInterrupt:
        say('\ninterrupted: tearing down', sys.stderr)
        teardown(box, prog)
        return 130
    except Exception as exc:  # one line, never a traceback; then clean up
        say('%s: error: %s\ntearing down' % (prog, one_line(exc)),
            sys.stderr)
        teardown(box, prog)
        return 1
    return None


def teardown(box: Any, prog: str) -> int:
    """End everything ``box`` recorded; 0, or 1 with a line per problem."""
    began = time.monotonic()
    problems = box.teardown()
    for line in problems:
        say('%s: teardown: %s' % (prog, line), sys.stderr)
    say('Torn down in %.1f s%s.' % (
        time.monotonic() - began, ' with problems' if problems else ''),
        sys.stdout)
    return 1 if problems else 0
