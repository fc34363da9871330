"""Where Nova's databases and Placement have instances and their cache ways.

Nova gives filters its own view of each host's instances
(``HostState.instances``), fed by the computes' reports.  That view lags
or errs around moves (Nova 34, ``nova/compute/manager.py``):

* ``confirm_resize`` runs on the source and removes the instance from the
  source's view (``_delete_scheduler_instance_info``): after a resize in
  place the host's view lacks the instance until the compute's periodic
  ``_sync_scheduler_instance_info`` (``[DEFAULT]
  scheduler_instance_sync_interval``, 120 s);
* ``_post_live_migration`` reports the instance on the source
  (``_update_scheduler_instance_info``) and nothing reports it on the
  destination until that sync;
* a non-snapshot ``revert_resize`` reports nothing: the destination keeps
  the instance until the sync, a host it was resized in place on keeps
  its new flavor until the instance is reported again;
* an instance is reported when its build, resize or unshelve is done, not
  when the compute claims it: during a spawn (or a resize's disk copy)
  the host's view lacks it;
* a move's other side (the source during a resize, which a revert needs
  back; the destination during a live migration or evacuation) is in no
  view.

A :class:`Ledger` reads what changed in each cell database since it last
looked (instances and migrations, ``changes-since``, through Nova's
objects, per instance filtered and cell) and places every instance it has
read where Nova's resource tracker counts it: on its host with its
flavor, plus, during a move not yet confirmed or reverted, the other side
(the old flavor on the source, the new one on the destination; both on a
host resized in place).  It also reads the instances a host's view has
only as bare stubs (:meth:`Ledger.load`).  Instances it has not read keep
what the view says.  No lock is held while it reads: two requests reading
at once do not wait for each other; each read is applied under the lock
once it is done, and never replaces an instance's state with an older one.

Between the filter and the compute's claim the database does not know
where an instance goes.  An instance being scheduled is *in flight*
(:meth:`Ledger.expect`) and counts, for every other request, on the hosts
where it may still land: those it passed where Placement has it (the
scheduler claims it on the chosen host right after the filters and
weighers; a claim Placement no longer has was dropped); before that, on
the hosts the filter passed it on (for UNCLAIMED_TTL seconds: a claim
that does not come failed); while it is still being filtered, on every
host, for the instances of other requests expected after it (of two
filtered at once, the later one counts the other: never both, never
neither).  It stops counting once the database has it where it was
claimed, or deleted.  No request waits for another: the price is a host
refused for the second or so an earlier request's claim takes, where the
two would both have fitted on different hosts.  What is left: requests in
flight in other scheduler processes (none sees the other's); Placement's
resources (``resources:CUSTOM_RDT_*``), or the node's hook and Nova's
reschedule, settle those (``doc/nova-internals.md``).

Nova-free: the cell databases and Placement are read through the adapter
it is given (:mod:`nova_plugin.adapter`), as plain :class:`InstanceState`
and :class:`MigrationState` tuples and provider uuids.
"""
from __future__ import annotations

import datetime
import itertools
import threading
import time
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from ovs_rdt.core import capacity

#: Seconds each read reaches back before the previous one: rows written
#: with a clock that lags the scheduler's, or committed after it read.
OVERLAP = 10.0
#: Seconds a deleted (or shelved offloaded) instance is remembered, so
#: that a view still holding it does not count it again.
GONE_TTL = 600.0
#: Seconds an instance that passed the filter counts on the hosts it
#: passed while Placement does not have it (the scheduler claims it within
#: a second or two: Placement's PUT, retried on a conflict).
UNCLAIMED_TTL = 30.0
#: Seconds an instance counts as in flight at most (its compute claims it
#: within seconds of the scheduler's answer; a failed build frees it).
IN_FLIGHT_TTL = 300.0

HostKey = tuple  # (host, nodename)


class InstanceState(NamedTuple):
    """An instance as a cell database has it (:func:`adapter.instance_state`)."""

    uuid: str
    changed: Any
    """``updated_at`` (else ``created_at``): which of two reads is newer."""
    gone: bool
    """Deleted, or holding nothing (shelved offloaded)."""
    deleted: bool
    host: HostKey | None
    flavor: Any
    flavor_id: Any
    cells: frozenset[int] | None
    old_flavor: Any = None
    old_cells: frozenset[int] | None = None
    new_flavor: Any = None
    new_cells: frozenset[int] | None = None


