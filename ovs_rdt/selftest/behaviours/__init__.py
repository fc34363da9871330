"""Every kernel behaviour ovs-rdt relies on: one description each.

``ovs-rdt selftest`` runs them on a node; the emulator's conformance tests
(``tests/functional/test_emulator_conformance.py``) run the very same ones
against the emulator on every profile and mount option.  The expected
errnos and ``info/last_cmd_status`` texts are the kernel's
(``fs/resctrl/rdtgroup.c``, ``fs/resctrl/ctrlmondata.c``,
``fs/resctrl/monitor.c``, kernfs), held here, not taken from the emulator
(which is what they check there).

A check gets a :class:`~ovs_rdt.selftest.node.Node` (reads anywhere, writes
only in its own ``ovsrdt-selftest-*`` groups) and the mount's
:class:`~ovs_rdt.selftest.geometry.Geometry`; it returns one line saying
what it saw, or raises ``Mismatch`` (the behaviour differs) or ``Skip``.
It never writes the default group or another tool's, nor a node-wide
setting (``info/*`` files): what needs that stays in the emulator's own
tests.  The runner removes its groups and ends its tasks after each.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ovs_rdt.selftest.behaviours import bandwidth, masks, monitoring, tasks, tree
from ovs_rdt.selftest.geometry import Geometry
from ovs_rdt.selftest.node import Node

#: ``check(node, geometry)`` -> what it saw (or Mismatch / Skip).
Check = Callable[[Node, Geometry], str]


@dataclass(frozen=True)
class Behaviour:
    name: str
    summary: str
    check: Check
    #: What the node must have (geometry.NEEDS), else the behaviour is skipped.
    needs: tuple[str, ...] = ()


BEHAVIOURS: list[Behaviour] = [
    Behaviour('info', 'info/ files parse; ovs-rdt reads them alike', tree.check_info),
    Behaviour('tree', 'group and monitor group files', tree.check_tree),
    Behaviour('read-only', 'read-only files refuse writers', tree.check_read_only),
    Behaviour('schemata-refused', "bad masks refused with the kernel's reason",
              masks.check_schemata_refused),
    Behaviour('schemata-accepted', 'writes change what they name; size follows',
              masks.check_schemata_accepted),
    Behaviour('new-group', 'mkdir gives the masks ovs-rdt predicts', masks.check_new_group),
    Behaviour('exclusive', 'exclusive and shareable mode rules', masks.check_exclusive),
    Behaviour('closids', "ENOSPC 'Out of CLOSIDs' once all are used", tasks.check_closids),
    Behaviour('tasks', 'threads move into groups, back on rmdir', tasks.check_tasks),
    Behaviour('removed-group', 'open files of a removed group give ENODEV',
              tasks.check_removed_group),
    Behaviour('mon-data', 'occupancy and MBM counts, growing under load',
              monitoring.check_mon_data_counts, ('mon',)),
    Behaviour('snc', 'Sub-NUMA nodes sum to their L3 domain', monitoring.check_snc,
              ('mon', 'snc')),
    Behaviour('cdp', 'code/data masks and their exclusive rules', masks.check_cdp,
              ('cdp',)),
    Behaviour('mb', 'memory bandwidth values, units and range', bandwidth.check_mb,
              ('mb',)),
    Behaviour('io-alloc', 'io_alloc state and ways', masks.check_io_alloc, ('io_alloc',)),
    Behaviour('mbm-assign', 'assignable MBM counters', monitoring.check_mbm_assign,
              ('mbm_event',)),
]
