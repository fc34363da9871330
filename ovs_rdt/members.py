"""Who is in a resctrl group: VMs by name, PMD cores, processes (from /proc).

Members are named the same way everywhere: ``vm=NAME`` (the libvirt domain
name) and ``pmd=CORES`` (the cores of OvS PMD threads, ``0,1``), as the
metrics' ``vm`` and ``pmd`` labels name them, in ``ovs-rdt status``, ``top``
and ``profile`` (:func:`names`, :func:`summary`).
"""
from __future__ import annotations

from ovs_rdt.core.model import vm_uuid
from ovs_rdt.exceptions import count
from ovs_rdt import procfs

#: The extra labels of a group's metrics, in exposition order.
LABELS = ('vm', 'uuid', 'pmd')


def describe(tids: list[int], proc: str = procfs.PROC,
             vm_names: dict[str, str] | None = None) -> list[dict]:
    """Group a task list by process and name each member.

    A QEMU is known by its ``-uuid`` (``/proc``: which process a task is,
    the API cannot say); its name is libvirt's from ``vm_names`` (uuid ->
    name, from its API) when that knows it, else its ``-name``.

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
            out.append({'kind': 'vm', 'uuid': guest[1],
                        'name': (vm_names or {}).get(guest[1], guest[0]),
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


def pmd_cores(members: list[dict]) -> list[int]:
    """The cores of the OvS PMD threads among ``members``, sorted."""
    return sorted({core for m in members if m['kind'] == 'ovs-vswitchd'
                   for core in m['pmds']})


def pmd_label(cores: list[int]) -> str:
    return ','.join(map(str, cores))


def vm_name(group: str, members: list[dict]) -> str:
    """The ``vm`` label of a VM's dedicated group (``ovsrdt-vm-<uuid>``).

    The name of the member VM with the group's UUID; ``''`` for any other
    group: a pool's VMs come and go, so they are no label of its series.
    """
    uuid = (vm_uuid(group) or '').lower()
    return next((m['name'] for m in members if m['kind'] == 'vm' and uuid
                 and m.get('uuid', '').lower() == uuid), '')


def names(members: list[dict]) -> list[str]:
    """Short names of a group's members: ``vm=NAME``, ``pmd=0,1``, ..."""
    out = ['vm=%s' % m['name'] for m in members if m['kind'] == 'vm']
    cores = pmd_cores(members)
    if cores:
        out.append('pmd=%s' % pmd_label(cores))
    for member in members:
        if member['kind'] == 'ovs-vswitchd':
            if len(member['tids']) > len(member['pmds']):
                out.append('ovs-vswitchd')
        elif member['kind'] != 'vm':
            out.append('%s[%d]' % (member['name'], member['pid']))
    return out


def summary(member: dict) -> str:
    """One short phrase for a member, for the status table."""
    if member['kind'] == 'vm':
        vcpus = member['vcpu_tids']
        extra = len(member['tids']) - len(vcpus)
        text = 'vm=%s (vCPU TIDs %s' % (member['name'],
                                        ','.join(map(str, vcpus)) or '-')
        return text + (', +%d QEMU threads)' % extra if extra else ')')
    if member['kind'] == 'ovs-vswitchd':
        pmds = member['pmds']
        parts = ['pmd=%d (TID %d)' % (c, t) for c, t in sorted(pmds.items())]
        others = len(member['tids']) - len(pmds)
        if others:
            parts.append('ovs-vswitchd (%d threads)' % others)
        return ', '.join(parts)
    return '%s (pid %d, %d threads)' % (member['name'], member['pid'],
                                        len(member['tids']))


def prose(members: list[dict]) -> str:
    """The members in words, for an operator deciding on a change
    (``apply --dry-run``): ``running VM vm1 (2 vCPU threads, 3 other QEMU
    threads), OvS PMD threads of cores 0,1, 4 other ovs-vswitchd threads,
    sleep (pid 12, 1 thread)``; '' when there are none.
    """
    out = []
    for member in members:
        if member['kind'] == 'vm':
            vcpus = len(member['vcpu_tids'])
            other = len(member['tids']) - vcpus
            out.append('running VM %s (%s%s)' % (
                member['name'], count(vcpus, 'vCPU thread'),
                ', %s' % count(other, 'other QEMU thread') if other else ''))
    cores = pmd_cores(members)
    if cores:
        out.append('OvS PMD threads of core%s %s'
                   % ('' if len(cores) == 1 else 's', pmd_label(cores)))
    for member in members:
        if member['kind'] == 'ovs-vswitchd':
            other = len(member['tids']) - len(member['pmds'])
            if other:
                out.append(count(other, 'other ovs-vswitchd thread'))
        elif member['kind'] != 'vm':
            out.append('%s (pid %d, %s)' % (member['name'], member['pid'],
                                            count(len(member['tids']),
                                                  'thread')))
    return ', '.join(out)
