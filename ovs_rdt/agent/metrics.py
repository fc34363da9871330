"""The agent's Prometheus endpoint: ``[metrics] listen`` -> ``GET /metrics``.

A custom collector (:class:`ResctrlCollector`) reads resctrl at each scrape
through :func:`ovs_rdt.sampling.sample` (one shared lock, file reads only)
and the agent's :class:`~ovs_rdt.agent.counters.Counters`; the
``prometheus_client`` library formats it (text format 0.0.4, or OpenMetrics
when the scraper asks for it).  The HTTP server runs in threads of its own
(:class:`Endpoint`): a scrape never waits for the agent's loop and the loop
never waits for a scrape.  Names, types and labels: doc/metrics.md.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.core import InfoMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent import httpd, webconfig
from ovs_rdt.agent.lasting import LastingError
from ovs_rdt.conf import Settings
from ovs_rdt.core.mbm import Epochs
from ovs_rdt.core.model import vm_uuid
from ovs_rdt.exceptions import RDTError, describe
from ovs_rdt.inputs.listen import parse_listen
from ovs_rdt import members, procfs, sampling
from ovs_rdt import POOL_GROUP_PREFIX
from ovs_rdt.resctrl import Resctrl

LOG = logging.getLogger(__name__)

#: A scrape waits at most this long (or [resctrl] lock_timeout if shorter)
#: for the shared lock; then it serves the agent's counters only.
SCRAPE_LOCK_TIMEOUT = 5.0
GROUP_LABELS = ('group', 'domain') + members.LABELS
TASK_LABELS = ('group',) + members.LABELS
#: ``ovs_rdt_pool_vm_info``: one series per VM in a pool.
POOL_VM_LABELS = ('group', 'vm', 'uuid')
#: Counters families -> (metric name without _total, help, label names).
EVENT_FAMILIES = (
    ('policy_decisions', 'ovs_rdt_policy_decisions',
     'Decisions of the dynamic policy that moved ways between its pools.',
     ('domain', 'direction', 'reason')),
    ('errors', 'ovs_rdt_errors',
     'Failed attempts of the agent\'s parts (placement, pools, reconcile, '
     'policy, metrics, libvirt).', ('source',)),
)
#: () -> uuid -> domain name from libvirt, or None when it does not answer.
VmNames = Callable[[], 'dict[str, str] | None']
MBM_EVENTS = (('mbm_total_bytes', 'ovs_rdt_mbm_total_bytes',
               'Bytes the group\'s tasks moved between the L3 cache and '
               'memory (MBM total), as the kernel counts them.'),
              ('mbm_local_bytes', 'ovs_rdt_mbm_local_bytes',
               'Bytes the group\'s tasks moved between the L3 cache and '
               'local memory (MBM local), as the kernel counts them.'))


class Labeller:
    """The ``vm``/``uuid``/``pmd`` labels of each group, kept stable.

    A VM's dedicated group keeps the domain name it was first seen with
    for as long as it lives (a series' labels must not change while its
    VM starts or stops); the name is libvirt's (``vm_names()``: the
    agent's read-only connection, None while libvirt does not answer),
    else the one on the command line of the QEMU process among its tasks.  ``pmd`` is
    where the agent places the PMD threads (``pmd_groups()``), not what a
    scan of the moment finds: it holds through an ovs-vswitchd restart.
    """

    def __init__(self, vm_names: VmNames,
                 pmd_groups: Callable[[], dict[str, str]],
                 proc: str = procfs.PROC) -> None:
        self.vm_names = vm_names
        self.pmd_groups = pmd_groups
        self.proc = proc
        #: group -> (inode, tasks looked at, domain name found)
        self._vms: dict[str, tuple[int, frozenset[int], str]] = {}

    def labels(self, groups: list[sampling.GroupSample]) -> dict[str, dict[str, str]]:
        """group name -> {vm, uuid, pmd} for one scrape."""
        pmds = self.pmd_groups()
        names = self.vm_names()
        out = {}
        for grp in groups:
            uuid = vm_uuid(grp.name) or ''
            out[grp.name] = {'vm': self._vm(grp, uuid, names) if uuid else '',
                             'uuid': uuid, 'pmd': pmds.get(grp.name, '')}
        self._vms = {n: v for n, v in self._vms.items() if n in out}
        return out

    def pool_vms(self, groups: list[sampling.GroupSample]
                 ) -> list[tuple[str, str, str]]:
        """(group, VM name, uuid) of every VM with threads in a pool's
        group now: named by libvirt, else from its QEMU's command line.
        """
        names = self.vm_names()
        out = []
        for grp in groups:
            if not grp.name.startswith(POOL_GROUP_PREFIX):
                continue
            for member in members.describe(grp.tasks, self.proc,
                                           vm_names=names):
                if member['kind'] == 'vm':
                    out.append((grp.name, member['name'],
                                member['uuid'].lower()))
        return out

    def _vm(self, grp: sampling.GroupSample, uuid: str,
            names: dict[str, str] | None) -> str:
        known = self._vms.get(grp.name)
        tasks = frozenset(grp.tasks)
        if known is not None and known[0] == grp.ident and (
                known[2] or known[1] == tasks and names is None):
            return known[2]
        name = (names or {}).get(uuid.lower(), '')
        if not name:
            name = members.vm_name(grp.name,
                                   members.describe(grp.tasks, self.proc))
        if names is None or uuid.lower() in names:
            self._vms[grp.name] = (grp.ident, tasks, name)
        else:
            # libvirt answers but does not know it yet (its event is on
            # its way): asked again at the next scrape.
            self._vms.pop(grp.name, None)
        return name


class ResctrlCollector:
    """Reads resctrl and the agent's counters at every scrape."""

    def __init__(self, resctrl: Resctrl, counters: Counters,
                 labeller: Labeller,
                 clock: Callable[[], float] = time.time,
                 outdated: Callable[[], bool] = lambda: False) -> None:
        self.resctrl = resctrl
        self.counters = counters
        self.labeller = labeller
        self.clock = clock
        #: Whether the configuration files differ from what the agent runs.
        self.outdated = outdated
        self.epochs = Epochs()
        self._lock = threading.Lock()
        self._error = LastingError(LOG)
        counters.inc('errors', 0, source='metrics')

    def use(self, resctrl: Resctrl, labeller: Labeller) -> None:
        """Read through ``resctrl`` from the next scrape on (SIGHUP)."""
        with self._lock:
            self.resctrl, self.labeller = resctrl, labeller

    def describe(self) -> list[Metric]:
        return list(self._families().values())

    def collect(self) -> Iterator[Metric]:
        with self._lock:     # scrapes in parallel threads: one at a time
            families = self._families()
            try:
                groups = sampling.sample(self.resctrl)
            except (RDTError, OSError) as exc:
                self._failed(exc)
                groups = []
            else:
                self._error.recover('metrics: resctrl reads work again')
            self._add_groups(families, groups)
            self._add_events(families)
            families['libvirt'].add_metric(
                [], 0 if self.labeller.vm_names() is None else 1)
            families['outdated'].add_metric([], 1 if self.outdated() else 0)
            for member in sorted(set(self.labeller.pool_vms(groups))):
                families['pool_vm'].add_metric(list(member), {})
        return iter(families.values())

    def _failed(self, exc: BaseException) -> None:
        text = describe(exc)
        self.counters.inc('errors', source='metrics')
        self._error.fail(text, 'metrics: cannot read resctrl (serving the '
                         'agent\'s counters only): %s', text)

    @staticmethod
    def _families() -> dict[str, Any]:
        out: dict[str, Any] = {
            'occupancy': GaugeMetricFamily(
                'ovs_rdt_llc_occupancy_bytes', 'L3 cache the group\'s tasks '
                'occupy (CMT llc_occupancy).', labels=GROUP_LABELS,
                unit='bytes'),
        }
        for event, name, help_ in MBM_EVENTS:
            out[event] = CounterMetricFamily(name, help_, labels=GROUP_LABELS,
                                             unit='bytes')
        out['ways'] = GaugeMetricFamily(
            'ovs_rdt_l3_ways', 'L3 cache ways in the group\'s capacity '
            'bitmask.', labels=GROUP_LABELS)
        out['cbm'] = GaugeMetricFamily(
            'ovs_rdt_l3_cbm', 'The group\'s L3 capacity bitmask, as a number '
            '(0x7f0 = 2032).', labels=GROUP_LABELS)
        out['tasks'] = GaugeMetricFamily(
            'ovs_rdt_group_tasks', 'Tasks (threads) in the group.',
            labels=TASK_LABELS)
        for family, name, help_, labels in EVENT_FAMILIES:
            out[family] = CounterMetricFamily(name, help_, labels=labels)
        out['pool_vm'] = InfoMetricFamily(
            'ovs_rdt_pool_vm', 'A VM with threads in a pool\'s group (value '
            '1, one series per VM and pool).', labels=POOL_VM_LABELS)
        out['libvirt'] = GaugeMetricFamily(
            'ovs_rdt_libvirt_connected', '1 while the agent\'s read-only '
            'connection to [libvirt] uri is up (the vm labels are libvirt\'s '
            'domain names), 0 while libvirt does not answer (names from QEMU '
            'command lines).')
        out['outdated'] = GaugeMetricFamily(
            'ovs_rdt_config_outdated', '1 while the configuration files '
            'differ from what the agent read (it runs the old configuration '
            'until SIGHUP: systemctl reload ovs-rdt-agent), else 0.')
        return out

    def _add_groups(self, families: dict[str, Any],
                    groups: list[sampling.GroupSample]) -> None:
        extra = self.labeller.labels(groups)
        values = {(g.name, dom, event): vals[event]
                  for g in groups for dom, vals in g.mon.items()
                  for event, _n, _h in MBM_EVENTS if event in vals}
        created = self.epochs.observe(self.clock(),
                                      {g.name: g.ident for g in groups},
                                      values)
        for grp in groups:
            more = [extra[grp.name][k] for k in members.LABELS]
            families['tasks'].add_metric([grp.label] + more, len(grp.tasks))
            for dom in sorted(set(grp.l3) | set(grp.mon)):
                labels = [grp.label, str(dom)] + more
                mask = grp.l3.get(dom)
                if mask is not None:
                    families['ways'].add_metric(labels, mask.count)
                    families['cbm'].add_metric(labels, mask.value)
                vals = grp.mon.get(dom, {})
                if 'llc_occupancy' in vals:
                    families['occupancy'].add_metric(labels,
                                                     vals['llc_occupancy'])
                for event, _n, _h in MBM_EVENTS:
                    if event in vals:
                        families[event].add_metric(
                            labels, vals[event],
                            created=created.get((grp.name, dom, event)))

    def _add_events(self, families: dict[str, Any]) -> None:
        for family, _name, _help, labels in EVENT_FAMILIES:
            for key, value in sorted(self.counters.snapshot(family).items()):
                have = dict(key)
                families[family].add_metric([have.get(n, '') for n in labels],
                                            value)


