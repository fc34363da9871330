"""Validators for ovs-rdt's extra specs: ``rdt:*``,
``resources:CUSTOM_RDT_L3_WAY`` and ``resources:CUSTOM_RDT_CLOSID``.

Loaded by Nova's API through the ``nova.api.extra_spec_validators`` entry
point ``rdt``, like Nova's own ``nova.api.validation.extra_specs`` modules.
Each value is checked by the rule the scheduler filter and the libvirt hook
apply (:mod:`ovs_rdt.inputs.request`), not by Nova's ``int()``-based one
(which takes ``+3``, ``0_3`` and ``٣``), and refused with the same message
(``rdt:l3_ways: '٣' is not a whole number``); the two resource classes'
validators, named in full, take the place of Nova's generic
``resources{group}:CUSTOM_{resource}`` for them.  ``rdt:{key}`` catches every
other key of the namespace, so typos such as ``rdt:l3_way`` are refused
with the message the filter and the hook give too.  What concerns several
keys (``resources:CUSTOM_RDT_L3_WAY`` with ``resources:CUSTOM_RDT_CLOSID=1``,
a pool with its trait, ...) cannot be checked here: Nova validates one key
at a time.  The scheduler filter refuses such flavors, with one line.
"""
from __future__ import annotations

from nova.api.validation.extra_specs import base
from nova import exception

from ovs_rdt.exceptions import InvalidValue
from ovs_rdt.inputs import integers, names, request
from ovs_rdt import MAX_WAYS

_PREFIX = request.EXTRA_SPEC_PREFIX
#: Not counted by Placement: what the scheduler filter says of them.
_UNCOUNTED = (' Placement does not count it: the scheduler filter fails '
              'flavors asking it without ``%s`` (a running instance of such '
              'a flavor keeps it).' % request.WAYS_SPEC)


class RDTValidator(base.ExtraSpecValidator):
    """Nova's validator, deciding by ovs-rdt's rule for the key."""

    def validate(self, name: str, value: str) -> None:
        try:
            request.check_extra_spec(name, str(value))
        except InvalidValue as exc:
            raise exception.ValidationError(detail=str(exc)) from None


EXTRA_SPEC_VALIDATORS = [
    RDTValidator(
        name=request.WAYS_SPEC,
        description=(
            'L3 cache ways in all for the instance\'s dedicated class of '
            'service (resctrl group), counted by Placement: a way on every '
            'L3 cache of one cache group (a socket; the CCDs of a NUMA node '
            'on AMD EPYC), spread evenly over the groups its vCPUs span '
            '(one for an instance pinned to one NUMA node). Goes with '
            '``resources:CUSTOM_RDT_CLOSID=1``. Enforced on the node by '
            'ovs-rdt, which reads it from the domain XML.'
        ),
        value={
            'type': int,
            'description': 'Cache ways in all (ASCII digits only; 0: none)',
            'min': 0,
            'max': integers.MAX,
        },
    ),
    RDTValidator(
        name=request.CLOSIDS_SPEC,
        description=(
            'The CLOSID of the instance\'s dedicated class of service, '
            'counted by Placement: 1 with ``resources:CUSTOM_RDT_L3_WAY``.'
        ),
        value={
            'type': int,
            'description': '1 (or 0: none)',
            'min': 0,
            'max': 1,
        },
    ),
    RDTValidator(
        name=_PREFIX + request.L3_WAYS,
        description=(
            'Give the instance a dedicated class of service (resctrl group) '
            'holding this many isolated L3 cache ways on each cache domain '
            '(socket) its vCPUs may run on. Excludes ``rdt:pool``.'
            + _UNCOUNTED
        ),
        value={
            'type': int,
            'description': 'Cache ways per domain (ASCII digits only)',
            'min': 1,
            'max': MAX_WAYS,
        },
    ),
    RDTValidator(
        name=_PREFIX + request.L3_KIB,
        description=(
            'Like ``rdt:l3_ways``, by size: a dedicated class of service '
            'holding at least this many KiB of L3 cache on each cache domain '
            'its vCPUs may run on, as the fewest of the host\'s ways that '
            'hold it (so the instance keeps its cache on hosts whose ways '
            'differ in size, e.g. after a live migration). Excludes '
            '``rdt:l3_ways`` and ``rdt:pool``.' + _UNCOUNTED
        ),
        value={
            'type': int,
            'description': 'KiB of L3 cache per domain (ASCII digits only)',
            'min': 1,
            'max': integers.MAX,
        },
    ),
    RDTValidator(
        name=_PREFIX + request.POOL,
        description=(
            'Put the instance in the shared ovs-rdt pool of this name (a '
            '``[pool:NAME]`` section of the node\'s ovs-rdt.conf). Goes with '
            '``trait:CUSTOM_RDT_POOL_<NAME>=required`` (the name in upper '
            'case, other characters than letters and digits as ``_``): the '
            'hosts with the pool have it. Excludes the dedicated class\'s '
            'keys.'
        ),
        value={
            'type': str,
            'description': 'A pool name: %s' % names.POOL_RULE,
            'pattern': names.POOL_PATTERN,
        },
    ),
    RDTValidator(
        name=_PREFIX + request.MB_PERCENT,
        description=(
            'Cap the memory bandwidth of the instance\'s dedicated class of '
            'service (Intel MBA), in percent. Needs '
            '``resources:CUSTOM_RDT_L3_WAY`` and '
            '``trait:CUSTOM_RDT_MB_PERCENT=required``.'
        ),
        value={
            'type': int,
            'description': 'Percent of the memory bandwidth (ASCII digits '
                           'only)',
            'min': 1,
            'max': 100,
        },
    ),
    RDTValidator(
        name=_PREFIX + request.MB_MBPS,
        description=(
            'Cap the memory bandwidth of the instance\'s dedicated class of '
            'service in MiB/s, on hosts whose resctrl takes bandwidths '
            '(mounted with mba_MBps, or AMD). Needs '
            '``resources:CUSTOM_RDT_L3_WAY`` and '
            '``trait:CUSTOM_RDT_MB_MBPS=required``; excludes '
            '``rdt:mb_percent``.'
        ),
        value={
            'type': int,
            'description': 'MiB/s (ASCII digits only)',
            'min': 1,
            'max': integers.MAX,
        },
    ),
    RDTValidator(
        name=_PREFIX + '{key}',
        description='Any other ``rdt:`` key is refused (a typo).',
        value={'type': str, 'description': 'Refused'},
        parameters=[{'name': 'key', 'pattern': r'.+',
                     'description': 'any key but the ones above'}],
    ),
]


def register() -> list[base.ExtraSpecValidator]:
    return EXTRA_SPEC_VALIDATORS
