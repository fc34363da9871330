"""What the soak measures (bench/soak.py): a scrape of both agents'
metrics every second, a row per node every sample (``soak.csv``), the plot
(``soak.png``) and the closing figures.
"""
from __future__ import annotations

import csv
import os
import threading
import time
import urllib.request
from typing import Any, Sequence

from ovs_rdt import GROUP_PREFIX, VM_GROUP_PREFIX
from tests.stress.bed import HOOK_TIME

#: The figures the issue sets: RSS growth from the first window after the
#: warm-up to the last, and the hook's p99 in the last window against the
#: first.
MAX_RSS_GROWTH = 0.05
MAX_P99_RATIO = 1.2
COLUMNS = ('events', 'elapsed_s', 'node', 'agent_pid', 'agent_rss_kib',
           'agent_fds', 'agent_threads', 'groups_ours', 'closids_used',
           'closids_total', 'guests_running', 'guests_with_group', 'hook_n',
           'hook_p50_ms', 'hook_p99_ms', 'start_p50_ms', 'start_p99_ms',
           'scrape_n', 'scrape_p50_ms', 'scrape_p99_ms', 'scrape_failed',
           'faults', 'refused', 'violations')


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (nearest rank); 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def proc_figures(pid: int | None) -> tuple[int, int, int]:
    """(RSS KiB, open fds, threads) of ``pid``; zeros when it is gone."""
    if pid is None:
        return 0, 0, 0
    try:
        with open('/proc/%d/status' % pid, encoding='ascii') as fh:
            rss = next(int(ln.split()[1]) for ln in fh
                       if ln.startswith('VmRSS:'))
        return (rss, len(os.listdir('/proc/%d/fd' % pid)),
                len(os.listdir('/proc/%d/task' % pid)))
    except (OSError, StopIteration):
        return 0, 0, 0


class Scraper(threading.Thread):
    """GET /metrics of every node's agent once a second."""

    def __init__(self, nodes: Sequence[Any]) -> None:
        super().__init__(daemon=True, name='soak-scraper')
        self.nodes = nodes
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        #: Held during a scrape (a sample takes it to count fds and
        #: threads without the scrape's connection and thread).
        self.busy = threading.Lock()
        self.times: dict[str, list[float]] = {n.name: [] for n in nodes}
        self.failed: dict[str, int] = {n.name: 0 for n in nodes}

    def run(self) -> None:
        while not self.stopping.wait(1.0):
            for node in self.nodes:
                with self.busy:     # not while a sample counts fds
                    self.scrape(node)

    def scrape(self, node: Any) -> None:
        began = time.monotonic()
        try:
            with urllib.request.urlopen('http://127.0.0.1:%d/metrics'
                                        % node.port, timeout=10) as resp:
                ok = b'ovs_rdt_' in resp.read()
        except OSError:
            ok = False
        with self.lock:
            if ok:
                self.times[node.name].append(time.monotonic() - began)
            else:      # node b's agent is killed now and then
                self.failed[node.name] += 1

    def take(self, name: str) -> tuple[list[float], int]:
        with self.lock:
            out = self.times[name], self.failed[name]
            self.times[name] = []
            self.failed[name] = 0
        return out


