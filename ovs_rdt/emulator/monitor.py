"""The monitoring model: footprints, occupancy and MBM counters.

See the ``ovs_rdt.emulator.model`` docstring and ``doc/emulator.md``.
"""
from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Callable, Optional

from ovs_rdt.emulator.groups import MON, Group

if TYPE_CHECKING:
    from ovs_rdt.emulator.model import ResctrlModel

LOG = logging.getLogger(__name__)

MISS_REFILL_HZ = 50.0        # misses: each non-resident byte refetched 50 x/s
LOCAL_FRACTION = 0.8         # share of traffic to local memory (multi-socket)
DEMAND_TTL = 0.5             # seconds a /proc scan is reused for monitoring
DEFAULT_FOOTPRINT = 2 * 1024 * 1024
EVENTS = ('llc_occupancy', 'mbm_total_bytes', 'mbm_local_bytes')
MBM_EVENTS = ('mbm_total_bytes', 'mbm_local_bytes')


def _bits(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]


def _weight(mask: int) -> int:
    return bin(mask).count('1')


def file_stamp(path: str) -> Optional[tuple[int, int]]:
    """(mtime_ns, size) of ``path``, None if absent.

    Tells whether a control file the daemon re-reads has changed.
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


class Footprints:
    """Per-task cache footprints, from an optional JSON file re-read on change.

    A task the file does not name has the file's ``default``, else the
    ``default`` given here; with neither, :data:`DEFAULT_FOOTPRINT` or,
    while it runs, the memory its process has resident if that is more (a
    task streaming through 128 MiB misses in any L3, as on hardware), which
    :meth:`vector` asks ``resident`` for.
    """

    def __init__(self, path: Optional[str] = None,
                 default: Optional[int] = None) -> None:
        self.path = path
        self.base_default = default
        self.default: object = default
        self.table: dict[str, object] = {}
        self._stamp: Optional[tuple[int, int]] = None

    @property
    def uses_comm(self) -> bool:
        return any(k.startswith('comm:') for k in self.table)

    def refresh(self) -> bool:
        """Re-read the file if it changed; True when the values changed."""
        if not self.path:
            return False
        stamp = file_stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        table: dict[str, object] = {}
        if stamp is not None:
            try:
                with open(self.path, encoding='utf-8') as fh:
                    loaded = json.load(fh)
                if not isinstance(loaded, dict):
                    raise ValueError('not a JSON object')
                table = {str(k): v for k, v in loaded.items()}
            except (OSError, ValueError) as exc:
                LOG.warning('Ignoring footprints file %s: %s', self.path, exc)
                return False
        self.default = table.pop('default', self.base_default)
        self.table = table
        return True

    def vector(self, tid: int, comm: Optional[str], ndom: int,
               resident: Callable[[int], Optional[int]] = lambda tid: None
               ) -> list[float]:
        value = self.table.get(str(tid))
        if value is None and comm is not None:
            value = self.table.get('comm:' + comm)
        if value is None:
            value = self.default
        if value is None:
            value = max(DEFAULT_FOOTPRINT, resident(tid) or 0)
        if isinstance(value, dict):
            vec = [0.0] * ndom
            for dom, nbytes in value.items():
                try:
                    if 0 <= int(dom) < ndom:
                        vec[int(dom)] = max(float(nbytes), 0.0)
                except (TypeError, ValueError):
                    continue
            return vec
        try:
            total = max(float(value), 0.0)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            total = float(DEFAULT_FOOTPRINT if self.base_default is None
                          else self.base_default)
        return [total / ndom] * ndom


class Monitor:
    """Occupancy from demand and CBMs; MBM counters integrated over time."""

    def __init__(self, model: 'ResctrlModel') -> None:
        self.model = model
        self.ndom = len(model.profile.domains)
        self.last = model.clock()
        self.counters: dict[int, list[float]] = {0: [0.0] * self.ndom}
        self.rates: Optional[dict[int, list[float]]] = None
        self.demand: Optional[dict[int, list[float]]] = None
        self.demand_at = float('-inf')

    # -- bookkeeping driven by the control plane ------------------------------
    def advance(self) -> None:
        """Integrate the counters up to now with the current rates."""
        now = self.model.clock()
        if self.demand is None:
            self._scan()
            self.demand_at = now
        delta = now - self.last
        if delta > 0:
            for rmid, rate in self._rates().items():
                counter = self.counters.get(rmid)
                if counter is not None:
                    for dom in range(self.ndom):
                        counter[dom] += rate[dom] * delta
        self.last = max(self.last, now)

    def controls_changed(self) -> None:
        self.rates = None

    def rmid_allocated(self, rmid: int) -> None:
        self.counters[rmid] = [0.0] * self.ndom
        if self.demand is not None:
            self.demand[rmid] = [0.0] * self.ndom
        self.rates = None

    def rmid_freed(self, rmid: int, heir: int) -> None:
        self.counters.pop(rmid, None)
        if self.demand is not None:
            gone = self.demand.pop(rmid, [0.0] * self.ndom)
            heir_vec = self.demand.setdefault(heir, [0.0] * self.ndom)
            for dom in range(self.ndom):
                heir_vec[dom] += gone[dom]
        self.rates = None

    def task_moved(self, tid: int, src: int, dst: int) -> None:
        if self.demand is None or src == dst:
            return
        old, new = self._footprint(tid, src), self._footprint(tid, dst)
        src_vec = self.demand.setdefault(src, [0.0] * self.ndom)
        dst_vec = self.demand.setdefault(dst, [0.0] * self.ndom)
        for dom in range(self.ndom):
            src_vec[dom] = max(src_vec[dom] - old[dom], 0.0)
            dst_vec[dom] += new[dom]
        self.rates = None

    # -- reads ---------------------------------------------------------------
    def refresh(self) -> None:
        """Before a read: integrate, then rescan the host if due."""
        changed = self.model.footprints.refresh()
        self.advance()
        now = self.model.clock()
        if changed or now - self.demand_at > DEMAND_TTL:
            self._scan()
            self.demand_at = now

    def _footprint(self, tid: int, rmid: int) -> list[float]:
        """Its demand per domain in the group of ``rmid``: resident memory
        counts outside the default group only (every other thread of the
        host is there: reading each one's state at every scan made the
        scan five times slower, for a group that already holds them all).
        """
        fps = self.model.footprints
        comm = self.model.host.comm(tid) if fps.uses_comm else None
        return fps.vector(tid, comm, self.ndom, self.model.host.resident
                          if rmid != self.model.root.rmid else lambda _tid: None)

    def _scan(self) -> None:
        demand: dict[int, list[float]] = {}
        for tid, (_tgid, grp) in self.model.tasks.snapshot().items():
            vec = demand.setdefault(grp.rmid, [0.0] * self.ndom)
            for dom, nbytes in enumerate(self._footprint(tid, grp.rmid)):
                vec[dom] += nbytes
        self.demand = demand
        self.rates = None

    def _closid_demand(self, grp: Group, dom: int) -> float:
        assert self.demand is not None
        rmids = [grp.rmid] + [m.rmid for m in grp.mon_groups.values()]
        return sum(self.demand.get(r, [0.0] * self.ndom)[dom] for r in rmids)

    def occupancy(self, dom: int) -> dict[int, tuple[float, float]]:
        """closid -> (demand, occupancy) on one domain."""
        prof = self.model.profile
        way = prof.way_size
        entries = []
        for grp in self.model.ctrl_groups():
            mask = self.model.cache_mask(grp.closid, dom)
            entries.append((grp.closid, self._closid_demand(grp, dom), mask,
                            max(_weight(mask), 1)))
        pressure = [0.0] * prof.cbm_len
        for _closid, dem, mask, ways in entries:
            for bit in _bits(mask):
                pressure[bit] += dem / ways
        result = {}
        for closid, dem, mask, ways in entries:
            occ = 0.0
            for bit in _bits(mask):
                if pressure[bit] > 0:
                    occ += dem / ways * min(1.0, way / pressure[bit])
            result[closid] = (dem, min(occ, dem))
        return result

    def _rates(self) -> dict[int, list[float]]:
        if self.rates is not None:
            return self.rates
        assert self.demand is not None
        prof = self.model.profile
        peak = prof.mem_bw / prof.l3_per_socket        # one L3 domain's share
        local = self._local_fraction()
        events = {g.closid: g.mba_event for g in self.model.ctrl_groups()}
        rates: dict[int, list[float]] = {}
        for dom in range(self.ndom):
            occ = self.occupancy(dom)
            per_closid = {}
            for closid, (dem, res) in occ.items():
                rate = max(dem - res, 0.0) * MISS_REFILL_HZ
                cap = self.model.bw_cap(closid, dom, peak)
                if events.get(closid) == 'mbm_local_bytes':
                    cap /= local                 # mba_MBps holds the local rate
                per_closid[closid] = min(rate, cap)
            total = sum(per_closid.values())
            scale = peak / total if total > peak else 1.0
            for grp in self.model.ctrl_groups():
                dem = occ[grp.closid][0]
                for member in [grp] + list(grp.mon_groups.values()):
                    share = (self.demand.get(member.rmid, [0.0] * self.ndom)[dom] / dem
                             if dem > 0 else 0.0)
                    rates.setdefault(member.rmid, [0.0] * self.ndom)[dom] = (
                        per_closid[grp.closid] * scale * share)
        self.rates = rates
        return rates

    def _local_fraction(self) -> float:
        return LOCAL_FRACTION if self.model.profile.sockets > 1 else 1.0

    def raw(self, rmid: int, dom: int, event: str) -> float:
        """An RMID's byte count for an MBM event (call after :meth:`refresh`)."""
        value = self.counters.get(rmid, [0.0] * self.ndom)[dom]
        return value * self._local_fraction() if event == 'mbm_local_bytes' else value

    def read(self, grp: Group, dom: int, event: str, node: int = -1) -> int:
        """One L3 domain's count; under SNC each node holds an even share and
        the ``mon_L3_XX`` file is the sum of its nodes' (``md->sum``).
        """
        self.refresh()
        own = grp.kind == MON or 'ctrl-counts-own' in self.model.diverge
        if event == 'llc_occupancy':
            dem, occ = self.occupancy(dom)[grp.closid]
            if own:
                assert self.demand is not None
                mine = self.demand.get(grp.rmid, [0.0] * self.ndom)[dom]
                occ = occ * mine / dem if dem > 0 else 0.0
            value = occ
        else:
            members = [grp] if own else [grp] + list(grp.mon_groups.values())
            value = sum(self.raw(m.rmid, dom, event) for m in members)
        prof = self.model.profile
        scale = prof.hw_mon_scale
        share = int(value / prof.snc_nodes) // scale * scale
        if node >= 0 or prof.snc_nodes == 1 or 'snc-sum' in self.model.diverge:
            return share
        return share * prof.snc_nodes
