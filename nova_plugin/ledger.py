"""Where Nova's database says instances hold their cache ways.

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
looked (instances and migrations, ``changes-since``, once per request and
cell) and places every instance it has seen change where Nova's resource
tracker counts it: on its host with its flavor, plus, during a move not yet
confirmed or reverted, the other side (the old flavor on the source, the
new one on the destination; both on a host resized in place).  Instances
it has not seen change since it started keep what the view says.

Between the scheduler's choice and the compute's claim the database does
not know where an instance goes, but Placement does: the scheduler claims
the instance's resources on the chosen host before it answers.  Each
request the filter sees is *expected* (:meth:`Ledger.expect`); later
requests ask Placement where it was claimed (``GET /allocations/{uuid}``,
only while the database does not place it yet) and count it there.  A
request filtered while an earlier one passed the filter and is not claimed
yet waits for that claim (filters do not see each other's choices: two
requests for the last ways of a host would both pass): until Placement
has it, the scheduler consumed one of the hosts it passed (its
``HostState`` placement count rose: it was claimed, or its claim was
dropped), or WAIT seconds after it passed (it failed after the filter).
What is left: requests in flight in different scheduler processes;
Placement's own resources, or the node's hook and a reschedule, settle
those (``doc/nova.md``).

Nova-free: the cell databases and Placement are read through the adapter
it is given (:mod:`nova_plugin.adapter`), as plain :class:`InstanceState`
and :class:`MigrationState` tuples and provider uuids.
"""
from __future__ import annotations

import datetime
import itertools
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from ovs_rdt.core import capacity

#: Seconds each read reaches back before the previous one: rows written
#: with a clock that lags the scheduler's, or committed after it read.
OVERLAP = 10.0
#: Seconds a deleted (or shelved offloaded) instance is remembered, so
#: that a view still holding it does not count it again.
GONE_TTL = 600.0
#: Seconds an expected instance is looked for in Placement at most (a
#: compute claims it within seconds; a failed build frees it).
EXPECT_TTL = 300.0
#: Seconds after an expected instance passed the filter within which the
#: scheduler claims it (else it failed after the filter), and between two
#: looks at it.
WAIT = 2.0
POLL = 0.01
#: Seconds within which the scheduler filters the next instance of a
#: request placing several (else the request is over).
IDLE = 0.5

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


#: What an instance holds: ``holding(uuid, flavor, cells)`` (None: nothing).
HoldingOf = Callable[[str, Any, 'frozenset[int] | None'],
                     'capacity.Holding | None']


class Held(NamedTuple):
    """What the ledger keeps of an instance: its holdings, not its flavors."""

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


def held_of(inst: InstanceState, holding: HoldingOf) -> Held:
    """What ``inst`` holds now, and before and after a move of it."""
    uuid = inst.uuid
    return Held(uuid, inst.changed, inst.gone, inst.deleted, inst.host,
                inst.flavor_id, holding(uuid, inst.flavor, inst.cells),
                holding(uuid, inst.old_flavor or inst.flavor, inst.old_cells),
                holding(uuid, inst.new_flavor or inst.flavor, inst.new_cells))


