"""Who is in a resctrl group: VMs by name, PMD cores, processes (from /proc)."""
from __future__ import annotations

from ovs_rdt import procfs


def describe(tids: list[int], proc: str = procfs.PROC) -> list[dict]:
    """Group a task list by process and name each member.

    Returns dicts with ``kind`` (``vm``, ``ovs-vswitchd``, ``process``),
    ``name``, ``pid`` and ``tids``; VMs add ``uuid`` and ``vcpu_tids``;
    ovs-vswitchd adds ``pmds`` ({core: tid}).
    """
    by_pid: dict[int, list[int]] = {}
    for tid in tids:
        pid = procfs.tgid_of(tid, proc)
        if pid is None:
            continue  # exited
        by_pid.setdefault(pid, []).append(tid)
    out = []
    for pid, members in sorted(by_pid.items()):
        guest = procfs.qemu_guest(pid, proc)
        comms = {t: procfs.comm_of(t, proc, pid) or '' for t in members}
        if guest is not None:
            out.append({'kind': 'vm', 'name': guest[0], 'uuid': guest[1],
                        'pid': pid, 'tids': members,
                        'vcpu_tids': [t for t in members
                                      if procfs.is_vcpu_thread(comms[t])]})
            continue
        name = procfs.comm_of(pid, proc) or str(pid)
        entry = {'kind': 'process', 'name': name, 'pid': pid, 'tids': members}
        if name == 'ovs-vswitchd':
            entry['kind'] = 'ovs-vswitchd'
            pmds = {}
            for tid in members:
                core = procfs.parse_pmd_comm(comms[tid])
                if core is not None:
                    pmds[core] = tid
            entry['pmds'] = pmds
        out.append(entry)
    return out


def summary(member: dict) -> str:
    """One short phrase for a member, for the status table."""
    if member['kind'] == 'vm':
        vcpus = member['vcpu_tids']
        extra = len(member['tids']) - len(vcpus)
        text = 'VM %s (vCPU TIDs %s' % (member['name'],
                                        ','.join(map(str, vcpus)) or '-')
        return text + (', +%d QEMU threads)' % extra if extra else ')')
    if member['kind'] == 'ovs-vswitchd':
        pmds = member['pmds']
        parts = ['PMD c%02d (TID %d)' % (c, t) for c, t in sorted(pmds.items())]
        others = len(member['tids']) - len(pmds)
        if others:
            parts.append('ovs-vswitchd (%d threads)' % others)
        return ', '.join(parts)
    return '%s (pid %d, %d threads)' % (member['name'], member['pid'],
                                        len(member['tids']))
