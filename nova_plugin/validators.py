"""Validators for ``rdt`` namespaced extra specs.

Loaded by Nova's API through the ``nova.api.extra_spec_validators`` entry
point ``rdt``, like Nova's own ``nova.api.validation.extra_specs`` modules.
Registering a validator whose name has the ``rdt:`` prefix makes ``rdt`` a
known namespace, so Nova also refuses unknown keys in it (typos such as
``rdt:l3_way``).  Whether ``rdt:l3_ways`` and ``rdt:pool`` are combined
cannot be checked here (Nova validates one key at a time); the scheduler
filter refuses such flavors.
"""
from __future__ import annotations

from typing import Any

from nova.api.validation.extra_specs import base
from nova import exception

from nova_plugin import specs


class WholeNumberValidator(base.ExtraSpecValidator):
    """Nova's integer validator, without what ``int()`` also accepts.

    ``int()`` takes ``+3``, ``0_3`` and non-ASCII digits (``٣``); the
    scheduler filter and the libvirt hook refuse them
    (:func:`nova_plugin.specs.parse`), so such a flavor would pass the API
    and then fit no host.
    """

    def _validate_int(self, value: Any) -> None:
        text = str(value).strip()
        digits = text[1:] if text.startswith('-') else text  # "less than"
        if not (digits.isascii() and digits.isdigit()) or len(digits) > 9:
            raise exception.ValidationError(
                f"Validation failed; '{value}' is not a valid integer value."
            )
        super()._validate_int(value)


EXTRA_SPEC_VALIDATORS = [
    WholeNumberValidator(
        name=specs.L3_WAYS,
        description=(
            'Give the instance a dedicated class of service (resctrl group) '
            'holding this many isolated L3 cache ways on each cache domain '
            '(socket) its vCPUs may run on: the domains of its NUMA cells '
            'when it has a NUMA topology, every domain otherwise. Excludes '
            '``rdt:pool``. Enforced on the node by ovs-rdt; scheduled by '
            'the RDTCacheFilter.'
        ),
        value={
            'type': int,
            'description': 'Cache ways per domain',
            'min': specs.L3_WAYS_MIN,
            'max': specs.L3_WAYS_MAX,
        },
    ),
    base.ExtraSpecValidator(
        name=specs.POOL,
        description=(
            'Put the instance in the shared ovs-rdt pool of this name (a '
            '``[pool:NAME]`` section of the node\'s ovs-rdt.conf). Excludes '
            '``rdt:l3_ways``.'
        ),
        value={
            'type': str,
            'description': 'A pool name',
            'pattern': specs.POOL_PATTERN,
        },
    ),
    WholeNumberValidator(
        name=specs.MB_PERCENT,
        description=(
            'Cap the memory bandwidth of the instance\'s dedicated class of '
            'service (Intel MBA), in percent. Needs ``rdt:l3_ways``.'
        ),
        value={
            'type': int,
            'description': 'Percent of the memory bandwidth',
            'min': specs.MB_PERCENT_MIN,
            'max': specs.MB_PERCENT_MAX,
        },
    ),
]


def register() -> list[base.ExtraSpecValidator]:
    return EXTRA_SPEC_VALIDATORS
