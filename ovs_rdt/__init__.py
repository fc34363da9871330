"""ovs-rdt: Intel RDT cache allocation for OvS-DPDK, libvirt/KVM guests and Nova."""

#: Prefix of every resctrl group this project creates and owns.
GROUP_PREFIX = 'ovsrdt-'
#: Prefix of a shared pool's group (``ovsrdt-pool-<name>``).
POOL_GROUP_PREFIX = GROUP_PREFIX + 'pool-'
#: Prefix of a VM's dedicated group (``ovsrdt-vm-<uuid>``), here so that the
#: libvirt hook names one without importing the model.
VM_GROUP_PREFIX = GROUP_PREFIX + 'vm-'


def vm_group(uuid: str) -> str:
    """A VM's dedicated group, ``ovsrdt-vm-<uuid>`` (here for the hook)."""
    return VM_GROUP_PREFIX + uuid


#: Prefix of the temporary groups of ``ovs-rdt selftest``: never planned,
#: written or removed by anything else of ovs-rdt (they count as another
#: tool's groups while they last).
SELFTEST_GROUP_PREFIX = GROUP_PREFIX + 'selftest-'
#: The most L3 cache ways there are per domain, so the most anything may ask
#: for: a capacity bitmask has at most 64 bits.
MAX_WAYS = 64
