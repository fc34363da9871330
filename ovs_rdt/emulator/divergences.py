"""Kernel divergences: the emulator unlike the kernel in one named way.

``ovs-rdt emulate --diverge NAME`` (for the life of the mount) or a
``diverge NAME`` line in the faults file (re-read on change, like the
faults) makes the emulator behave as a buggy or different kernel might,
in a way its ``info/`` files do not explain.  They exist to prove that
``ovs-rdt selftest`` notices and names the behaviour: each one makes one
claim of doc/platforms.md false (its table of claims names the
divergence), and tests/functional/test_selftest_claims.py runs it on every
profile where the claim applies.  ``cache-ids`` changes the ``--sysfs-dir``
tree, written at start: it is a ``--diverge`` only.
"""
from __future__ import annotations

#: name -> how the emulator then differs from the kernel.
DIVERGENCES = {
    # info
    'info-files': 'info/L3 (L3CODE, L3DATA) has no bit_usage file',
    'cbm-mask-gap': 'info/*/cbm_mask lacks way 0 (7fe for 11 ways)',
    'cache-ids': "the --sysfs-dir tree numbers the CPUs' cache/index3/id from 1, "
                 'the schemata its domains from 0',
    # tree
    'mon-data-dirs': "a new group's mon_data has no mon_L3_XX of the last domain",
    'new-group-mode': 'a new group starts exclusive',
    'mkdir-moves-caller': 'mkdir moves the thread that made the group into it',
    'new-group-cpus': "a new group starts with the default group's lowest CPU",
    'mkdir-drops-cpu': "mkdir takes the default group's highest CPU and gives it "
                       'to no group',
    # read-only
    'size-writable': 'size files are mode 0644',
    # schemata
    'sparse-masks': 'accepts a non-contiguous mask although '
                    'info/L3/sparse_masks reads 0',
    'sparse-refused': 'refuses a non-contiguous mask although '
                      'info/L3/sparse_masks reads 1',
    'status-text': "says 'Invalid mask' where the kernel says 'Mask out of "
                   "range' in info/last_cmd_status",
    'partial-write': 'a refused schemata write keeps the lines before the bad one',
    'schemata-reset': 'a schemata write resets every domain and resource it does '
                      'not name to its default (every way, no MB cap)',
    'size-all-ways': 'size counts every way of cbm_mask whatever the mask',
    'new-group-one-way': 'mkdir gives a new group only the lowest of the ways '
                         'it should get',
    'new-group-mb': 'mkdir gives a new group the lowest MB value instead of the '
                    'maximum',
    'mkdir-takes-exclusive': "mkdir gives a new group an exclusive group's ways "
                             'too',
    'exclusive-overlap': "sets a group's mode to exclusive although its "
                         'ways overlap another group',
    'exclusive-unmarked': "bit_usage marks an exclusive group's ways S, not E",
    'overlap-taken': "a write over an exclusive group's ways (or an exclusive "
                     "group's over another's) is taken",
    'cdp-together': 'under CDP a write to L3CODE or L3DATA sets both',
    'cdp-no-peer': 'under CDP the overlap rules ignore the other type '
                   "(another group's CODE may take an exclusive group's DATA)",
    # groups and tasks
    'num-closids': 'reads one more CLOSID in info/*/num_closids than mkdir '
                   'gives',
    'io-alloc-closid': 'io_alloc, enabled, leaves its CLOSID to mkdir',
    'tasks-stay': 'accepts a write to a tasks file but leaves the task '
                  'where it was',
    'tasks-one-write': 'only the first write on an open tasks file moves a task',
    'no-task-errno': "refuses a TID no task has with EINVAL, not ESRCH",
    'mon-move-across': "moves a task into another control group's monitor group",
    'rmdir-loses-tasks': "rmdir leaves the group's tasks in no group",
    'removed-group-files': "a removed group's open files still read and write",
    # monitoring
    'counter-hex': 'monitoring files read in hex (0x1a40)',
    'mbm-frozen': 'MBM counters (mbm_total_bytes, mbm_local_bytes) read 0 '
                  'whatever the traffic',
    'occupancy-stuck': 'llc_occupancy reads one way\'s bytes whatever the tasks',
    'ctrl-counts-own': "a control group's counters count its own tasks only, "
                       'not its monitor groups\'',
    'snc-sum': "under SNC a mon_L3_XX file reads its first node's count only",
    'unassigned-zero': "an MBM event with no counter reads 0, not 'Unassigned'",
    'counter-kept': 'a counter unassigned from a group stays taken (by no group)',
    'assign-any-domain': 'takes (and ignores) an assignment to a domain that does '
                         'not exist',
    # memory bandwidth
    'mb-granularity': 'keeps an MB percentage as written instead of '
                      'rounding it up to info/MB/bandwidth_gran',
    'mb-range': 'takes an MB value above the maximum (keeps the maximum)',
    'nonlinear-mb': 'takes MB percentages on an Intel MBA with non-linear delays '
                    '(info/MB/delay_linear 0, as --set delay_linear=0 makes it)',
    'mbps-percent': 'under mba_MBps refuses MB values outside [min_bandwidth,100]',
    'mba-event-stays': 'accepts a write to mba_MBps_event but keeps the event',
    # io_alloc
    'io-alloc-cbm-readable': 'io_alloc_cbm reads while io_alloc is disabled',
    'io-alloc-unmarked': "bit_usage does not mark io_alloc's ways H or X",
}
