"""The agent's side of the dynamic policy: counters in, splits out.

A :class:`PolicyLoop` thread wakes up every ``[policy] interval``, reads
the two pools' ``mon_data`` under ``LOCK_SH`` (a few small files), turns
the MBM counters into rates, adds the drop counters of the OvS ports the
high-priority pool's PMD threads serve, asks :class:`ovs_rdt.core.policy.Policy`
and applies its decisions with :meth:`CacheManager.apply_policy_split`
(``LOCK_EX`` only for the writes, which the allocator orders kernel-safely
and undoes on failure).  It has its own resctrl object (its own lock descriptor), so
the PMD placement in the agent's main loop and the libvirt hook never wait
for more than one policy write.  Its state goes to a small JSON file that
``ovs-rdt status`` shows.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import Any, Callable

from ovs_rdt.agent.lasting import LastingError
from ovs_rdt.runfiles import RUN_DIR, ensure_dir, read_live
from ovs_rdt.runfiles import run_path
from ovs_rdt.agent.policy_state import DomainState, LastDecision, PolicyState
from ovs_rdt.agent.policy_state import PolicyStateError
from ovs_rdt import atomicfile, desired
from ovs_rdt.conf import Settings
from ovs_rdt.core.model import UNIT_PERCENT, pool_group
from ovs_rdt.core import mbm
from ovs_rdt.core import policy as pol
from ovs_rdt import procfs, sampling
from ovs_rdt.exceptions import RDTError

LOG = logging.getLogger(__name__)

#: Where the agent publishes the policy state (``policy-<tag>.json``).
STATE_DIR = RUN_DIR
#: OvS interface types whose queues PMD threads poll.
PMD_PORT_TYPES = frozenset(('dpdk', 'dpdkvhostuser', 'dpdkvhostuserclient',
                            'dummy-pmd'))
#: Interface.statistics keys that count packets lost.
DROP_KEYS = ('rx_dropped', 'tx_dropped', 'rx_missed_errors')
#: The MBM event the miss rates come from.
MBM_EVENT = 'mbm_total_bytes'


def state_path(root: str, state_dir: str = STATE_DIR) -> str:
    return run_path(root, 'policy-{tag}.json', state_dir)


def read_state(root: str, state_dir: str = STATE_DIR,
               proc: str = procfs.PROC) -> PolicyState | None:
    """The published policy state, if an agent runs the policy for root
    (its writer is alive: :func:`ovs_rdt.procfs.alive`).

    PolicyStateError (one line) for a state this release cannot read.
    """
    path = state_path(root, state_dir)
    data = read_live(path, PolicyStateError, proc)
    return None if data is None else PolicyState.from_dict(data, path)


def drops_of(stats: dict[str, tuple[str, dict[str, int]]]) -> int:
    """Sum of the drop counters of the PMD-polled interfaces."""
    return sum(int(values.get(key, 0)) for kind, values in stats.values()
               if kind in PMD_PORT_TYPES for key in DROP_KEYS)


class Reader:
    """Per-domain samples from resctrl, with the rates between two reads."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        #: MBM_EVENT rates between two reads (core.mbm: resets are None)
        self._rates = mbm.Rates()
        self._drops: int | None = None
        #: domain -> HP's llc_occupancy read since the last read()
        self._samples: dict[int, list[float]] = {}
        #: (group, domain) -> why it has no MBM counter (logged once).
        self.uncounted: dict[tuple[str, int], str] = {}

    def assign_counters(self, names: tuple[str, ...]) -> None:
        """With assignable counters (``mbm_assign_mode`` ``mbm_event``),
        give the pools a ``mbm_total_bytes`` counter wherever they lack
        one: the policy's miss rates come from it.  When none is free the
        domain goes on without miss rates (drops and occupancy still
        count), logged once with the kernel's reason.
        """
        resctrl = self.manager.resctrl
        if resctrl.platform().mbm_assign_mode != 'mbm_event':
            return
        for name in names:
            for dom in resctrl.unassigned(name, MBM_EVENT):
                try:
                    with resctrl.lock():
                        resctrl.assign_counter(name, MBM_EVENT, dom)
                except RDTError as exc:
                    if (name, dom) not in self.uncounted:
                        LOG.warning('policy: %s has no %s counter on L3 '
                                    'domain %d, so its misses are not '
                                    'measured there: %s', name, MBM_EVENT,
                                    dom, exc)
                    self.uncounted[(name, dom)] = str(exc)
                    continue
                if self.uncounted.pop((name, dom), None) is not None:
                    LOG.info('policy: %s has a %s counter on L3 domain %d '
                             'again', name, MBM_EVENT, dom)
                else:
                    LOG.info('policy: assigned %s a %s counter on L3 domain '
                             '%d', name, MBM_EVENT, dom)

    def sample(self, bounds: pol.Bounds) -> None:
        """One more llc_occupancy reading of HP per domain (between reads).

        The policy bounds a footprint by the smallest of its readings: a
        few spread over the interval bound it more tightly than one.
        """
        hp = pool_group(bounds.high_priority)
        for grp in sampling.sample(self.manager.resctrl, (hp,), masks=False):
            for dom, values in grp.mon.items():
                occ = values.get('llc_occupancy')
                if occ is not None:
                    self._samples.setdefault(dom, []).append(float(occ))

    def read(self, bounds: pol.Bounds, drops_total: int | None,
             drop_domains: frozenset[int],
             now: float | None = None) -> dict[int, pol.Sample]:
        resctrl = self.manager.resctrl
        platform = resctrl.platform()
        hp, be = pool_group(bounds.high_priority), \
            pool_group(bounds.best_effort)
        self.assign_counters((hp, be))
        with resctrl.lock(exclusive=False):
            groups = {g.name: g for g in resctrl.groups()}
            counted = sampling.sample(resctrl, (hp, be), masks=False)
        mon = {grp.name: grp.mon for grp in counted}
        now = time.monotonic() if now is None else now
        rates = self._rates.observe(now, *_counters(counted))
        drops = None
        if drops_total is not None:
            if self._drops is not None and drops_total >= self._drops:
                drops = drops_total - self._drops
            self._drops = drops_total
        else:
            self._drops = None
        samples, self._samples = self._samples, {}
        if hp not in groups or be not in groups:
            return {}
        root = groups['']
        hp_ways = desired.held_ways(groups[hp], root)
        out = {}
        for dom in platform.domains:
            if dom not in hp_ways:
                continue
            occ = mon.get(hp, {}).get(dom, {}).get('llc_occupancy')
            out[dom] = pol.Sample(
                hp_ways=hp_ways[dom], way_bytes=platform.way_bytes(dom),
                hp_occupancy=None if occ is None else float(occ),
                hp_rate=rates.get((hp, dom, MBM_EVENT)),
                be_rate=rates.get((be, dom, MBM_EVENT)),
                drops=drops if dom in drop_domains else None,
                be_mb=groups[be].mb.get(dom) if platform.mb else None,
                hp_samples=tuple(samples.get(dom, ())) if occ is not None
                else ())
        return out

    def rebase(self, bounds: pol.Bounds, now: float | None = None) -> None:
        """Start the next rates now.

        After a decision the next interval measures only traffic under the
        new split.
        """
        names = (pool_group(bounds.high_priority),
                 pool_group(bounds.best_effort))
        counted = sampling.sample(self.manager.resctrl, names, masks=False)
        self._rates.rebase(time.monotonic() if now is None else now,
                           *_counters(counted))
        self._samples = {}      # read under the split before


