"""RDTCacheFilter: whether a request's cache is Placement's to count.

Placement holds the count: each compute publishes its cache ways and
CLOSIDs (``ovs-rdt provider-config``), a flavor asks for them
(``resources:CUSTOM_RDT_L3_WAY``, ``resources:CUSTOM_RDT_CLOSID``, the
traits of pools and bandwidth caps), and Nova claims them atomically for
every instance and every move, whatever the schedulers, workers and cells.
The node's libvirt hook, which reads the same extra specs from the domain
XML, checks the fit on the cache group Nova's NUMA fit chose; a refusal
makes Nova reschedule.

What is left for a filter is what a request tells by itself: whether its
flavor asks for cache the way Placement counts it
(:func:`ovs_rdt.inputs.placement.schedulable`: ``rdt:l3_ways`` alone, a
pool without its trait, ... would go uncounted or to hosts that refuse
it), and whether this Nova is one ovs-rdt is tested with.  Either fails
every host, with one line saying why; a request asking for no cache always
passes.  It reads ``RequestSpec.flavor.extra_specs``, nothing else, and
keeps nothing between requests.
"""
from __future__ import annotations

from typing import Any, Iterable

from oslo_log import log as logging

from nova.scheduler import filters
from nova.scheduler import utils as scheduler_utils
from nova import version

from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.inputs import placement
from ovs_rdt.inputs.request import is_ours

LOG = logging.getLogger(__name__)

#: The Nova releases ovs-rdt is tested with: from, up to (not included).
SUPPORTED = ((34, 0, 0), (35, 0, 0))


def unsupported(found: str | None = None) -> str | None:
    """Why this Nova (``found``: its version, else nova's own) is not one
    ovs-rdt supports; None when it is.
    """
    found = found or version.version_string()
    parts = []
    for part in found.split('.')[:3]:
        digits = part[:len(part) - len(part.lstrip('0123456789'))]
        parts.append(int(digits) if digits else -1)
    low, high = SUPPORTED
    if low <= tuple(parts) < high:
        return None
    return ('Nova %s is not supported by ovs-rdt\'s RDTCacheFilter (tested '
            'with Nova %s up to, not including, %s): requests for cache fail '
            'every host' % (found, '.'.join(map(str, low)),
                            '.'.join(map(str, high))))


def why_not(spec_obj: Any) -> str | None:
    """Why no host may take the request; None: Placement counts what it
    asks (or it asks for nothing).
    """
    flavor = spec_obj.flavor
    specs = flavor.extra_specs or {}
    if not any(map(is_ours, specs)):
        return None
    why = unsupported()
    if why:
        return why
    try:
        placement.schedulable(specs)
    except InvalidValue as exc:
        return 'flavor %s: %s' % (flavor.name, exc)
    return None


class RDTCacheFilter(filters.BaseHostFilter):
    """Pass every host to a request whose cache Placement counts; none to
    another, with one line.
    """

    RUN_ON_REBUILD = False

    def __init__(self) -> None:
        super().__init__()
        why = unsupported()
        if why:
            LOG.error('%s', why)

    def filter_all(self, filter_obj_list: Iterable, spec_obj: Any) -> list:
        """Every host or none: the request decides, once per call."""
        hosts = list(filter_obj_list)
        if not hosts or scheduler_utils.request_is_rebuild(spec_obj):
            return hosts
        why = why_not(spec_obj)
        if why is None:
            return hosts
        LOG.warning('RDTCacheFilter fails every host for instance %s: %s',
                    spec_obj.instance_uuid, why)
        return []

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        return why_not(spec_obj) is None