class MigrationState(NamedTuple):
    """A migration as a cell database has it (:func:`adapter.migration_state`)."""

    id: int
    instance_uuid: str
    changed: Any
    in_progress: bool
    """Not yet confirmed, reverted, completed or failed."""
    source: HostKey | None
    dest: HostKey | None
    old_flavor_id: Any = None
    new_flavor_id: Any = None


#: What an instance holds: ``holding_of(uuid, flavor, cells)`` (None:
#: nothing).
HoldingOf = Callable[[str, Any, 'frozenset[int] | None'],
                     'capacity.Holding | None']


class Known(NamedTuple):
    """What the ledger keeps of an instance it read: its holdings, not
    its flavors.
    """

    uuid: str
    changed: Any
    gone: bool
    deleted: bool
    host: HostKey | None
    flavor_id: Any
    now: capacity.Holding | None
    """Its flavor on its NUMA cells."""
    old: capacity.Holding | None
    """During a move: the old flavor on the old cells."""
    new: capacity.Holding | None
    """During a move: the new flavor on the new cells."""
    read: int = 0
    """The read it came from (a later one has a higher number)."""


def known(inst: InstanceState, holding_of: HoldingOf, read: int = 0) -> Known:
    """What ``inst`` holds now, and before and after a move of it."""
    uuid = inst.uuid
    return Known(uuid, inst.changed, inst.gone, inst.deleted, inst.host,
                 inst.flavor_id, holding_of(uuid, inst.flavor, inst.cells),
                 holding_of(uuid, inst.old_flavor or inst.flavor,
                            inst.old_cells),
                 holding_of(uuid, inst.new_flavor or inst.flavor,
                            inst.new_cells), read)


def holdings(inst: Known, mig: MigrationState | None
             ) -> tuple[tuple[HostKey, capacity.Holding], ...]:
    """Where ``inst`` holds what, as Nova's resource tracker counts it.

    Its host, its flavor; during a move in progress (``mig``) also the
    other side: the new flavor on the destination while the instance is
    still on the source, the old flavor on the source once it is on the
    destination (a revert takes it back); resized in place, both.
    """
    if inst.gone:
        return ()
    out = []
    if inst.host is not None and inst.now is not None:
        out.append((inst.host, inst.now))
    if mig is None or not mig.in_progress:
        return tuple(out)
    if mig.source == mig.dest == inst.host:
        resized = inst.flavor_id == mig.new_flavor_id and \
            mig.old_flavor_id != mig.new_flavor_id
        other, where = (inst.old if resized else inst.new), inst.host
    elif inst.host is not None and inst.host == mig.dest:
        other, where = inst.old, mig.source
    else:
        other, where = inst.new, mig.dest
    if other is not None and where is not None:
        out.append((where, other))
    return tuple(out)


class _InFlight:
    """An instance being scheduled, until the database has it."""

    __slots__ = ('holding', 'seq', 'order', 'since', 'created', 'passed',
                 'hosts', 'seen', 'claimed')

    def __init__(self, holding: capacity.Holding, seq: int, order: int,
                 created: Any) -> None:
        self.holding = holding
        self.seq = seq
        """Its request's number (a later request has a higher one)."""
        self.order = order
        """When it was expected, among all instances (a later one has a
        higher number).
        """
        self.since = time.monotonic()
        self.created = created
        """When (the database's clock, UTC)."""
        self.passed: tuple[HostKey, ...] = ()
        """The hosts the filter passed it on."""
        self.hosts: tuple[HostKey, ...] | None = None
        """Where it may land: None (every host) while it is filtered, then
        the hosts passed, then those of them where Placement has it.
        """
        self.seen = self.since
        """When the filter passed it."""
        self.claimed = False
        """Whether it was claimed (Placement had it on a host it passed,
        or the next instance of its request is being filtered: Nova claims
        each instance of a request before it filters for the next).
        """


class _Cell:
    __slots__ = ('read_at', 'hosts')

    def __init__(self) -> None:
        self.read_at: Any = None
        self.hosts: set[HostKey] = set()