def _counters(groups: list[sampling.GroupSample]
              ) -> tuple[dict[str, int | None], dict[mbm.Key, int]]:
    """The groups' directory identities and MBM_EVENT counters, as
    :class:`ovs_rdt.core.mbm.Rates` takes them (a re-created group is a
    reset even when its new counter already passed the old value).
    """
    idents: dict[str, int | None] = {g.name: g.ident for g in groups}
    values = {(g.name, dom, MBM_EVENT): per[MBM_EVENT]
              for g in groups for dom, per in g.mon.items()
              if MBM_EVENT in per}
    return idents, values


class PolicyLoop:
    """The policy thread; :meth:`configure` on start and SIGHUP."""

    def __init__(self, build: Callable[[Any], Any], counters: Any,
                 pmd_view: Callable[[], tuple[frozenset[int], int | None]],
                 state_dir: str = STATE_DIR) -> None:
        #: settings -> a CacheManager of its own (its own lock fd).
        self.build = build
        self.counters = counters
        #: () -> (domains of the PMD threads in the HP pool, drops so far)
        self.pmd_view = pmd_view
        self.state_dir = state_dir
        self.bounds: pol.Bounds | None = None
        self.policy: pol.Policy | None = None
        self.manager: Any = None
        self.reader: Reader | None = None
        #: The failure in force (logged once while it lasts), shown by status.
        self.failure = LastingError(LOG)
        self._cond = threading.Condition()
        #: Held for a whole tick, and by :meth:`prepare`: a SIGHUP waits
        #: for a decision in flight, so none lands after the pools came
        #: back (``enabled = false``) or under the old bounds.
        self._busy = threading.Lock()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._path: str | None = None

    # -- control (the agent's main thread) ------------------------------
    def configure(self, settings: Settings, bounds: pol.Bounds | None) -> None:
        """Follow ``[policy]``: start, re-bound or stop the loop."""
        if self.prepare(settings, bounds) and self._thread is None:
            self._thread = threading.Thread(target=self._main, daemon=True,
                                            name='policy')
            self._thread.start()

    def prepare(self, settings: Settings, bounds: pol.Bounds | None) -> bool:
        """Take ``[policy]`` (no thread: :meth:`tick` by hand); True if on."""
        with self._busy, self._cond:
            changed = bounds != self.bounds
            self.manager = self.build(settings)
            self.reader = Reader(self.manager)
            self._path = state_path(settings.resctrl.root, self.state_dir)
            if changed:
                self.bounds = bounds
                self.policy = None
            self._cond.notify_all()
        if bounds is None:
            if changed:
                LOG.info('policy disabled: the pools keep their configured '
                         'ways')
            self._clear()
            return False
        if changed:
            LOG.info('policy: %s follows its demand within %d-%d ways, %s '
                     'gets the rest of %d ways (at least %d), every %ss',
                     bounds.high_priority, bounds.hp_min, bounds.hp_max,
                     bounds.best_effort, bounds.budget, bounds.be_min,
                     bounds.interval)
        return True

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(5)
        self._clear()

    # -- the thread -----------------------------------------------------------
    def _main(self) -> None:
        while True:
            with self._cond:
                if self._stop:
                    return
                bounds = self.bounds
                wait = bounds.interval if bounds else 3600.0
            if bounds is not None:
                try:
                    self.tick()
                except (RDTError, OSError) as exc:
                    self._fail(str(exc))
                except Exception as exc:  # never let a bug end the agent
                    LOG.exception('policy: internal error')
                    self._fail('internal error: %s' % exc)
            # The next interval: occupancy readings spread over it, the
            # last one taken by tick().
            steps = pol.SAMPLES if bounds is not None else 1
            for step in range(steps):
                with self._cond:
                    if self._stop:
                        return
                    self._cond.wait(wait / steps)
                    if self.bounds is not bounds:
                        break           # re-configured: a new interval
                if step < steps - 1:
                    self.sample()

    def sample(self) -> None:
        """One occupancy reading between two ticks (failures: the tick's)."""
        with self._busy:
            with self._cond:
                bounds, reader = self.bounds, self.reader
            if bounds is None or reader is None:
                return
            try:
                reader.sample(bounds)
            except (RDTError, OSError) as exc:
                LOG.debug('policy: occupancy reading failed: %s', exc)

    def _fail(self, text: str) -> None:
        self.counters.inc('errors', source='policy')
        self.failure.fail(text, 'policy: %s (retrying every interval)', text)
        self._publish()

    def tick(self, now: float | None = None) -> list[pol.Decision]:
        """One interval: read, decide, apply, publish."""
        with self._busy:
            return self._tick(now)

    def _tick(self, now: float | None) -> list[pol.Decision]:
        with self._cond:
            bounds, manager, reader = self.bounds, self.manager, self.reader
        if bounds is None or manager is None or reader is None:
            return []
        platform = manager.resctrl.platform()
        if self.policy is None:
            pol.check_platform(bounds, platform.cbm_len, platform.min_cbm_bits)
            mba = None
            mb = platform.mb
            # The policy's MBA lever moves percentages (Intel MBA).
            if mb is not None and mb.unit == UNIT_PERCENT and \
                    mb.delay_linear:
                pool = manager.settings.pools[bounds.best_effort]
                mba = pol.Mba(mb.min_bandwidth, mb.bandwidth_gran or 1,
                              pool.mb_percent or 100)
            else:
                LOG.info('policy: no MBA in percent on this platform: cache '
                         'ways are the only lever')
            self.policy = pol.Policy(bounds, mba)
        domains, drops = self.pmd_view()
        samples = reader.read(bounds, drops if domains else None, domains,
                              now)
        decisions = self.policy.decide(samples)
        if decisions:
            manager.apply_policy_split(
                {d.domain: d.hp_after for d in decisions},
                {d.domain: d.mb_after for d in decisions
                 if d.mb_after is not None})
            for dec in decisions:
                LOG.info('policy decision: %s', dec.describe())
                self.counters.inc('policy_decisions', domain=dec.domain,
                                  direction=dec.direction, reason=dec.reason)
            reader.rebase(bounds)
        self.failure.recover('policy: working again')
        for dec in decisions:
            samples[dec.domain] = samples[dec.domain]._replace(
                hp_ways=dec.hp_after, be_mb=dec.mb_after
                if dec.mb_after is not None else samples[dec.domain].be_mb)
        self._publish(samples)
        return decisions

    # -- the state file ---------------------------------------------------------
    def _publish(self, samples: dict[int, pol.Sample] | None = None) -> None:
        bounds, path = self.bounds, self._path
        if bounds is None or path is None:
            return
        memory = self.policy.domains if self.policy is not None else {}
        domains = {}
        for dom, sample in sorted((samples or {}).items()):
            learnt = memory.get(dom)
            domains[dom] = DomainState(
                hp_ways=sample.hp_ways,
                be_ways=bounds.budget - sample.hp_ways,
                be_mb=sample.be_mb, hp_occupancy=sample.hp_occupancy,
                hp_rate=sample.hp_rate, be_rate=sample.be_rate,
                drops=sample.drops,
                k=learnt.k if learnt else None,
                short_ways=learnt.short_ways if learnt else None,
                last=LastDecision.of(learnt.last)
                if learnt and learnt.last else None)
        state = PolicyState(
            pid=os.getpid(), time=time.time(),
            high_priority=bounds.high_priority,
            best_effort=bounds.best_effort, hp_min_ways=bounds.hp_min,
            hp_max_ways=bounds.hp_max, be_min_ways=bounds.be_min,
            budget=bounds.budget, interval=bounds.interval,
            error=self.failure.text,
            mba=self.policy is not None and self.policy.mba is not None,
            uncounted=tuple(sorted(
                '%s:%d' % key for key in
                (self.reader.uncounted if self.reader is not None else {}))),
            domains=domains)
        try:
            ensure_dir(os.path.dirname(path))
            atomicfile.write(path, json.dumps(state.to_dict()))
        except (OSError, RDTError) as exc:
            LOG.debug('cannot write %s: %s', path, exc)

    def _clear(self) -> None:
        if self._path is not None:
            try:
                os.unlink(self._path)
            except OSError:
                pass
