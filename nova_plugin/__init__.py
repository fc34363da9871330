"""ovs-rdt for Nova.

The RDTCacheFilter scheduler filter, the rdt: extra-spec validators and the
[ovs_rdt] nova.conf options.
"""
