"""ovs-rdt: Intel RDT cache allocation for OvS-DPDK, libvirt/KVM guests and Nova."""

#: Prefix of every resctrl group this project creates and owns.
GROUP_PREFIX = 'ovsrdt-'