class Endpoint:
    """The HTTP server of ``[metrics] listen``, (re)started as configured.

    ``[metrics] web_config_file`` adds TLS and basic auth
    (:mod:`ovs_rdt.agent.webconfig`, served by :mod:`ovs_rdt.agent.httpd`);
    it is read at start and at every SIGHUP, and the server restarts when
    it or a file it names changed (certificate renewal: SIGHUP).  A bad one
    at SIGHUP keeps the one in use, logged.  Binding failures (address in
    use, ...) are logged once, counted as ``errors{source="metrics"}`` and
    retried by :meth:`retry`; the agent runs on without metrics meanwhile.
    """

    def __init__(self, counters: Counters,
                 pmd_groups: Callable[[], dict[str, str]] = dict,
                 vm_names: VmNames = lambda: None,
                 outdated: Callable[[], bool] = lambda: False) -> None:
        self.counters = counters
        self.pmd_groups = pmd_groups
        self.vm_names = vm_names
        self.outdated = outdated
        self.listen: str | None = None
        self.web: Any = None
        self.collector: ResctrlCollector | None = None
        self._server: Any = None
        self._error = LastingError(LOG)

    def configure(self, settings: Settings) -> None:
        """Follow ``settings`` (at start and on SIGHUP)."""
        resctrl = Resctrl.from_settings(settings)
        resctrl.lock_timeout = min(resctrl.lock_timeout, SCRAPE_LOCK_TIMEOUT)
        labeller = Labeller(self.vm_names, self.pmd_groups)
        if self.collector is None:
            self.collector = ResctrlCollector(resctrl, self.counters, labeller,
                                              outdated=self.outdated)
        else:
            self.collector.use(resctrl, labeller)
        listen = settings.metrics.listen
        web = self.web
        path = settings.metrics.web_config_file
        if not path:
            web = None
        else:
            try:
                web = webconfig.load(path)
            except RDTError as exc:
                LOG.error('keeping the metrics endpoint\'s web config as it '
                          'was: %s', exc)
        if listen != self.listen or self._server is None or \
                _fingerprint(web) != _fingerprint(self.web):
            self.stop()
            self.listen, self.web = listen, web
            self.retry()

    def retry(self) -> None:
        """Start the server if it should run and does not."""
        if self._server is not None or not self.listen:
            return
        assert self.collector is not None
        host, port = parse_listen(self.listen)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        ProcessCollector(registry=registry)
        try:
            self._server = httpd.serve(host, port, registry, self.web)
        except OSError as exc:
            self.counters.inc('errors', source='metrics')
            text = 'cannot serve metrics on %s: %s' % (self.listen,
                                                       describe(exc))
            self._error.fail(text, '%s (retrying every [ovs] '
                             'rescan_interval)', text)
            return
        self._error.recover()
        LOG.info('serving metrics on %s://%s/metrics%s',
                 'http' if self.web is None else self.web.scheme, self.listen,
                 '' if self.web is None or not self.web.users else
                 ' (basic auth: %d users)' % len(self.web.users))

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()


def _fingerprint(web: Any) -> bytes | None:
    return None if web is None else web.fingerprint