def placements(inst: Held, mig: MigrationState | None
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


class _Request:
    """A request the filter saw (its instances are filtered in turn)."""

    __slots__ = ('seq', 'num', 'count', 'touched')

    def __init__(self, seq: int, num: int) -> None:
        self.seq = seq
        """Order of the requests (an earlier one has a lower number)."""
        self.num = num
        """Instances it places (a multi-create: several)."""
        self.count = 0
        """Instances of it the filter has seen so far."""
        self.touched = time.monotonic()
        """When the filter last saw it."""


class _Expected:
    """A request's instance, until the database places it."""

    __slots__ = ('holding', 'since', 'created', 'owner', 'hosts', 'passed',
                 'passed_at')

    def __init__(self, holding: capacity.Holding, owner: _Request,
                 created: Any) -> None:
        self.holding = holding
        self.owner = owner
        self.since = time.monotonic()
        self.created = created
        """When (the database's clock, UTC)."""
        self.hosts: tuple[HostKey, ...] = ()
        """Where Placement had it claimed at the last look."""
        self.passed: list[tuple[Any, int]] = []
        """The HostStates the filter passed it on, with their placement
        counts then (empty: not passed).
        """
        self.passed_at = 0.0


class _Cell:
    __slots__ = ('read_at', 'hosts')

    def __init__(self) -> None:
        self.read_at: Any = None
        self.hosts: set[HostKey] = set()


class Ledger:
    """Instances seen changing in the cell databases, placed per host.

    ``nova``: the adapter (``utcnow``, ``cell_context``,
    ``changed_instances``, ``changed_migrations``, ``instances_by_uuid``,
    ``host_migrations``, ``instance_state``, ``migration_state``);
    ``holding``: what a flavor holds on given NUMA cells.  Thread-safe.
    """

    def __init__(self, nova: Any, holding: HoldingOf) -> None:
        self._nova = nova
        self._holding = holding
        self._lock = threading.Lock()
        self._started = nova.utcnow()
        self._cells: dict[Any, _Cell] = {}
        self._instances: dict[str, Held] = {}
        self._migrations: dict[str, MigrationState] = {}
        self._placed: dict[str, tuple] = {}
        self._on_host: dict[HostKey, dict[str, list[capacity.Holding]]] = {}
        self._gone: dict[str, float] = {}
        self._expected: dict[str, _Expected] = {}
        self._requests: weakref.WeakKeyDictionary = \
            weakref.WeakKeyDictionary()
        self._providers: dict[str, HostKey] = {}
        self._seq = itertools.count(1)
        self.version = 0
        """Rises whenever what any host holds changes."""

    # -- reading ---------------------------------------------------------------
    def tracks(self, uuid: str) -> bool:
        """Whether the ledger places ``uuid`` (the view's entry is ignored)."""
        return uuid in self._instances

    def on_host(self, host: HostKey) -> Mapping[str, Sequence[capacity.Holding]]:
        """uuid -> what that instance holds on ``host`` (an expected
        instance: what its request asks, where Placement has it).  A copy:
        other requests may change the ledger meanwhile.
        """
        held = dict(self._on_host.get(host, {}))
        expected = [(u, e.holding) for u, e in list(self._expected.items())
                    if host in e.hosts]
        if not expected:
            return held
        merged = {u: list(h) for u, h in held.items()}
        for uuid, holding in expected:
            merged.setdefault(uuid, []).append(holding)
        return merged

    def expect(self, uuid: str, holding: capacity.Holding, request: Any,
               num: int = 1) -> int:
        """The scheduler is placing instance ``uuid`` for ``request`` (a
        weakly referenceable object, one per request, placing ``num``
        instances), which asks for ``holding`` (on NUMA cells not known
        yet: every domain).  Returns the request's number (see
        :meth:`settle`).
        """
        with self._lock:
            req = self._requests.get(request)
            if req is None:
                req = self._requests[request] = _Request(next(self._seq),
                                                         num)
            exp = self._expected.get(uuid)
            if exp is None or exp.owner is not req:
                self._expected[uuid] = _Expected(
                    holding._replace(domains=None), req, self._nova.utcnow())
                req.count += 1
            req.touched = time.monotonic()
            return req.seq

    def passed(self, uuid: str, host_states: Iterable[Any]) -> None:
        """The filter passed ``host_states`` for expected instance ``uuid``
        (its request goes on to Nova's claim); none: the request fails.
        """
        with self._lock:
            exp = self._expected.get(uuid)
            if exp is None:
                return
            exp.passed = [(h, self._nova.placements(h)) for h in host_states]
            exp.passed_at = exp.owner.touched = time.monotonic()
            if not exp.passed:
                exp.owner.num = exp.owner.count

    def drop(self, uuid: str) -> None:
        """Forget expected instance ``uuid``: its request will not be
        claimed (a question asked of the filters, not a placement).
        """
        with self._lock:
            exp = self._expected.pop(uuid, None)
            if exp is not None:
                exp.owner.num = exp.owner.count
                if exp.hosts:
                    self.version += 1

    def _busy(self, req: _Request, waiting: Iterable[_Expected]) -> bool:
        """Whether ``req`` may still claim what a later request must know:
        an instance of it passed the filter less than WAIT ago and is not
        claimed (``waiting``) with no host it passed consumed since, or
        it has instances to come and was seen less than IDLE ago.
        """
        now = time.monotonic()
        placements = self._nova.placements
        return any(exp.owner is req and now - exp.passed_at < WAIT and
                   all(placements(h) == n for h, n in exp.passed)
                   for exp in waiting) or \
            (req.count < req.num and now - req.touched < IDLE)

    def settle(self, context: Any, providers: Mapping[str, HostKey],
               own: Iterable[str] = (), before: int = 0) -> None:
        """Look up in Placement where the expected instances are claimed.

        ``providers``: resource provider uuid -> host (the compute nodes
        seen); ``own``: the instances of the request being filtered (not
        looked up); ``before``: its number (:meth:`expect`): while an
        earlier request may still claim (:meth:`_busy`), it waits (WAIT
        seconds at most).  An expected instance is dropped once the
        database has it where Placement does, as its request asked (a
        compute claimed it), or deleted; when it is not claimed and a host
        it passed was consumed, or it passed WAIT ago, or it never passed
        within WAIT; after EXPECT_TTL.  Raises what the Placement client
        raises.
        """
        nova = self._nova
        own = set(own)
        with self._lock:
            self._providers.update(providers)
            limit = time.monotonic() - EXPECT_TTL
            changed = False
            todo = {}
            for uuid, exp in list(self._expected.items()):
                if uuid in own:
                    continue
                if exp.since < limit or self._claimed_since(uuid, exp):
                    del self._expected[uuid]
                    changed = changed or bool(exp.hosts)
                else:
                    todo[uuid] = exp
            if changed:
                self.version += 1
        found: dict[str, list[str]] = {}
        deadline = time.monotonic() + WAIT
        while True:     # no lock held: the awaited requests go on
            for uuid, exp in todo.items():
                if uuid not in found or not found[uuid] and \
                        exp.owner.seq < before:
                    found[uuid] = nova.allocation_providers(context, uuid)
            with self._lock:
                waiting = [self._expected[u] for u in self._expected
                           if u not in own and not found.get(u) and
                           self._expected[u].passed]
                earlier = {e.owner for e in self._expected.values()
                           if e.owner.seq < before}
                busy = any(self._busy(req, waiting) for req in earlier)
                for uuid, exp in self._expected.items():
                    if uuid not in own and uuid not in todo and \
                            exp.owner.seq < before:
                        todo[uuid] = exp     # an instance that came since
            if not busy or time.monotonic() > deadline:
                break
            time.sleep(POLL)
        with self._lock:
            for uuid, exp in todo.items():
                if self._expected.get(uuid) is not exp:
                    continue
                hosts = tuple(sorted(self._providers[rp]
                                     for rp in found.get(uuid, ())
                                     if rp in self._providers))
                if not hosts and self._unclaimed(exp) or hosts and all(
                        self._holds(uuid, host, exp.holding)
                        for host in hosts):
                    del self._expected[uuid]
                    if exp.hosts:
                        self.version += 1
                    continue
                if hosts != exp.hosts:
                    exp.hosts = hosts
                    self.version += 1

    def _unclaimed(self, exp: _Expected) -> bool:
        """Whether an expected instance without allocations will not be
        claimed any more.
        """
        age = time.monotonic() - (exp.passed_at if exp.passed else exp.since)
        return age >= WAIT or \
            any(self._nova.placements(h) != n for h, n in exp.passed)

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
        return mig is None or not mig.in_progress or any(
            h.ways == want.ways and h.pool == want.pool for h in held)

    def _claimed_since(self, uuid: str, exp: _Expected) -> bool:
        """Whether the database changed ``uuid`` after the request (by its
        clock) and has it deleted, or placed as the request asked.
        """
        inst = self._instances.get(uuid)
        if inst is None or inst.changed is None or \
                inst.changed < exp.created:
            return False
        return inst.gone or any(self._holds(uuid, host, exp.holding)
                                for host, _ in self._placed.get(uuid, ()))

    # -- updating --------------------------------------------------------------
    def refresh(self, context: Any, cell: Any,
                hosts: Iterable[HostKey] = ()) -> None:
        """Read what changed in ``cell`` since the last read.

        The first read of a cell reaches back to when the ledger was made
        (the view was read from the database then); the first look at a
        host also reads its moves in progress, whatever their age.
        Raises what the database raises (nothing is half-applied: the
        next read starts from the same point).
        """
        nova = self._nova
        with self._lock:
            state = self._cells.get(cell)
            if state is None:
                state = self._cells[cell] = _Cell()
            new_hosts = [h for h in hosts if h not in state.hosts]
            now = nova.utcnow()
            since = (state.read_at or self._started) - \
                datetime.timedelta(seconds=OVERLAP)
            cctxt = nova.cell_context(context, cell)
            load = {uuid for uuid, changed in
                    nova.changed_instances(cctxt, since)
                    if self._stamp(uuid) != changed}
            migs = [nova.migration_state(m)
                    for m in nova.changed_migrations(cctxt, since)]
            for host in new_hosts:
                migs.extend(nova.migration_state(m)
                            for m in nova.host_migrations(cctxt, host))
            moved = self._new_migrations(migs)
            load.update(u for u in moved if u not in self._instances)
            loaded = [nova.instance_state(i)
                      for i in nova.instances_by_uuid(cctxt, load)] \
                if load else []
            # Every read is done: only now does the ledger change.
            self._migrations.update(moved)
            changed = set(moved)
            changed.update(self._take_instances(loaded))
            state.read_at = now
            state.hosts.update(new_hosts)
            for uuid in changed:
                self._place(uuid)
            self._forget_gone()

    def _stamp(self, uuid: str) -> tuple | None:
        """What :func:`adapter.changed_instances` pairs with ``uuid`` when
        the ledger has its last state (None: it has none).
        """
        inst = self._instances.get(uuid)
        return None if inst is None else (inst.changed, inst.deleted)

    def _take_instances(self, states: Iterable[InstanceState]) -> set[str]:
        changed = set()
        for st in states:
            old = self._instances.get(st.uuid)
            if old is not None and old.changed == st.changed and \
                    old.deleted == st.deleted and old.host == st.host:
                continue
            if old is not None and st.changed is not None and \
                    old.changed is not None and st.changed < old.changed:
                continue
            self._instances[st.uuid] = held_of(st, self._holding)
            changed.add(st.uuid)
        return changed

    def _new_migrations(self, states: Iterable[MigrationState]
                        ) -> dict[str, MigrationState]:
        """The newest of ``states`` per instance where it differs from
        what the ledger has; the ledger itself is left as it is.
        """
        moved: dict[str, MigrationState] = {}
        for st in states:
            old = moved.get(st.instance_uuid) or \
                self._migrations.get(st.instance_uuid)
            if old is not None and (old.id > st.id or old == st):
                continue
            moved[st.instance_uuid] = st
        return moved

    def _place(self, uuid: str) -> None:
        inst = self._instances.get(uuid)
        placed = () if inst is None else \
            placements(inst, self._migrations.get(uuid))
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
