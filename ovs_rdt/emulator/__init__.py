"""A kernel-faithful resctrl emulator (``ovs-rdt emulate``).

* :mod:`.profiles` -- the emulated platforms (CPUID-level geometry);
* :mod:`.model` -- the pure kernel model: kernel string parsers, groups,
  schemata/tasks/cpus/mode semantics with the kernel's errno and
  ``info/last_cmd_status`` texts, the file tree and the monitoring model;
* :mod:`.fs` -- the mfusepy binding of the model to files;
* :mod:`.cli` -- argument parsing, mounting and daemonizing.

See ``doc/emulator.md`` for what is emulated and how.
"""
