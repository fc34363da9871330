"""Pure logic: bitmasks, the way allocator, topology, the policy's decision.

Nothing here does I/O or imports libvirt, OVS, oslo, Nova or FUSE
(tests/unit/test_layers.py checks it), so every surface can share it.
"""
