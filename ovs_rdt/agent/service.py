"""``ovs-rdt-agent``: the node agent's loop.

Wakes up on OVSDB update notifications (``Open_vSwitch`` row), on
ovs-vswitchd's pidfile changing (a restart) and on signals; after each it
re-scans ovs-vswitchd's threads in ``/proc`` every few milliseconds for a
short while (new PMD threads appear some time after the change that asked
for them), and it re-scans anyway every ``[ovs] rescan_interval`` seconds,
then also applies the configuration again where resctrl no longer holds
its plan (a process killed half-way through one, a selftest's leftovers).
A thread of its own (:mod:`ovs_rdt.agent.guests`) follows libvirt's
domain events over a read-only connection to ``[libvirt] uri``: a VM
group left behind is removed as its domain stops, a domain started without
the hook is placed, and every ``[agent] reconcile_interval`` seconds both
are checked for every domain.  With ``[metrics] listen`` it serves Prometheus metrics from
threads of its own (:mod:`ovs_rdt.agent.metrics`).  SIGTERM/SIGINT: clean
exit, allocations kept.  SIGHUP: re-read the configuration, re-apply pools,
re-place everything, follow a changed ``[metrics] listen``,
``[metrics] web_config_file`` (or the files it names), ``[policy]`` and
``[libvirt] uri``.
With ``[policy] enabled`` a thread of its own runs the dynamic policy
(:mod:`ovs_rdt.agent.policy`).  The libvirt hook never asks the agent:
a VM starts the same whether the agent runs or not.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import select
import signal
import sys
import time
from typing import Any

from ovs_rdt.agent import agent_state
from ovs_rdt.agent.agent_state import AgentState
from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent.groupwatch import GroupWatch
from ovs_rdt.agent.lock import AgentLock
from ovs_rdt.agent import pmd
from ovs_rdt.agent.policy import PolicyLoop, drops_of
from ovs_rdt.agent.guests import GuestWatch
from ovs_rdt.agent.lasting import LastingError
from ovs_rdt.agent import ovsdb
from ovs_rdt.agent.placement import PmdPlacer
from ovs_rdt.agent.watch import PidfileWatch
from ovs_rdt.agent import webconfig
from ovs_rdt.core.model import pool_group
from ovs_rdt.core.policy import bounds_from
from ovs_rdt.exceptions import RDTError, describe
from ovs_rdt.manager import CacheManager
from ovs_rdt import GROUP_PREFIX, opts
from ovs_rdt.conf import Settings

DESCRIPTION = ('The ovs-rdt node agent: puts OvS PMD threads and ovs-vswitchd '
               'into their cache allocation per the Open_vSwitch other_config '
               'rdt-* keys, follows them live, and reconciles ovsrdt- groups.')

LOG = logging.getLogger(__name__)

#: After a wake-up, re-scan /proc every STEP seconds until UNTIL seconds
#: after it: fast while new threads are likely (they come some ms after the
#: OVSDB change), slower while a restarting ovs-vswitchd may still be
#: initialising.
BURST = ((1.0, 0.005), (5.0, 0.025), (30.0, 0.2))
PROG = 'ovs-rdt-agent'
#: errors{source=...} the agent's own parts count into (zero from the start).
ERROR_SOURCES = ('placement', 'pools', 'reconcile', 'policy', 'libvirt')


def build(settings: Settings) -> Any:
    return CacheManager.from_settings(settings)


class Agent:
    def __init__(self, settings: Settings, argv: list[str] | None,
                 config: tuple[list[str], list[str]] = ([], [])) -> None:
        self.settings = settings
        self.argv = argv
        #: What it runs, for "ovs-rdt status" (:mod:`.agent_state`):
        #: ``config`` is its --config-file and --config-dir values.
        self.state = AgentState(os.getpid(), *config, settings.digests,
                                time.time())
        self.state_path = agent_state.state_path(settings.resctrl.root)
        #: The configuration files changed since they were read.
        self._outdated = LastingError(LOG, logging.WARNING)
        self.groups = GroupWatch()
        self.manager = build(settings)
        #: Event counters, served by the metrics endpoint.
        self.counters = Counters()
        for source in ERROR_SOURCES:
            self.counters.inc('errors', 0, source=source)
        self.placer = PmdPlacer(self.manager, self.counters)
        #: libvirt's view and the guests' reconciliation (a thread).
        self.guests = GuestWatch(settings, build, self.counters)
        self.metrics: Any = None
        #: The L3 domains of the PMD threads in the policy's high-priority
        #: pool, refreshed by the main loop.
        self._pmd_cache_domains: frozenset[int] = frozenset()
        self.policy = PolicyLoop(build, self.counters, self.policy_view)
        self._rfd, self._wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._stop = self._reload = False
        self._woken = -1e9
        self._pools_ok = False
        self._scan_key: tuple | None = None
        #: source ('placement', 'pools') -> its error in force: each is
        #: logged once while it lasts, whatever the others do.
        self._errors: dict[str, LastingError] = {}
        self.ovsdb: Any = None
        self.watch: Any = None

    # -- wake-ups (any thread, signal handlers) ---------------------------
    def wake(self) -> None:
        try:
            os.write(self._wfd, b'x')
        except BlockingIOError:
            pass

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if signum == signal.SIGHUP:
            self._reload = True
        else:
            self._stop = True
        self.wake()

    # -- steps ---------------------------------------------------------------
    def apply_pools(self) -> bool:
        """The configured pools and default group (retried until done)."""
        try:
            self.manager.apply()
            log_own_groups(self.manager)
        except (RDTError, OSError) as exc:
            self._log_error('cannot apply the configured pools (retrying '
                            'every [ovs] rescan_interval): %s' % describe(exc),
                            'pools')
            self._pools_ok = False
        else:
            self._recovered('pools', 'the configured pools are applied')
            self._pools_ok = True
        return self._pools_ok

    def drifted(self) -> bool:
        """Whether resctrl no longer holds what ``apply`` would make: an
        ``apply``, hook or agent killed half-way through a plan left a
        group of ours ``shareable`` or its ways half-moved, a selftest
        killed left its groups.  (A plan refused now: ``apply_pools``
        says why when it retries.)
        """
        try:
            return bool(self.manager.preview(prune=True).steps)
        except (RDTError, OSError):
            return False
        except Exception:  # never let a bug end the agent
            self.counters.inc('errors', source='pools')
            self._error('pools').fail(
                'internal error', 'unexpected error comparing resctrl with '
                'the configuration', exc_info=True)
            return False

    def reload(self) -> None:
        LOG.info('SIGHUP: re-reading the configuration')
        try:
            settings, args = opts.load(self.argv, PROG)
            bounds = bounds_from(settings)
            check_web_config(settings)
        except RDTError as exc:
            LOG.error('keeping the previous configuration: %s', exc)
            self._publish(reload_error=str(exc))
            return
        old = self.settings.ovs
        log_warnings(settings)
        self.settings = settings
        files, dirs = opts.config_args(args)
        self._publish(config_files=files, config_dirs=dirs,
                      read=settings.digests, loaded=time.time(),
                      reload_error=None)
        self._outdated.recover('running the configuration files as they are '
                               'now')
        self.manager = build(settings)
        self.placer.manager = self.manager
        self.policy.configure(settings, bounds)
        self.guests.configure(settings)
        if settings.ovs.connection != old.connection:
            LOG.warning('[ovs] connection changed: restart %s to use it '
                        '(still connected to %s)', PROG, old.connection)
        if settings.ovs.vswitchd_pidfile != old.vswitchd_pidfile and \
                self.watch is not None:
            self.watch.close()
            self.watch = PidfileWatch(settings.ovs.vswitchd_pidfile)
        self.apply_pools()
        self.serve_metrics()

    def serve_metrics(self) -> None:
        """Start, move or stop the metrics endpoint as configured."""
        if self.metrics is None:
            if not self.settings.metrics.listen:
                return
            from ovs_rdt.agent.metrics import Endpoint
            self.metrics = Endpoint(self.counters, self.placer.pmd_groups,
                                    self.guests.names,
                                    lambda: bool(self.config_changes()))
        self.metrics.configure(self.settings)

    def step(self, force: bool) -> None:
        _seq, knobs = self.ovsdb.knobs()
        scan = pmd.scan(self.settings.ovs.vswitchd_pidfile)
        if scan.key != self._scan_key:
            if scan.pid is not None and self._scan_key is not None and \
                    scan.key[0] != self._scan_key[0]:
                LOG.info('ovs-vswitchd now runs as pid %d', scan.pid)
            self._scan_key = scan.key
        try:
            status = self.placer.sync(knobs, scan, force)
        except (RDTError, OSError) as exc:  # e.g. resctrl unmounted
            status = 'error: %s' % describe(exc)
            self._log_error(status)
        except Exception as exc:  # never let a bug end the agent
            status = 'error: internal error: %s' % exc
            self.counters.inc('errors', source='placement')
            self._error('placement').fail(
                status, 'unexpected error placing ovs-vswitchd threads',
                exc_info=True)
        else:
            if status and status.startswith('ok'):
                self._recovered('placement', status)
        if status:
            self.ovsdb.set_status(status)
            if status != self.state.ovs_status:
                self._publish(ovs_status=status)
        self._pmd_cache_domains = self._policy_pmds(scan)

    def _policy_pmds(self, scan: Any) -> frozenset[int]:
        """The L3 domains where the policy's high-priority pool holds PMD
        threads (none: the pool holds no PMD thread).
        """
        bounds = self.policy.bounds
        good = self.placer.good
        if bounds is None or good is None or \
                good.pmd_group != pool_group(bounds.high_priority) or \
                not scan.cores:
            return frozenset()
        return self.manager.resctrl.platform(cpus=True).domains_of_cpus(
            scan.cores)

    def policy_view(self) -> tuple[frozenset[int], int | None]:
        """For each policy interval: the PMD threads' cache domains and the
        drop counters of the ports they poll, read now from the OVSDB
        replica (ovs-vswitchd refreshes them every stats-update-interval),
        not when the main loop last woke up.
        """
        cache_domains = self._pmd_cache_domains
        if not cache_domains:
            return frozenset(), None
        stats = self.ovsdb.interface_stats()
        if not stats:
            # No connection, or the replica refilling after a reconnect:
            # unknown, not zero (the next total would read as new drops).
            return cache_domains, None
        return cache_domains, drops_of(stats)

    def _publish(self, **changes: Any) -> None:
        """Replace what ``ovs-rdt status`` reads of this agent."""
        self.state = dataclasses.replace(self.state, **changes)
        agent_state.publish(self.state_path, self.state)

    def config_changes(self) -> list[str]:
        """How the configuration files differ from what this agent runs."""
        return agent_state.outdated(self.state)

    def check_config(self) -> None:
        """Log once while the files differ from what this agent runs, and
        what to do about it (and once when they no longer do).
        """
        changed = self.config_changes()
        if not changed:
            self._outdated.recover('the configuration files are again what '
                                   'this agent runs')
            return
        self._outdated.fail(
            '; '.join(changed), 'the configuration changed since this agent '
            'read it (%s): it still runs the configuration it read at %s, '
            'and keeps its pools so; to apply the files: %s',
            '; '.join(changed), agent_state.when(self.state.loaded),
            agent_state.reload_hint(os.getpid()))

    def _log_error(self, text: str, source: str = 'placement') -> None:
        """Count an error; log it once, not at every re-scan while it lasts."""
        self.counters.inc('errors', source=source)
        self._error(source).fail(text, '%s (retrying)', text)

    def _recovered(self, source: str, text: str) -> None:
        self._error(source).recover('recovered: %s', text)

    def _error(self, source: str) -> LastingError:
        return self._errors.setdefault(source, LastingError(LOG))

    # -- the loop ------------------------------------------------------------
    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        ovs = self.settings.ovs
        self.ovsdb = ovsdb.Ovsdb(ovs.connection, ovs.ovsdb_timeout, self.wake)
        self.watch = PidfileWatch(ovs.vswitchd_pidfile)
        self._publish()
        self.apply_pools()
        self.serve_metrics()
        self.policy.configure(self.settings, bounds_from(self.settings))
        self.ovsdb.start()
        self.guests.start()
        LOG.info('%s started (OVSDB %s, ovs-vswitchd pidfile %s)', PROG,
                 ovs.connection, ovs.vswitchd_pidfile)
        now = time.monotonic()
        next_rescan = now
        try:
            while not self._stop:
                now = time.monotonic()
                wait = next_rescan - now
                for until, step in BURST:
                    if now - self._woken < until:
                        wait = min(wait, step)
                        break
                watch = self.watch
                wfd = watch.fileno()
                fds = [self._rfd] if wfd is None else [self._rfd, wfd]
                ready, _, _ = select.select(fds, [], [], max(wait, 0))
                woken = False
                if self._rfd in ready:
                    self._drain()
                    woken = True
                # Only the pidfile: the run directory also holds sockets
                # (vhost-user ports, ctl) that come and go with every VM.
                if wfd is not None and wfd in ready and watch.drain():
                    woken = True
                if woken:
                    self._woken = time.monotonic()
                if self._stop:
                    break
                if self._reload:
                    self._reload = False
                    self.reload()
                    next_rescan = 0
                now = time.monotonic()
                force = now >= next_rescan
                if force:
                    self.watch.rearm()
                    # (what changed, before its own repair writes)
                    self.groups.look(self.manager.resctrl)
                    if not self._pools_ok or self.drifted():
                        self.apply_pools()
                    if self.metrics is not None:
                        self.metrics.retry()
                    self.check_config()
                self.step(force)
                if force:
                    # From the end of the pass: one that took longer than
                    # the interval (a refusal planned again for SETTLE, a
                    # wait for the lock) must not start the next at once,
                    # or a refusal that lasts is tried again without pause.
                    next_rescan = (time.monotonic() +
                                   self.settings.ovs.rescan_interval)
        finally:
            LOG.info('%s stopping; allocations are kept', PROG)
            agent_state.withdraw(self.state_path)
            if self.metrics is not None:
                self.metrics.stop()
            self.policy.stop()
            self.guests.stop()
            self.ovsdb.stop()
            self.watch.close()
        return 0

    def _drain(self) -> None:
        try:
            while os.read(self._rfd, 4096):
                pass
        except BlockingIOError:
            pass


def check_web_config(settings: Settings) -> None:
    """ConfigError naming the field if ``[metrics] web_config_file`` is bad."""
    if settings.metrics.web_config_file:
        webconfig.load(settings.metrics.web_config_file)


def log_warnings(settings: Settings) -> None:
    """The configuration's warnings (:attr:`ovs_rdt.conf.Settings.warnings`)."""
    for text in settings.warnings:
        LOG.warning('%s', text)


