"""What a behaviour must leave as it was: every file of every group but
the selftest's own, monitor groups included, and the node's settings.

:func:`snapshot` reads them before a behaviour, :func:`changes` compares a
second reading after it.  Compared: each control group's ``mode``,
``schemata``, ``cpus``, ``cpus_list`` (and ``mba_MBps_event``,
``mbm_L3_assignments`` where the kernel has them), each monitor group's
``cpus``, ``cpus_list`` (and ``mbm_L3_assignments``), the writable files of
``info/`` (``max_threshold_occupancy``, ``mbm_assign_mode``, io_alloc's ...),
and who is in whose ``tasks``: a thread that was in another group (or in
none but the default group) before the behaviour and is elsewhere after.
Threads born meanwhile, and those that ended, are no change: another
group's tasks may start threads and end.  The default group's ``tasks``
(every other thread of the node) is never read.  A group (or monitor
group) that came or went is a change too.  :func:`watch` looks for a
change while the selftest does nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import os
import time
from typing import TYPE_CHECKING

from ovs_rdt import SELFTEST_GROUP_PREFIX, procfs

if TYPE_CHECKING:
    from ovs_rdt.selftest.node import Node

#: Files compared in a control group and in a monitor group, when present.
CTRL_FILES = ('mode', 'schemata', 'cpus', 'cpus_list', 'mba_MBps_event',
              'mbm_L3_assignments')
MON_FILES = ('cpus', 'cpus_list', 'mbm_L3_assignments')
#: Files readable only in mbm_event mode (else EINVAL and a last_cmd_status
#: line, which would clobber what a behaviour checks).
COUNTER_MODE_ONLY = ('mbm_assign_on_mkdir', 'event_configs', 'mbm_L3_assignments')


@dataclass
class Snapshot:
    #: when it was taken, in clock ticks since boot (as /proc's start times)
    tick: int
    #: group (or monitor group) path -> {file: text}
    files: dict[str, dict[str, str]] = field(default_factory=dict)
    #: group path -> TIDs in its tasks (not the default group's)
    tasks: dict[str, set[int]] = field(default_factory=dict)


def _read(node: 'Node', rel: str, names: tuple[str, ...], have: set[str]
          ) -> dict[str, str]:
    out = {}
    for name in names:
        if name in have:
            try:
                out[name] = node.read(os.path.join(rel, name))
            except OSError as exc:     # compared too: a file that stops reading
                out[name] = 'unreadable: %s' % exc.strerror
    return out


def _settings(node: 'Node', counters: bool) -> dict[str, str]:
    """The writable files of ``info/`` that may be read without side effect."""
    out = {}
    for base, dirs, files in os.walk(node.path('info')):
        rel = os.path.relpath(base, node.root)
        if not counters:
            dirs[:] = [d for d in dirs if d not in COUNTER_MODE_ONLY]
        for name in files:
            path = os.path.join(rel, name)
            if not os.stat(node.path(path)).st_mode & 0o200 or \
                    (name in COUNTER_MODE_ONLY and not counters):
                continue
            if name == 'io_alloc_cbm' and node.read(
                    os.path.join(rel, 'io_alloc')).strip() != 'enabled':
                continue
            out[path] = _read(node, rel, (name,), {name})[name]
    return out


def snapshot(node: 'Node') -> Snapshot:
    snap = Snapshot(procfs.boot_ticks())
    counters = node.exists('info/L3_MON/mbm_assign_mode') and \
        '[mbm_event]' in node.read('info/L3_MON/mbm_assign_mode')
    skip = set() if counters else set(COUNTER_MODE_ONLY)
    snap.files['info'] = _settings(node, counters)
    for name in node.groups():
        if name.startswith(SELFTEST_GROUP_PREFIX):
            continue
        try:
            have = set(node.listdir(name)) - skip
            snap.files[name] = _read(node, name, CTRL_FILES, have)
            if name:
                snap.tasks[name] = node.tids(name)
            for mon in node.listdir(os.path.join(name, 'mon_groups')):
                rel = os.path.join(name, 'mon_groups', mon)
                snap.files[rel] = _read(node, rel, MON_FILES,
                                        set(node.listdir(rel)) - skip)
                snap.tasks[rel] = node.tids(rel)
        except (FileNotFoundError, NotADirectoryError):
            continue        # removed by its owner meanwhile
    return snap


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """What differs, one entry a group: ``COS1 (schemata, tasks)``,
    ``COS2 (new)``, ``COS3 (gone)``.
    """
    out = []
    for rel in list(after.files) + [r for r in before.files if r not in after.files]:
        old, files = before.files.get(rel), after.files.get(rel)
        if old is None or files is None:
            what = ['new' if old is None else 'gone']
        else:
            what = [name for name in files if old.get(name, files[name]) != files[name]]
        if rel in after.tasks and rel in before.tasks:
            moved = before.tasks[rel] ^ after.tasks[rel]
            # a thread born before the first reading that is still there
            if any((procfs.started(t) or before.tick) < before.tick for t in moved):
                what.append('tasks')
        if what:
            out.append('%s (%s)' % ({'': 'the default group', 'info': 'the settings in info/'}
                                    .get(rel, rel), ', '.join(what)))
    return out


def watch(node: 'Node', start: Snapshot, seconds: float, step: float = 0.1) -> list[str]:
    """What changes from ``start`` within ``seconds`` while the selftest
    does nothing (read every ``step``, so that a change undone within the
    time is seen too): another writer's.
    """
    end = time.monotonic() + seconds
    while True:
        time.sleep(max(0.0, min(step, end - time.monotonic())))
        seen = changes(start, snapshot(node))
        if seen or time.monotonic() >= end:
            return seen
