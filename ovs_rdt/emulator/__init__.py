"""A kernel-faithful resctrl emulator (``ovs-rdt emulate``).

* :mod:`.profiles` -- the emulated platforms (CPUID-level geometry);
* :mod:`.kparse` -- the kernel's string parsers/printers (kstrtox, bitmaps);
* :mod:`.host` -- the host's real threads from ``/proc``;
* :mod:`.groups` -- resource groups and which group each thread is in;
* :mod:`.monitor` -- footprints, occupancy and MBM counters;
* :mod:`.model` -- the kernel model proper: the file tree, every read/write
  handler with the kernel's errno and ``info/last_cmd_status`` texts;
* :mod:`.fs` -- the mfusepy binding of the model to files (the only FUSE user);
* :mod:`.cli` -- argument parsing, the sysfs tree, mounting and daemonizing.

See ``doc/emulator.md`` for what is emulated and how.
"""
