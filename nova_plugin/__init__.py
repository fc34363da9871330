"""ovs-rdt for Nova: the RDTCacheFilter scheduler filter, the rdt: extra-spec
validators and the [ovs_rdt] nova.conf options."""