class Ledger:
    """Instances read from the cell databases, placed per host, and the
    instances being scheduled.

    ``nova``: the adapter (``utcnow``, ``cell_context``,
    ``changed_instances``, ``changed_migrations``, ``instances_by_uuid``,
    ``host_migrations``, ``instance_state``, ``migration_state``,
    ``allocation_providers``); ``holding_of``: what a flavor holds on
    given NUMA cells.  Thread-safe; no lock is held while it reads.
    """

    def __init__(self, nova: Any, holding_of: HoldingOf) -> None:
        self._nova = nova
        self._holding_of = holding_of
        self._lock = threading.Lock()
        self._started = nova.utcnow()
        self._reads = itertools.count(1)
        self._order = itertools.count(1)
        self._cells: dict[Any, _Cell] = {}
        self._instances: dict[str, Known] = {}
        self._migrations: dict[str, tuple[int, MigrationState]] = {}
        self._placed: dict[str, tuple] = {}
        self._on_host: dict[HostKey, dict[str, list[capacity.Holding]]] = {}
        self._gone: dict[str, float] = {}
        self._in_flight: dict[str, _InFlight] = {}
        self._providers: dict[str, HostKey] = {}
        self.version = 0
        """Rises whenever what a host holds in the database changes."""

    # -- what hosts hold -------------------------------------------------------
    def tracks(self, uuid: str) -> bool:
        """Whether the ledger places ``uuid`` (the view's entry is ignored)."""
        return uuid in self._instances

    def on_host(self, host: HostKey
                ) -> Mapping[str, Sequence[capacity.Holding]]:
        """uuid -> what that instance holds on ``host``, as the database
        has it.  A copy: other requests may change the ledger meanwhile.
        """
        return dict(self._on_host.get(host, {}))

    def view(self, host: HostKey, uuids: Iterable[str]
             ) -> tuple[int, Mapping[str, Sequence[capacity.Holding]],
                        set[str]]:
        """At once: the version, uuid -> what that instance holds on
        ``host`` as the database has it, and which of ``uuids`` (the
        host's view) the ledger does not place.
        """
        with self._lock:
            return (self.version, dict(self._on_host.get(host, {})),
                    {u for u in uuids if u not in self._instances})

    def in_flight(self, seq: int, order: int | None = None
                  ) -> list[tuple[tuple[HostKey, ...] | None,
                                  capacity.Holding]]:
        """What the instances other requests schedule may hold, and where
        (None: on every host), as request ``seq`` counts them when its
        instance being filtered was expected as number ``order``
        (:meth:`expect`; None: none): one still being filtered counts if
        it was expected before.  So of two instances filtered at once,
        the one expected later counts the other: never both, never
        neither.
        """
        with self._lock:
            return [(exp.hosts, exp.holding)
                    for exp in self._in_flight.values()
                    if exp.seq != seq and (exp.hosts is not None or
                                           order is None or
                                           exp.order < order)]

    # -- instances being scheduled ---------------------------------------------
    def expect(self, uuid: str, holding: capacity.Holding, seq: int) -> int:
        """Request ``seq`` is scheduling instance ``uuid``, which asks for
        ``holding`` (on NUMA cells not known yet: every domain).  Returns
        the instance's number (:meth:`in_flight`).

        The instances of the request filtered before were claimed (Nova
        claims each before it filters for the next; filtered again for
        its alternates, the last one was too).
        """
        with self._lock:
            for other in self._in_flight.values():
                if other.seq == seq and other.hosts is not None:
                    other.claimed = True
            exp = self._in_flight.get(uuid)
            if exp is None or exp.seq != seq:
                exp = self._in_flight[uuid] = _InFlight(
                    holding._replace(domains=None), seq, next(self._order),
                    self._nova.utcnow())
            return exp.order

    def passed(self, uuid: str, hosts: Iterable[HostKey]) -> None:
        """The filter passed ``hosts`` for instance ``uuid``; none: it
        fails, and is forgotten.  An instance already claimed (filtered
        again for its request's alternates) stays where it is.
        """
        hosts = tuple(hosts)
        with self._lock:
            exp = self._in_flight.get(uuid)
            if exp is None or exp.claimed:
                return
            if not hosts:
                del self._in_flight[uuid]
            else:
                exp.passed = exp.hosts = hosts
                exp.seen = time.monotonic()

    def drop(self, uuid: str) -> None:
        """Forget instance ``uuid``: it will not be claimed (a question
        asked of the filters, not a placement).
        """
        with self._lock:
            self._in_flight.pop(uuid, None)

    def look_up(self, context: Any, providers: Mapping[str, HostKey],
                seq: int) -> None:
        """Ask Placement where the instances other requests passed are
        claimed (``providers``: resource provider uuid -> host, of the
        hosts seen): the hosts passed that Placement has them on (an
        evacuated instance keeps its source's allocation, not a host it
        passed).  An instance is forgotten once the database has it where
        it was claimed, or deleted; when it was claimed and Placement has
        it on none of the hosts it passed (its request failed later, or
        its compute sent it back to be rescheduled); when it is not
        claimed UNCLAIMED_TTL seconds after it passed (its request failed
        after the filter); after IN_FLIGHT_TTL.  Raises what the
        Placement client raises (nothing is applied).
        """
        now = time.monotonic()
        with self._lock:
            self._providers.update(providers)
            for uuid, exp in list(self._in_flight.items()):
                if now - exp.since > IN_FLIGHT_TTL or \
                        exp.hosts is not None and not exp.claimed and \
                        now - exp.seen > UNCLAIMED_TTL or \
                        self._claimed_since(uuid, exp):
                    del self._in_flight[uuid]
            todo = [(uuid, exp, exp.claimed)
                    for uuid, exp in self._in_flight.items()
                    if exp.seq != seq and exp.hosts is not None]
        found = [(uuid, exp, claimed,
                  self._nova.allocation_providers(context, uuid))
                 for uuid, exp, claimed in todo]
        with self._lock:
            for uuid, exp, claimed, rps in found:
                if self._in_flight.get(uuid) is not exp:
                    continue
                there = {self._providers.get(rp) for rp in rps}
                hosts = tuple(h for h in exp.passed if h in there)
                if hosts:
                    exp.hosts, exp.claimed = hosts, True
                elif claimed:           # and dropped
                    del self._in_flight[uuid]

    def _claimed_since(self, uuid: str, exp: _InFlight) -> bool:
        """Whether the database changed ``uuid`` after it was expected (by
        its clock) and has it deleted, or placed as its request asked.
        """
        inst = self._instances.get(uuid)
        if inst is None or inst.changed is None or \
                inst.changed < exp.created:
            return False
        return inst.gone or any(self._holds(uuid, host, exp.holding)
                                for host, _ in self._placed.get(uuid, ()))

    def _holds(self, uuid: str, host: HostKey,
               want: capacity.Holding) -> bool:
        """Whether the database places ``uuid`` on ``host`` as its request
        asked: with ``want``, or with anything once no move of it is in
        progress (a revert gives it back its old flavor).
        """
        held = self._on_host.get(host, {}).get(uuid, ())
        if not held:
            return False
        mig = self._migrations.get(uuid)
        return mig is None or not mig[1].in_progress or any(
            h.ways == want.ways and h.pool == want.pool for h in held)

    # -- reading the databases -------------------------------------------------
    def refresh(self, context: Any, cell: Any,
                hosts: Iterable[HostKey] = ()) -> None:
        """Read what changed in ``cell`` since the last read.

        The first read of a cell reaches back to when the ledger was made
        (the view was read from the database then); the first look at a
        host also reads its moves in progress, whatever their age.
        Raises what the database raises (nothing is applied: the next
        read starts from the same point).
        """
        nova = self._nova
        state = self._cells.setdefault(cell, _Cell())
        read = next(self._reads)
        now = nova.utcnow()
        since = (state.read_at or self._started) - \
            datetime.timedelta(seconds=OVERLAP)
        new_hosts = [h for h in hosts if h not in state.hosts]
        cctxt = nova.cell_context(context, cell)
        load = {uuid for uuid, stamp in nova.changed_instances(cctxt, since)
                if self._stamp(uuid) != stamp}
        migs = [nova.migration_state(m)
                for m in nova.changed_migrations(cctxt, since)]
        for host in new_hosts:
            migs.extend(nova.migration_state(m)
                        for m in nova.host_migrations(cctxt, host))
        load.update(m.instance_uuid for m in migs
                    if m.instance_uuid not in self._instances)
        states = [nova.instance_state(i)
                  for i in nova.instances_by_uuid(cctxt, load)] \
            if load else []
        with self._lock:
            self._apply(read, states, migs)
            if state.read_at is None or now > state.read_at:
                state.read_at = now
            state.hosts.update(new_hosts)

    def load(self, context: Any, uuids: Iterable[str]) -> None:
        """Read instances a host's view has as bare stubs (``context``:
        their cell's); one the database no longer has holds nothing.
        Raises what the database raises.
        """
        nova = self._nova
        uuids = set(uuids)
        read = next(self._reads)
        states = [nova.instance_state(i)
                  for i in nova.instances_by_uuid(context, uuids)]
        states.extend(InstanceState(u, None, True, True, None, None, None,
                                    None)
                      for u in uuids - {st.uuid for st in states})
        with self._lock:
            self._apply(read, states, ())

    def _stamp(self, uuid: str) -> tuple | None:
        """What :func:`adapter.changed_instances` pairs with ``uuid`` when
        the ledger has its last state (None: it has none).
        """
        inst = self._instances.get(uuid)
        return None if inst is None else (inst.changed, inst.deleted)

    def _apply(self, read: int, states: Iterable[InstanceState],
               migrations: Iterable[MigrationState]) -> None:
        """Take what read number ``read`` returned (the lock is held):
        the newest migration of each instance, each instance's state;
        never over a newer one (:func:`_newer`).
        """
        changed = set()
        for mig in migrations:
            old = self._migrations.get(mig.instance_uuid)
            if old is not None and _newer((old[1].id, old[1].changed),
                                          old[0], (mig.id, mig.changed),
                                          read):
                continue
            if old is None or old[1] != mig:
                changed.add(mig.instance_uuid)
            self._migrations[mig.instance_uuid] = (read, mig)
        for st in states:
            old_inst = self._instances.get(st.uuid)
            if old_inst is not None and _newer(
                    old_inst.changed, old_inst.read, st.changed, read):
                continue
            if old_inst is None or (old_inst.changed, old_inst.deleted,
                                    old_inst.host) != \
                    (st.changed, st.deleted, st.host):
                changed.add(st.uuid)
                self._instances[st.uuid] = known(st, self._holding_of, read)
            else:
                self._instances[st.uuid] = old_inst._replace(read=read)
        for uuid in changed:
            self._place(uuid)
        self._forget_gone()

    def _place(self, uuid: str) -> None:
        inst = self._instances.get(uuid)
        mig = self._migrations.get(uuid)
        placed = () if inst is None else \
            holdings(inst, None if mig is None else mig[1])
        before = self._placed.get(uuid, ())
        if inst is not None and inst.gone:
            self._gone.setdefault(uuid, time.monotonic())
        else:
            self._gone.pop(uuid, None)
        if placed == before:
            return
        for host, _ in before:
            held = self._on_host.get(host)
            if held is not None:
                held.pop(uuid, None)
                if not held:
                    del self._on_host[host]
        for host, holding in placed:
            self._on_host.setdefault(host, {}).setdefault(
                uuid, []).append(holding)
        self._placed[uuid] = placed
        self.version += 1

    def _forget_gone(self) -> None:
        if not self._gone:
            return
        limit = time.monotonic() - GONE_TTL
        for uuid in [u for u, at in self._gone.items() if at < limit]:
            del self._gone[uuid]
            self._instances.pop(uuid, None)
            self._migrations.pop(uuid, None)
            self._placed.pop(uuid, None)


def _newer(have: Any, have_read: int, got: Any, got_read: int) -> bool:
    """Whether the state the ledger has (changed ``have``, from read
    number ``have_read``) is newer than one read again: by when it
    changed (the database's clock), else by which read began later.
    """
    try:
        if have != got:
            return have > got
    except TypeError:       # a stub's state has no time
        pass
    return have_read > got_read
