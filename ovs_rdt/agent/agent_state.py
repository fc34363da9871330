"""What a running agent tells ``ovs-rdt status``: the configuration it runs
and how its OvS side fares.

The agent replaces ``/run/ovs-rdt/agent-<tag>.json`` (one per resctrl
root, beside its lock) when it starts, at every SIGHUP and whenever its
OvS status (``Open_vSwitch external_ids:rdt-status``) changes, and removes
it when it exits.  ``ovs-rdt status`` reads it back, and compares the
files the agent read with those files now (:func:`outdated`: the same
rule the agent's own log and ``ovs_rdt_config_outdated`` follow).
:data:`VERSION` changes when a field changes meaning or goes.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from ovs_rdt import atomicfile, conf, procfs
from ovs_rdt.exceptions import ConfigError, RDTError
from ovs_rdt.runfiles import RUN_DIR, ensure_dir, read_live, run_path

LOG = logging.getLogger(__name__)
VERSION = 1


@dataclass(frozen=True)
class AgentState:
    pid: int
    #: The ``--config-file`` and ``--config-dir`` it runs with (after
    #: ``$OVS_RDT_CONF``): which files "the files" are.
    config_files: list[str]
    config_dirs: list[str]
    #: Each file it read -> its digest (:attr:`ovs_rdt.conf.Settings.digests`).
    read: dict[str, Any]
    #: When it read them (time.time()).
    loaded: float
    #: Why the last SIGHUP kept the configuration it had (None: it took it).
    reload_error: str | None = None
    #: Its Open_vSwitch external_ids:rdt-status (``ok: ...``/``error: ...``).
    ovs_status: str | None = None
    version: int = field(default=VERSION)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def state_path(root: str, run_dir: str = RUN_DIR) -> str:
    return run_path(root, 'agent-{tag}.json', run_dir)


def publish(path: str, state: AgentState) -> None:
    """Replace the state file (a failure is logged, never raised)."""
    try:
        ensure_dir(os.path.dirname(path))
        atomicfile.write(path, json.dumps(state.to_dict()), 0o600)
    except (OSError, RDTError) as exc:
        LOG.warning('cannot write %s ("ovs-rdt status" cannot tell what this '
                    'agent runs): %s', path, exc)


def withdraw(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def read(root: str, run_dir: str = RUN_DIR, proc: str = procfs.PROC
         ) -> AgentState | None:
    """The state of the agent running for ``root`` (None: none runs, or
    it publishes none); ConfigError when this user may not read it.
    """
    data = read_live(state_path(root, run_dir), ConfigError, proc)
    if data is None or data.get('version') != VERSION:
        return None
    try:
        return AgentState(**{f.name: data[f.name]
                             for f in dataclasses.fields(AgentState)
                             if f.name in data})
    except TypeError:
        return None


def systemd() -> bool:
    """Whether systemd runs this node (``sd_booted(3)``'s test)."""
    return os.path.isdir('/run/systemd/system')


def reload_hint(pid: int) -> str:
    """How to have the agent ``pid`` read its files again (SIGHUP)."""
    if systemd():
        return 'systemctl reload ovs-rdt-agent (or kill -HUP %d)' % pid
    return 'kill -HUP %d' % pid


def differs(state: AgentState, digests: dict[str, str | None]) -> list[str]:
    """How the files a command read (``digests``:
    :attr:`ovs_rdt.conf.Settings.digests`) differ from those the agent
    runs, one phrase each; empty when they are the same files, as read.
    """
    if list(state.read) != list(digests):
        return ['it read %s; this command read %s' % (
            ', '.join(state.read) or 'no file',
            ', '.join(digests) or 'no file')]
    return conf.changes(state.read, digests)


def other_than(root: str, digests: dict[str, str | None]) -> str:
    """Why ``ovs-rdt apply`` of the files read (``digests``) would not
    hold: the agent running for ``root`` runs other files, or these as
    they were, and writes its pools back over any other ('' if none
    runs, or it runs these).
    """
    state = read(root)
    changed = differs(state, digests) if state is not None else []
    if state is None or not changed:
        return ''
    return ('ovs-rdt-agent (pid %d) keeps this resctrl root\'s pools as the '
            'configuration it read at %s (%s)%s, and writes them back over '
            'any other: to apply the files, reload it: %s'
            % (state.pid, when(state.loaded), '; '.join(changed),
               '; its last reload was rejected: %s' % state.reload_error
               if state.reload_error else '', reload_hint(state.pid)))


def when(stamp: float) -> str:
    return time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(stamp))


def outdated(state: AgentState) -> list[str]:
    """How the agent's configuration files differ now from what it read
    (:func:`ovs_rdt.conf.changes`); empty when it runs them as they are.
    """
    try:
        paths = conf.config_paths(state.config_files, state.config_dirs)
    except ConfigError as exc:
        return [str(exc)]
    return conf.changes(state.read, conf.fingerprint(paths))
