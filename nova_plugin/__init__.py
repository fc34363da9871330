"""ovs-rdt for Nova.

The RDTCacheFilter scheduler filter (:mod:`nova_plugin.filters`), the
extra-spec validators (:mod:`nova_plugin.validators`) and the upgrade
report for 0.3's flavors (``python3 -m nova_plugin.upgrade``).  Placement
counts the cache: ``ovs-rdt provider-config`` on each compute.
"""