def log_own_groups(manager: Any) -> list[str]:
    """The ``ovsrdt-`` groups there are, logged (when pools are applied)."""
    names = [n for n in manager.resctrl.group_names()
             if n.startswith(GROUP_PREFIX)]
    if names:
        LOG.info('ovsrdt- groups found: %s', ', '.join(names))
    return names


def main(argv: list[str] | None = None) -> int:
    try:
        settings, args = opts.load(argv, PROG, description=DESCRIPTION)
    except RDTError as exc:
        print('%s: error: %s' % (PROG, exc), file=sys.stderr)
        return 2
    root = settings.resctrl.root
    lock = AgentLock(root)
    try:
        acquired = lock.acquire()
    except RDTError as exc:
        print('%s: error: %s' % (PROG, exc), file=sys.stderr)
        return 1
    if not acquired:
        print('%s: error: another ovs-rdt-agent is running for [resctrl] '
              'root %s (pid %s)' % (PROG, root, lock.holder()),
              file=sys.stderr)
        return 1
    try:
        return _run(settings, argv, opts.config_args(args))
    finally:
        lock.release()


def _run(settings: Settings, argv: list[str] | None,
         config: tuple[list[str], list[str]] = ([], [])) -> int:
    opts.setup_logging(settings)
    try:
        bounds_from(settings)
        check_web_config(settings)
    except RDTError as exc:
        print('%s: error: %s' % (PROG, exc), file=sys.stderr)
        return 2
    log_warnings(settings)
    try:
        return Agent(settings, argv, config).run()
    except (RDTError, OSError) as exc:
        LOG.error('%s: %s', PROG, describe(exc))
        return 1
    except Exception as exc:  # a bug: one line, the traceback at debug
        LOG.debug('internal error', exc_info=True)
        LOG.error('%s: internal error: %s: %s (run with --debug for the '
                  'traceback, and please report it)', PROG,
                  type(exc).__name__, exc)
        return 1


if __name__ == '__main__':
    sys.exit(main())
