"""Whether the ways shield the probe, from the effect part's figures (pure).

Three phases of the same probe (a pointer chase over a working set that
fits the ways of its group): alone; beside a streaming neighbour in the
same group (same ways); with the neighbour moved to a group of disjoint
ways.  If the ways partition the cache, the neighbour hurts the probe in
the same ways and stops hurting it once in other ways:

* the neighbour must first hurt: the shared phase at least :data:`HURT`
  times slower than alone, else the run tells nothing (``inconclusive``);
* the disjoint phase must then undo at least :data:`RECOVERED` of that
  slowdown, and the probe's ``llc_occupancy`` come back to at least
  :data:`KEPT` of what it held alone (when the node counts it): the ways
  ``shield`` the probe;
* undoing at most :data:`NOT_RECOVERED` of it: they ``do-not-shield``;
  in between: ``inconclusive``.

On an emulated resctrl (no hardware partitions the cache: the FUSE mount
of ``ovs-rdt emulate``) the verdict is ``emulated``, whatever the figures.
"""
from __future__ import annotations

from dataclasses import dataclass

HURT = 1.2
RECOVERED = 0.75
NOT_RECOVERED = 0.5
KEPT = 0.75

SHIELDS, DOES_NOT, INCONCLUSIVE, EMULATED = (
    'shields', 'does-not-shield', 'inconclusive', 'emulated')


@dataclass(frozen=True)
class Figures:
    """Nanoseconds per access and the probe's occupancy (bytes, None if
    the node does not count it) in each phase.
    """

    alone_ns: float
    shared_ns: float
    disjoint_ns: float
    alone_occupancy: int | None = None
    shared_occupancy: int | None = None
    disjoint_occupancy: int | None = None


def judge(fig: Figures, emulated: str | None = None) -> tuple[str, str]:
    """(verdict, the sentence that explains it).

    ``emulated``: why no hardware partitions the cache here (None: it does).
    """
    if emulated:
        return EMULATED, ('no hardware partitions the cache here (%s): the figures '
                          'measure nothing of cache allocation; no isolation claimed'
                          % emulated)
    hurt = fig.shared_ns / fig.alone_ns if fig.alone_ns > 0 else 0.0
    if hurt < HURT:
        return INCONCLUSIVE, ('the neighbour in the same ways slowed the probe only '
                              'x%.2f (under x%.2f): nothing to shield it from in this '
                              'run' % (hurt, HURT))
    recovered = (fig.shared_ns - fig.disjoint_ns) / (fig.shared_ns - fig.alone_ns)
    kept = None
    if fig.alone_occupancy and fig.disjoint_occupancy is not None:
        kept = fig.disjoint_occupancy / fig.alone_occupancy
    what = ('in the same ways the neighbour slowed the probe x%.2f; in disjoint ways '
            '%d%% of that slowdown went away' % (hurt, round(100 * recovered)))
    if kept is not None:
        what += ' and it kept %d%% of its occupancy' % round(100 * kept)
    if recovered >= RECOVERED and (kept is None or kept >= KEPT):
        return SHIELDS, 'the ways shield the probe: ' + what
    if recovered <= NOT_RECOVERED:
        return DOES_NOT, 'the ways do not shield the probe: ' + what
    return INCONCLUSIVE, 'neither clearly: ' + what
