"""ovs-rdt: Intel RDT cache allocation for OvS-DPDK, libvirt/KVM guests and Nova."""

#: Prefix of every resctrl group this project creates and owns.
GROUP_PREFIX = 'ovsrdt-'
#: The most L3 cache ways there are per domain, so the most anything may ask
#: for: a capacity bitmask has at most 64 bits.
MAX_WAYS = 64
