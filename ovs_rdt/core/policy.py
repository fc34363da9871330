"""The dynamic policy of the policy white paper: pure decisions, no I/O.

(The policy white paper: the README's References, seed 002.)

Two pools share a budget of ways on every cache domain: the high-priority
(HP) pool gets what its demand needs, within ``[hp_min_ways,
hp_max_ways]``, the best-effort (BE) pool the rest of the budget
(``hp_max_ways + be_min_ways``).  :class:`Policy` is fed one
:class:`Sample` per domain and interval and returns :class:`Decision`
objects; the agent (:mod:`ovs_rdt.agent.policy`) reads the counters and
applies the decisions through the allocator.  ``doc/policy.md`` explains
the algorithm with a worked trace.

In short, per domain:

* **shortage** is evidence, not a guess: packet drops on the HP pool's PMD
  ports, or HP's ``llc_occupancy`` pinned at its allocation while its
  misses rise (MBM traffic above what it drew at the same demand level
  while it fit, beyond :data:`NOISE` and :data:`MISS_FLOOR`).  Then HP
  grows at once, to the estimated need ``occupancy + miss rate / k``
  (``k``: bytes/s of memory traffic per byte of footprint that does not
  fit, learnt from earlier grows), or to ``hp_max_ways`` while ``k`` is
  unknown;
* **shrinking** happens once per demand level: readings that can all
  come from one footprint (within :data:`NOISE`) are one level, a reading
  outside that band starts a new one (the agent reads occupancy
  :data:`SAMPLES` times an interval).  After :data:`HOLD` readings of a
  level (one right after a pinned grow, when the footprint shows whole)
  HP jumps to the ways that hold the level's smallest reading divided by
  ``1 - NOISE``: with counter noise within :data:`NOISE` that is never
  less than the footprint, so a shrink is never followed by a shortage
  under steady load (no flapping), and no later reading of the same level
  trims again (every change lands within two intervals of a step);
* at ``hp_max_ways`` and still short, while BE draws more memory bandwidth
  than HP, BE's MBA percentage is halved, again at each interval with
  drops or misses rising above the shortage before (down to the
  platform minimum); the cap is lifted after :data:`HOLD` intervals
  without shortage.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

from ovs_rdt.core.ways import ways_for_bytes
from ovs_rdt.exceptions import ConfigError, count

#: Occupancy at or above this share of the allocation: "pinned" (the
#: footprint may not fit).
PINNED = 0.9
#: Relative noise of the counters that decisions must not react to.
NOISE = 0.1
#: HP memory traffic (bytes/s) below which misses are not evidence.
MISS_FLOOR = 1 << 20
#: Readings of a demand level before its one shrink decision.
HOLD = 2
#: llc_occupancy readings the agent takes per interval (spread over it):
#: a level has its HOLD readings within its first interval, and the
#: smallest of more readings bounds its footprint more tightly.
SAMPLES = 10


class Bounds(NamedTuple):
    """The ``[policy]`` options, checked together."""

    high_priority: str
    best_effort: str
    hp_min: int
    hp_max: int
    be_min: int
    interval: float

    @property
    def budget(self) -> int:
        return self.hp_max + self.be_min


def bounds_from(settings: Any) -> Bounds | None:
    """``[policy]`` of ``settings`` checked against the pools; None if off.

    One ConfigError naming the option and value at fault.
    """
    pol = settings.policy
    if not pol.enabled:
        return None
    pools = settings.pools
    names = list(settings.allocation.pools)
    for opt in ('high_priority', 'best_effort'):
        name = getattr(pol, opt)
        if not name:
            raise ConfigError('[policy] %s is not set (enabled = true needs '
                              'high_priority and best_effort pools)' % opt)
        if name not in names:
            raise ConfigError('[policy] %s = %r is not a pool of [allocation] '
                              'pools (%s)' % (opt, name,
                                              ', '.join(names) or 'none'))
        if pools[name].l3_cbm or pools[name].l3_ways is None:
            raise ConfigError('[policy] %s = %r: [pool:%s] must be sized by '
                              'l3_ways (the policy moves its ways), not l3_cbm'
                              % (opt, name, name))
    if pol.high_priority == pol.best_effort:
        raise ConfigError('[policy] high_priority and best_effort are both %r; '
                          'they must be two different pools'
                          % pol.high_priority)
    if pol.hp_max_ways is None:
        raise ConfigError('[policy] hp_max_ways is not set (enabled = true '
                          'needs it)')
    if pol.hp_min_ways > pol.hp_max_ways:
        raise ConfigError('[policy] hp_min_ways = %d is more than hp_max_ways '
                          '= %d' % (pol.hp_min_ways, pol.hp_max_ways))
    bounds = Bounds(pol.high_priority, pol.best_effort, pol.hp_min_ways,
                    pol.hp_max_ways, pol.be_min_ways, pol.interval)
    hp_ways = pools[bounds.high_priority].l3_ways
    be_ways = pools[bounds.best_effort].l3_ways
    if hp_ways + be_ways != bounds.budget or \
            not bounds.hp_min <= hp_ways <= bounds.hp_max:
        raise ConfigError(
            '[pool:%s] l3_ways = %d and [pool:%s] l3_ways = %d must sum to the '
            'budget hp_max_ways + be_min_ways = %d with the high-priority pool '
            'within [policy] hp_min_ways..hp_max_ways = %d..%d (they are the '
            'ways the pools return to when the policy is disabled)'
            % (bounds.high_priority, hp_ways, bounds.best_effort, be_ways,
               bounds.budget, bounds.hp_min, bounds.hp_max))
    return bounds


def check_platform(bounds: Bounds, cbm_len: int, min_cbm_bits: int) -> None:
    """ConfigError unless the budget can exist on this platform."""
    if bounds.budget >= cbm_len:
        raise ConfigError('[policy] hp_max_ways + be_min_ways = %d leaves no '
                          'way of the %d for the default group'
                          % (bounds.budget, cbm_len))
    for opt, value in (('hp_min_ways', bounds.hp_min),
                       ('be_min_ways', bounds.be_min)):
        if value < min_cbm_bits:
            raise ConfigError('[policy] %s = %d is below the platform minimum '
                              '%d (info/L3/min_cbm_bits)'
                              % (opt, value, min_cbm_bits))


class Mba(NamedTuple):
    """What the platform's MBA accepts for the BE pool."""

    min_percent: int
    gran: int
    ceiling: int
    """BE's percent when not capped (its mb_percent, else 100)."""

    def halve(self, percent: int) -> int:
        half = -(-(percent // 2) // self.gran) * self.gran
        return max(self.min_percent, min(half, self.ceiling))


class Sample(NamedTuple):
    """One domain over one interval."""

    hp_ways: int
    way_bytes: int
    hp_occupancy: float | None
    """HP's llc_occupancy in bytes (None: unavailable)."""
    hp_rate: float | None
    """HP's memory traffic (mbm_total_bytes rate), bytes/s."""
    be_rate: float | None = None
    drops: int | None = None
    """Packets dropped during the interval on the ports HP's PMDs serve
    (None: HP holds no PMD threads)."""
    be_mb: int | None = None
    """BE's MB percent now (None: no MBA)."""
    hp_samples: tuple[float, ...] = ()
    """HP's llc_occupancy read earlier in the interval, oldest first
    (``hp_occupancy`` is the last reading)."""


class Decision(NamedTuple):
    domain: int
    hp_before: int
    hp_after: int
    be_before: int
    be_after: int
    direction: str
    """``grow`` or ``shrink``: what the decision gives HP."""
    reason: str
    """``drops``, ``pinned`` (grow), ``fits`` (shrink), ``mba-cap``,
    ``mba-lift``."""
    detail: str
    mb_before: int | None = None
    mb_after: int | None = None

    def describe(self) -> str:
        text = ('domain %d: hp %d -> %d ways, be %d -> %d ways'
                % (self.domain, self.hp_before, self.hp_after,
                   self.be_before, self.be_after))
        if self.mb_after is not None and self.mb_after != self.mb_before:
            text += ', be MB %d%% -> %d%%' % (self.mb_before or 100,
                                              self.mb_after)
        return '%s (%s: %s)' % (text, self.reason, self.detail)


def _more_misses(rate: float, low: float) -> bool:
    """Is ``rate`` more than readings whose smallest was ``low`` can show
    of one rate (within :data:`NOISE`), by more than :data:`MISS_FLOOR`?
    """
    return rate > low / (1 - NOISE) * (1 + NOISE) + MISS_FLOOR


class DemandLevel:
    """The occupancy readings of one demand level (no shortage between).

    Readings of one footprint ``F`` lie in ``[(1 - NOISE) F, (1 + NOISE)
    F]``, so they are consistent while ``max / (1 + NOISE) <= min / (1 -
    NOISE)``; a reading that breaks this is a new demand level.
    """

    def __init__(self) -> None:
        self.count = 0
        self.low = math.inf
        self.high = 0.0
        self.total = 0.0
        #: the level's one shrink decision has been taken
        self.decided = False
        #: the smallest memory traffic (bytes/s) read at this level: what
        #: HP draws when nothing it uses is missing (background traffic,
        #: packet buffers), the baseline misses must rise above
        self.rate_low = math.inf

    def rising(self, rate: float) -> bool:
        """Is ``rate`` more traffic than this level's calm readings can
        explain (within :data:`NOISE`), by more than :data:`MISS_FLOOR`?
        Without a calm reading yet, any rate above the floor is.
        """
        if math.isinf(self.rate_low):
            return rate > MISS_FLOOR
        return _more_misses(rate, self.rate_low)

    def fits(self, reading: float) -> bool:
        """Can ``reading`` come from this level's footprint?"""
        if not self.count:
            return True
        return reading <= self.low / (1 - NOISE) * (1 + NOISE) and \
            reading >= self.high / (1 + NOISE) * (1 - NOISE)

    def add(self, reading: float) -> None:
        self.count += 1
        self.low = min(self.low, reading)
        self.high = max(self.high, reading)
        self.total += reading

    @property
    def bound(self) -> float:
        """The largest footprint the readings allow (safe under NOISE)."""
        return self.low / (1 - NOISE)

    @property
    def mean(self) -> float:
        return self.total / self.count


class Probe(NamedTuple):
    """HP when last found pinned and short, to learn ``k`` from later."""

    held: float
    """The bytes HP's ways held."""
    rate: float
    """HP's memory traffic then, bytes/s."""
    ways: int


class Shortage(NamedTuple):
    """A shortage seen from misses in the interval before."""

    ways: int
    rate: float
    """HP's memory traffic then, bytes/s."""


class DomainMemory:
    """What the policy remembers about one domain between intervals."""

    def __init__(self) -> None:
        #: bytes/s of traffic per byte of footprint that does not fit.
        self.k: float | None = None
        #: HP when last pinned and grown: to learn k.
        self.probe: Probe | None = None
        #: the demand level of the intervals since the last shortage
        self.level = DemandLevel()
        #: the allocation last found short
        self.short_ways: int | None = None
        #: a shortage seen from misses in the interval before (none once an
        #: interval is calm)
        self.recent_shortage: Shortage | None = None
        #: intervals without shortage in a row
        self.calm_intervals = 0
        #: HP grew out of a pinned state and has not been read since
        self.grown = False
        #: ways HP keeps until the demand changes (it grew on drops)
        self.floor = 0
        self.last: Decision | None = None


def _ways_holding(nbytes: float, way_bytes: int) -> int:
    """The ways that hold an estimated footprint of ``nbytes`` (counters
    count whole bytes: the estimate is rounded to one first).
    """
    return ways_for_bytes(round(nbytes), way_bytes)


def _way_bytes(sample: Sample) -> int:
    return sample.way_bytes or 1


def _mib(nbytes: float) -> str:
    return '%.1f MiB' % (nbytes / 1048576.0)


class Policy:
    """Decisions for every domain; keeps the per-domain memory."""

    def __init__(self, bounds: Bounds, mba: Mba | None = None) -> None:
        self.bounds = bounds
        self.mba = mba
        self.domains: dict[int, DomainMemory] = {}

    def decide(self, samples: dict[int, Sample]) -> list[Decision]:
        out = []
        for domain in sorted(samples):
            decision = self._decide(domain, samples[domain])
            if decision is not None:
                self.domains[domain].last = decision
                out.append(decision)
        return out

    def clamp(self, ways: int) -> int:
        return max(self.bounds.hp_min, min(self.bounds.hp_max, ways))

    def _decide(self, domain: int, sample: Sample) -> Decision | None:
        """One domain's interval: shortage (grow, or cap BE), else calm
        (perhaps shrink, perhaps lift BE's cap).
        """
        memory = self.domains.setdefault(domain, DomainMemory())
        if sample.hp_occupancy is None:
            return self._without_occupancy(domain, memory, sample)
        pinned = sample.hp_occupancy >= \
            PINNED * sample.hp_ways * _way_bytes(sample)
        missing = pinned and self._misses_rising(memory, sample)
        if missing or sample.drops:
            return self._short(domain, memory, sample, pinned, missing)
        return self._calm(domain, memory, sample)

    def _without_occupancy(self, domain: int, memory: DomainMemory,
                           sample: Sample) -> Decision | None:
        """No llc_occupancy: only drops say anything (one way more)."""
        memory.level = DemandLevel()
        if sample.drops and sample.hp_ways < self.bounds.hp_max:
            return self._ways(domain, sample, sample.hp_ways + 1, 'grow',
                              'drops', '%d packets dropped, occupancy '
                              'unknown' % sample.drops)
        return None

    @staticmethod
    def _misses_rising(memory: DomainMemory, sample: Sample) -> bool:
        """HP's misses rise: above what HP drew at this level while it fit
        (HP's PMDs always move packets through memory), or, still at the
        ways of the last shortage (hp_max_ways: it cannot grow), above the
        rate seen then; as much traffic again is no news, and a pool that
        fills its ways and draws background traffic is not short.
        """
        rate = sample.hp_rate or 0.0
        if not memory.level.rising(rate):
            return False
        before = memory.recent_shortage
        if before is not None and before.ways == sample.hp_ways:
            return _more_misses(rate, before.rate)
        return True

    def _calm(self, domain: int, memory: DomainMemory, sample: Sample
              ) -> Decision | None:
        """No shortage: the level's one shrink decision, or BE's cap lifted.

        One shrink decision per level, at the end of the interval in which
        it has HOLD readings (the first one, with the agent's SAMPLES
        readings per interval; one reading right after a pinned grow: the
        footprint shows whole at once).  Every reading is at least (1 -
        NOISE) of the footprint, so the smallest one bounds it safely;
        later readings of the same level never trim again (a late trim
        would only follow a lucky low reading).
        """
        memory.calm_intervals += 1
        memory.recent_shortage = None   # this level's calm readings judge
        level = self._follow_demand(memory, sample)
        self._learn_calm(memory)
        lift = self._lift(memory, sample)
        hold = 1 if memory.grown else HOLD
        if level.decided or level.count < hold:
            return self._mb_only(domain, sample, lift) if lift else None
        level.decided = True
        memory.grown = False
        need = level.bound
        target = self.clamp(max(_ways_holding(need, _way_bytes(sample)),
                                memory.floor))
        if target >= sample.hp_ways:
            return self._mb_only(domain, sample, lift) if lift else None
        return self._ways(domain, sample, target, 'shrink', 'fits',
                          'footprint at most %s (%s) fits %s'
                          % (_mib(need), count(level.count, 'reading'),
                             count(target, 'way')), lift)

    @staticmethod
    def _follow_demand(memory: DomainMemory, sample: Sample) -> DemandLevel:
        """Add the interval's readings to the demand level; a reading the
        level's footprint cannot explain starts a new one.
        """
        assert sample.hp_occupancy is not None
        level = memory.level
        for reading in sample.hp_samples + (sample.hp_occupancy,):
            if not level.fits(reading):
                # The demand changed: a new level, with its own decisions.
                # (No logging here: the libvirt hook imports this module,
                # and logs through what it is given, ovs_rdt.logs.)
                level = memory.level = DemandLevel()
                memory.floor = 0
            level.add(reading)
        if sample.hp_rate is not None:
            level.rate_low = min(level.rate_low, sample.hp_rate)
        return level

    def _short(self, domain: int, memory: DomainMemory, sample: Sample,
               pinned: bool, missing: bool) -> Decision | None:
        """Evidence of shortage: grow at once (or cap BE at hp_max)."""
        assert sample.hp_occupancy is not None
        hp_ways = sample.hp_ways
        rate = sample.hp_rate or 0.0
        memory.level = DemandLevel()
        memory.calm_intervals = 0
        memory.short_ways = hp_ways
        held = hp_ways * _way_bytes(sample)
        if missing:
            memory.recent_shortage = Shortage(hp_ways, rate)
            self._learn_short(memory, Probe(held, rate, hp_ways))
        target, how = self._grow_target(memory, sample, held, missing)
        if sample.drops:
            how = '%d packets dropped, %s' % (sample.drops, how)
        target = self.clamp(max(target, hp_ways + 1))
        if target <= hp_ways:
            return self._cap(domain, sample, how)
        # Out of a pinned state the next reading shows the footprint whole;
        # drops alone say nothing about it: keep the ways until the demand
        # changes.
        memory.grown = missing
        memory.floor = 0 if missing else target
        detail = 'occupancy %s of %s pinned; %s' % (
            _mib(sample.hp_occupancy), count(hp_ways, 'way'), how) \
            if pinned else how
        return self._ways(domain, sample, target, 'grow',
                          'drops' if sample.drops else 'pinned', detail)

    def _grow_target(self, memory: DomainMemory, sample: Sample,
                     held: float, missing: bool) -> tuple[int, str]:
        """The ways HP grows to when short (before clamping), and why.

        Misses with ``k`` known: the estimated need, ``held + miss rate /
        k`` with a margin; misses without ``k``: ``hp_max_ways`` (clamped);
        drops alone: one way more.
        """
        rate = sample.hp_rate or 0.0
        if missing and memory.k:
            need = held + rate / memory.k * (1 + 3 * NOISE)
            return _ways_holding(need, _way_bytes(sample)), (
                'needs ~%s (%s held + %s/s misses / k %.1f/s + margin)'
                % (_mib(need), _mib(held), _mib(rate), memory.k))
        if missing:
            return self.bounds.hp_max, (
                '%s/s misses, need not known yet' % _mib(rate))
        assert sample.hp_occupancy is not None
        return sample.hp_ways + 1, 'occupancy %s' % _mib(sample.hp_occupancy)

    def _learn_short(self, memory: DomainMemory, probe: Probe) -> None:
        """Still short after a grow: two pinned points give k."""
        before = memory.probe
        if before is not None and before.ways < probe.ways and \
                before.rate > probe.rate:
            self._learn(memory, (before.rate - probe.rate)
                        / (probe.held - before.held))
        memory.probe = probe

    @staticmethod
    def _learn(memory: DomainMemory, k: float) -> None:
        if k > 0:
            memory.k = k if memory.k is None else (memory.k + k) / 2

    def _learn_calm(self, memory: DomainMemory) -> None:
        """Learn k once the footprint shows whole after a grow.

        k = the miss rate when pinned / the bytes that were missing.
        """
        probe = memory.probe
        if probe is None or memory.level.count < HOLD:
            return
        memory.probe = None
        grown = memory.level.mean - probe.held
        if grown > probe.held * NOISE:
            self._learn(memory, probe.rate / grown)

    def _lift(self, memory: DomainMemory, sample: Sample) -> int | None:
        """BE's uncapped MB percent, once HOLD intervals were calm."""
        if self.mba is None or sample.be_mb is None:
            return None
        if sample.be_mb < self.mba.ceiling and \
                memory.calm_intervals >= HOLD:
            return self.mba.ceiling
        return None

    def _ways(self, domain: int, sample: Sample, target: int,
              direction: str, reason: str, detail: str,
              mb_after: int | None = None) -> Decision:
        budget = self.bounds.budget
        return Decision(domain, sample.hp_ways, target,
                        budget - sample.hp_ways, budget - target, direction,
                        reason, detail, sample.be_mb, mb_after)

    def _mb_only(self, domain: int, sample: Sample, lift: int) -> Decision:
        budget = self.bounds.budget
        return Decision(domain, sample.hp_ways, sample.hp_ways,
                        budget - sample.hp_ways, budget - sample.hp_ways,
                        'shrink', 'mba-lift',
                        'no shortage for %d intervals' % HOLD, sample.be_mb,
                        lift)

    def _cap(self, domain: int, sample: Sample, how: str) -> Decision | None:
        """HP is short at hp_max_ways: cap BE's memory bandwidth."""
        if self.mba is None or sample.be_mb is None or \
                sample.be_rate is None:
            return None
        if sample.be_rate <= (sample.hp_rate or 0.0):
            return None
        cap = self.mba.halve(sample.be_mb)
        if cap >= sample.be_mb:
            return None
        budget = self.bounds.budget
        return Decision(domain, sample.hp_ways, sample.hp_ways,
                        budget - sample.hp_ways, budget - sample.hp_ways,
                        'grow', 'mba-cap',
                        'short at hp_max_ways (%s) while best effort draws '
                        '%s/s' % (how, _mib(sample.be_rate)), sample.be_mb,
                        cap)
