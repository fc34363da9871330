"""The policy state file: one schema for the agent that writes it and the
``ovs-rdt status`` that reads it.

The agent's policy thread replaces ``/run/ovs-rdt/policy-<tag>.json`` after
every interval (:class:`PolicyState`, :meth:`PolicyState.to_dict`);
``ovs-rdt status`` reads it back with :meth:`PolicyState.from_dict`, shows
it and carries it in ``--json`` as ``policy``.  :data:`VERSION` changes
when a field changes meaning or goes; a reader refuses a version it does
not know with one line (:class:`PolicyStateError`) rather than showing
figures it would misread.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ovs_rdt.core.policy import Decision
from ovs_rdt.exceptions import RDTError

#: The schema's version, written as ``version``.
VERSION = 1


class PolicyStateError(RDTError):
    """A policy state file this ovs-rdt cannot read."""


@dataclass(frozen=True)
class LastDecision:
    """A domain's last decision, as status shows it."""

    direction: str
    reason: str
    hp: tuple[int, int]
    """HP's ways before and after."""
    be: tuple[int, int]
    mb: tuple[int | None, int | None]
    """BE's MB percent before and after (None: not set)."""
    text: str

    @classmethod
    def of(cls, decision: Decision) -> LastDecision:
        return cls(decision.direction, decision.reason,
                   (decision.hp_before, decision.hp_after),
                   (decision.be_before, decision.be_after),
                   (decision.mb_before, decision.mb_after),
                   decision.describe())


@dataclass(frozen=True)
class DomainState:
    """One cache domain: the split now, the last interval's readings and
    what the policy learnt there.
    """

    hp_ways: int
    be_ways: int
    be_mb: int | None = None
    hp_occupancy: float | None = None
    hp_rate: float | None = None
    be_rate: float | None = None
    drops: int | None = None
    k: float | None = None
    """Bytes/s of misses per byte of footprint that does not fit."""
    short_ways: int | None = None
    """HP's ways when last found short."""
    last: LastDecision | None = None


@dataclass(frozen=True)
class PolicyState:
    """What the agent's policy publishes (the ``[policy]`` bounds in
    force, its error if any, and each domain).
    """

    pid: int
    time: float
    high_priority: str
    best_effort: str
    hp_min_ways: int
    hp_max_ways: int
    be_min_ways: int
    budget: int
    interval: float
    error: str | None = None
    mba: bool = False
    uncounted: tuple[str, ...] = ()
    """``group:domain`` of the pools without an MBM counter."""
    domains: dict[int, DomainState] = field(default_factory=dict)
    version: int = VERSION

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (domain ids as strings, as JSON keys are)."""
        out = dataclasses.asdict(self)
        out['uncounted'] = list(self.uncounted)
        out['domains'] = {str(dom): _plain(dataclasses.asdict(row))
                          for dom, row in sorted(self.domains.items())}
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = 'policy state'
                  ) -> PolicyState:
        """The state in ``data``; PolicyStateError naming ``where`` and
        what is wrong (an unknown version, a missing or odd field).
        """
        if not isinstance(data, dict):
            raise PolicyStateError('%s: not a JSON object' % where)
        version = data.get('version')
        if version != VERSION:
            raise PolicyStateError(
                '%s: version %r is not the one this ovs-rdt reads (%d); '
                'the agent that wrote it runs another ovs-rdt release'
                % (where, version, VERSION))
        try:
            domains = {int(dom): _domain(row)
                       for dom, row in data.get('domains', {}).items()}
            fields = {f.name: data[f.name] for f in dataclasses.fields(cls)
                      if f.name in data}
            fields.update(domains=domains,
                          uncounted=tuple(data.get('uncounted', ())))
            return cls(**fields)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise PolicyStateError('%s: %s: %s' % (
                where, exc.__class__.__name__, exc)) from exc


def _domain(row: dict[str, Any]) -> DomainState:
    last = row.get('last')
    if last is not None:
        last = LastDecision(last['direction'], last['reason'],
                            tuple(last['hp']), tuple(last['be']),
                            tuple(last['mb']), last['text'])
    return DomainState(**dict(row, last=last))


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """Tuples as lists, as json would write them anyway."""
    last = row.get('last')
    if last is not None:
        row['last'] = {key: list(value) if isinstance(value, tuple) else value
                       for key, value in last.items()}
    return row
