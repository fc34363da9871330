"""The rule for every kind of value an operator gives, in one place each.

=================  ===================================================
module             holds the rule for
=================  ===================================================
``integers``       whole numbers (ASCII digits only) and percentages
``names``          pool names
``uuids``          UUIDs (domain UUIDs, QEMU's ``-uuid``, group names)
``masks``          hex masks: CBMs, per-domain ``0=7f0;1=3f``, CPU masks
``cpulists``       CPU lists: libvirt's cpuset syntax, the kernel's lists
``keyvalues``      ``KEY=VALUE`` lists (per-domain masks, ``[flavors]``)
``request``        what a VM or OvS asks for: L3 ways, pool, MB cap (percent or MiB/s)
``placement``      a Nova flavor against what Placement counts (resources, traits)
``listen``         where a server listens: ``HOST:PORT``, ``[V6ADDR]:PORT``
=================  ===================================================

Every surface calls these: the libvirt hook's domain reader, the agent's
OvS knobs, the Nova extra-spec validators and scheduler filter, and the
configuration.  So a value is accepted or refused the same everywhere, with
one message shape, ``FIELD: 'VALUE' why`` (:func:`ovs_rdt.exceptions.refuse`),
FIELD being how that surface names it: ``rdt:l3_ways: '٣' is not a whole
number``, ``other_config:rdt-pmd-l3-ways: '٣' is not a whole number``.

Pure and light: the libvirt hook imports them at every VM start, so they
import no typing, re or logging.  (The resctrl emulator keeps its own,
kernel-strict parsers: it emulates the kernel, not ovs-rdt.)
"""
