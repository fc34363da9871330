"""Multi-create pass tracking: what one request has placed so far.

Nova schedules the instances of one request (``--min-count N``) in turn:
it filters the hosts for instance ``i``, picks one, then consumes it,
which raises its consumed count (:func:`nova_plugin.adapter.num_consumed`)
but does not add the instance to its instances.  So a :class:`Pass` is
kept per RequestSpec (weakly: it ends with the request), restarted at
index 0, and notes each host's consumed count whenever the filter looks
at it; a rise is instances of this request placed there, each holding
what the request asks, on the NUMA cells Nova fitted
(:func:`nova_plugin.adapter.placed_cells`).  Every host seen at index
i > 0 passed the filter at index i - 1, so each placement is seen.  A
concurrent request consuming the same host in between counts as ours
(conservative); a concurrent request refreshing the host from a compute
report newer than our placement resets the count, and loses that
placement as it loses Nova's own RAM and NUMA consumption (doc/nova.md).

Nova-free: hosts are keys, consumption is counts, holdings are
:class:`ovs_rdt.core.capacity.Holding`.
"""
from __future__ import annotations

import itertools
import threading
import weakref
from typing import Any, Callable, Iterable, Sequence

from ovs_rdt.core import capacity


class Pass:
    """One request's scheduling pass (all its instances)."""

    __slots__ = ('request', 'cells', 'error', 'defaults', 'numa_l3',
                 'uuids', 'seen', 'placed', 'warned', 'seq')

    def __init__(self, request: capacity.Holding | None = None,
                 cells: int = 0, error: str | None = None) -> None:
        self.request = request
        """What each instance asks for; None: no cache (or ``error``)."""
        self.cells = cells
        """NUMA cells each instance asks for (0: none)."""
        self.error = error
        """Why the request is malformed (every host fails it)."""
        self.defaults: tuple = ()
        """The ``[ovs_rdt]`` capacity defaults read for this pass."""
        self.numa_l3: str | None = None
        """The ``[ovs_rdt] rdt_numa_l3`` read for this pass (None: unset)."""
        self.uuids: set[str] = set()
        """The request's instances seen so far (moved ones are on hosts)."""
        self.seen: dict[Any, int] = {}
        """Host key -> its consumed count when last looked at."""
        self.placed: dict[Any, list[capacity.Holding]] = {}
        """Host key -> what this pass's instances placed there hold."""
        self.warned = False
        """Whether an unexpected error of this pass was warned about."""
        self.seq = 0
        """Its number: a later request has a higher one
        (:class:`Passes`).
        """

    def add_instance(self, uuid: str | None) -> None:
        """Note the instance being scheduled now (None: not known)."""
        if uuid:
            self.uuids.add(uuid)

    def newly_consumed(self, host: Any, count: int) -> int:
        """Instances placed on ``host`` since it was last looked at.

        ``count``: the host's consumed count now.  The first look at a
        host, or a count that fell (a compute report), is 0.
        """
        new = count - self.seen.setdefault(host, count)
        self.seen[host] = count
        return new if new > 0 else 0

    def place(self, host: Any, new: int,
              cells: frozenset[int] | None) -> None:
        """Note ``new`` instances of this request placed on ``host``.

        ``cells``: the host NUMA cells Nova fitted them on (None: none,
        or a pool request, which holds no ways); the usage they are
        added to maps them to L3 domains.
        """
        holding = self.request
        assert holding is not None
        if cells is not None and holding.ways:
            holding = holding._replace(domains=cells)
        self.placed[host] = [*self.placed.get(host, ()), *[holding] * new]

    def host_usage(self, usage: capacity.Usage, host: Any,
                   own: Callable[[str], Iterable[capacity.Holding]],
                   in_flight: Sequence[capacity.Holding] = ()
                   ) -> capacity.Usage:
        """``usage`` of the host's instances, as this request sees it.

        Plus what this pass placed on ``host`` and what other requests'
        instances in flight may take there (``in_flight``); minus what
        this request's own instances hold there (a moved instance's old
        allocation goes away): ``own(uuid)`` says what (nothing when it
        is not there).  A copy when it differs; ``usage`` itself is never
        changed.
        """
        held = [h for uuid in self.uuids for h in own(uuid)]
        placed: Sequence[capacity.Holding] = self.placed.get(host, ())
        if not held and not placed and not in_flight:
            return usage
        usage = usage.copy()
        for holding in held:
            usage.add(holding, -1)
        for holding in (*placed, *in_flight):
            usage.add(holding)
        return usage


class Passes:
    """The pass of each request being scheduled, keyed weakly by request.

    Thread-safe: Nova may filter several requests at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._passes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._seq = itertools.count(1)

    def start(self, key: Any, index: int | None,
              new: Callable[[], Pass]) -> Pass:
        """The pass of the request ``key``, a ``new()`` one at index 0
        (numbered in the order they start).

        ``index``: which instance of the request is filtered (None: not
        known, the pass goes on).  ``key`` must be weakly referenceable
        (:func:`nova_plugin.adapter.request_key`).
        """
        with self._lock:
            found = self._passes.get(key)
            if found is None or index == 0:
                found = self._passes[key] = new()
                found.seq = next(self._seq)
        return found

    def __len__(self) -> int:
        return len(self._passes)
