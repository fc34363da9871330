"""Starting and stopping real daemons: bounded waits, one-line errors."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

from ovs_rdt.exceptions import RDTError
from ovs_rdt import procfs


class SandboxError(RDTError):
    """A real part could not be started or stopped."""


def run(*cmd: str, check: bool = True, timeout: float = 60,
        env: dict[str, str] | None = None,
        stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run a command; SandboxError (one line) when it fails or hangs."""
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True,
                              timeout=timeout, env=env, input=stdin)
    except subprocess.TimeoutExpired:
        raise SandboxError('%s did not finish within %.0f s'
                           % (' '.join(cmd[:3]), timeout)) from None
    except OSError as exc:
        raise SandboxError('%s: %s' % (cmd[0], exc.strerror or exc)) from None
    if check and proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise SandboxError('%s failed: %s' % (' '.join(cmd[:3]),
                                              msg[-1] if msg else
                                              'exit %d' % proc.returncode))
    return proc


def wait_for(predicate: Any, timeout: float = 10.0, what: str = 'condition',
             step: float = 0.05, error: type[Exception] = SandboxError) -> Any:
    """Poll ``predicate()`` until it returns something true; that value.

    One overall deadline; ``error`` is raised when it passes (the test
    fixtures use AssertionError).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error('timed out after %ss waiting for %s' % (timeout, what))
        time.sleep(step)


def pid_alive(pid: int | None) -> bool:
    """True while ``pid`` runs (:func:`ovs_rdt.procfs.alive`: a zombie
    counts as exited).
    """
    return procfs.alive(pid)


def wait_exit(pid: int | None, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``pid`` to exit; whether it did."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def kill_after(pid: int | None, timeout: float) -> bool:
    """SIGKILL ``pid`` unless it exits within ``timeout`` seconds; whether
    it had to be killed.
    """
    if not pid or wait_exit(pid, timeout):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def stop_pid(pid: int | None, timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds."""
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    kill_after(pid, timeout)
