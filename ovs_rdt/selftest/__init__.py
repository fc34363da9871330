"""``ovs-rdt selftest``: proves a node's resctrl before ovs-rdt is trusted there.

* :mod:`.behaviours`: every kernel behaviour ovs-rdt relies on, one
  description each, run by the selftest on a node and by the emulator's
  conformance tests (``tests/functional/test_emulator_conformance.py``)
  against the emulator;
* :mod:`.node`: the only way those descriptions touch resctrl: temporary
  groups of their own (``ovsrdt-selftest-<pid>-*``), threads of their own,
  cleaned up after each behaviour and, for a run that was killed, by the
  next one (:mod:`.runner`);
* :mod:`.effect`: whether the ways shield anything, measured with a small C
  probe (:mod:`.probe`) and judged by :mod:`.verdict`.
"""