class Report:
    """The CSV, the plot and the summary."""

    def __init__(self, out: str, nodes: Sequence[Any]) -> None:
        self.out = out
        self.nodes = nodes
        self.csv = os.path.join(out, 'soak.csv')
        self.png = os.path.join(out, 'soak.png')
        self.rows: list[dict[str, Any]] = []
        self.scraper = Scraper(nodes)
        self.began = time.monotonic()
        self.offsets = {n.name: 0 for n in nodes}

    def start(self) -> None:
        self.began = time.monotonic()
        with open(self.csv, 'w', newline='', encoding='utf-8') as fh:
            csv.writer(fh).writerow(COLUMNS)
        self.scraper.start()

    def stop(self) -> None:
        self.scraper.stopping.set()

    def hook_ms(self, node: Any) -> list[float]:
        """The hook's own time per event logged since the last sample."""
        try:
            with open(node.hook_log, 'rb') as fh:
                fh.seek(self.offsets[node.name])
                data = fh.read()
        except FileNotFoundError:
            return []
        cut = data.rfind(b'\n') + 1
        self.offsets[node.name] += cut
        out = []
        for raw in data[:cut].decode('utf-8', 'replace').splitlines():
            match = HOOK_TIME.search(raw)
            if match:
                out.append(float(match['ms']))
        return out

    def sample(self, done: int, counts: dict[str, int], violations: int,
               guests: Sequence[Any]) -> None:
        for node in self.nodes:
            pid = node.agent.pid if node.agent is not None else None
            with self.scraper.busy:
                rss, fds, threads = proc_figures(pid)
            names = node.rc.group_names()
            hook = self.hook_ms(node)
            starts, node.start_times = node.start_times, []
            scrapes, failed = self.scraper.take(node.name)
            mine = [g for g in guests if g.node is node]
            row = {
                'events': done,
                'elapsed_s': round(time.monotonic() - self.began, 1),
                'node': node.name, 'agent_pid': pid, 'agent_rss_kib': rss,
                'agent_fds': fds, 'agent_threads': threads,
                'groups_ours': sum(n.startswith(GROUP_PREFIX) for n in names),
                'closids_used': len(names),
                'closids_total': node.rc.platform().num_closids,
                'guests_running': len(mine),
                'guests_with_group': sum(
                    1 for g in mine if g.group and
                    g.group.startswith(VM_GROUP_PREFIX)),
                'hook_n': len(hook),
                'hook_p50_ms': round(pct(hook, 0.5), 1),
                'hook_p99_ms': round(pct(hook, 0.99), 1),
                'start_p50_ms': round(pct(starts, 0.5) * 1000, 1),
                'start_p99_ms': round(pct(starts, 0.99) * 1000, 1),
                'scrape_n': len(scrapes),
                'scrape_p50_ms': round(pct(scrapes, 0.5) * 1000, 1),
                'scrape_p99_ms': round(pct(scrapes, 0.99) * 1000, 1),
                'scrape_failed': failed,
                'faults': counts.get('faults', 0),
                'refused': sum(v for k, v in counts.items()
                               if k.endswith('refused')),
                'violations': violations,
            }
            self.rows.append(row)
            with open(self.csv, 'a', newline='', encoding='utf-8') as fh:
                csv.writer(fh).writerow([row[c] for c in COLUMNS])
        self.plot()

    def series(self, node: str, column: str) -> tuple[list[int], list[float]]:
        rows = [r for r in self.rows if r['node'] == node]
        return [r['events'] for r in rows], [float(r[column]) for r in rows]

    def plot(self) -> None:
        try:
            import matplotlib
            matplotlib.use('Agg')
            import matplotlib.pyplot as plt
        except ImportError:
            return
        panels = (('agent RSS (MiB)', ('agent_rss_kib',), 1 / 1024),
                  ('agent open fds', ('agent_fds',), 1),
                  ('agent threads', ('agent_threads',), 1),
                  ('groups, CLOSIDs, guests', ('closids_used', 'groups_ours',
                                               'guests_running'), 1),
                  ('hook time per event (ms)', ('hook_p50_ms',
                                                'hook_p99_ms'), 1),
                  ('metrics scrape (ms)', ('scrape_p50_ms',
                                           'scrape_p99_ms'), 1))
        fig, axes = plt.subplots(2, 3, figsize=(15, 8))
        for ax, (title, columns, scale) in zip(axes.flat, panels):
            for node in self.nodes:
                for column in columns:
                    xs, ys = self.series(node.name, column)
                    ax.plot(xs, [y * scale for y in ys], marker='.',
                            label='%s %s' % (node.name, column))
            ax.set_title(title)
            ax.set_xlabel('events')
            ax.legend(fontsize='x-small')
        fig.suptitle('ovs-rdt soak: node a (Gold 6230, agent never '
                     'restarted), node b (E7-8890 v4, agent killed)')
        fig.tight_layout()
        fig.savefig(self.png, dpi=80)
        plt.close(fig)

    # -- the closing figures ------------------------------------------------
    def summary(self, done: int, elapsed: float, counts: dict[str, int],
                violations: list[str], leaks: list[str],
                errors: list[str], strict: bool) -> int:
        print('soak: %d events in %.0f s (%.2f/s), %d faults'
              % (done, elapsed, done / elapsed, counts.get('faults', 0)))
        for key in sorted(counts):
            if key != 'fault at':
                print('  %-34s %d' % (key, counts[key]))
        # Events that failed, not by ovs-rdt: a few are the machine's (two
        # libvirtds picking one migration port); many are a broken run.
        failed = bool(violations or leaks) or len(errors) * 100 > done
        print('events failed, not by ovs-rdt: %d' % len(errors))
        for line in errors[:10]:
            print('  ' + line)
        print('invariant violations: %d' % len(violations))
        for line in violations[:20]:
            print('  ' + line)
        print('leaked (groups, CLOSIDs, QEMUs) after the last stop: %s'
              % ('; '.join(leaks) or 'none'))
        for node in self.nodes:
            rows = [r for r in self.rows if r['node'] == node.name]
            # The first window is the warm-up; the last row is after every
            # guest stopped.
            windows = rows[1:-1] or rows
            first, last = windows[0], windows[-1]
            print('node %s (agent %s):' % (node.name, 'killed and restarted'
                                           if node.restartable else
                                           'never restarted'))
            if not node.restartable:
                growth = (last['agent_rss_kib'] - first['agent_rss_kib']) / \
                    max(1, first['agent_rss_kib'])
                # (A dead agent reads 0 and is a violation at its sample.)
                ok = growth <= MAX_RSS_GROWTH
                failed |= strict and not ok
                print('  agent RSS %d -> %d KiB (%+.1f%%, target <= %+.0f%%: '
                      '%s)' % (first['agent_rss_kib'], last['agent_rss_kib'],
                               growth * 100, MAX_RSS_GROWTH * 100,
                               'met' if ok else 'NOT met'))
                for column in ('agent_fds', 'agent_threads'):
                    # The highest of the first three windows against the
                    # last three (one sample may catch a passing thread).
                    values = [r[column] for r in windows]
                    flat = max(values[-3:]) <= max(values[:3])
                    failed |= strict and not flat
                    print('  %s %d -> %d (min %d, max %d: %s)' % (
                        column, values[0], values[-1], min(values),
                        max(values), 'flat' if flat else 'GROWS'))
            p99 = [r['hook_p99_ms'] for r in windows if r['hook_n']]
            if p99:
                ratio = p99[-1] / max(p99[0], 0.1)
                ok = ratio <= MAX_P99_RATIO
                failed |= strict and not ok
                print('  hook p99 %.1f -> %.1f ms (last/first %.2fx, target '
                      '<= %.1fx: %s); p50 %.1f -> %.1f ms' % (
                          p99[0], p99[-1], ratio, MAX_P99_RATIO,
                          'met' if ok else 'NOT met',
                          windows[0]['hook_p50_ms'],
                          windows[-1]['hook_p50_ms']))
            scrape = [r['scrape_p99_ms'] for r in windows if r['scrape_n']]
            if scrape:
                print('  metrics scrape p99 %.1f -> %.1f ms, %d failed'
                      % (scrape[0], scrape[-1],
                         sum(r['scrape_failed'] for r in rows)))
            print('  groups %d, CLOSIDs used %d of %d after the last stop'
                  % (rows[-1]['groups_ours'], rows[-1]['closids_used'],
                     rows[-1]['closids_total']))
        print('CSV: %s' % self.csv)
        print('plot: %s' % (self.png if os.path.exists(self.png) else
                            'none (matplotlib is not installed)'))
        return 1 if failed else 0
