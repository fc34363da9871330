"""ovs_rdt.agent.metrics: the collector over a plain-file resctrl tree,
parsed back with prometheus_client's own parser."""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from typing import Any
import urllib.error
import urllib.request

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
import pytest

from ovs_rdt.agent.counters import Counters
from ovs_rdt.agent.metrics import Endpoint, Labeller, ResctrlCollector
from ovs_rdt.conf import Settings
from ovs_rdt import procfs
from ovs_rdt.resctrl import Resctrl
from tests.unit.fakes import make_tree

UUID = '8a1f0a6e-0d4c-4b0b-9d55-3c1f8b2a9e11'
VM = 'ovsrdt-vm-' + UUID
HP = 'ovsrdt-pool-hp'


def put(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, 'w') as fh:
        fh.write(text)


def add_group(root, name, l3, tasks=(), mon=None):
    put(root, os.path.join(name, 'schemata'), 'L3:%s\n' % l3)
    put(root, os.path.join(name, 'tasks'), ''.join('%d\n' % t for t in tasks))
    for dom, events in (mon or {}).items():
        for event, value in events.items():
            put(root, os.path.join(name, 'mon_data', 'mon_L3_%02d' % dom,
                                   event), '%s\n' % value)


def recreate(root, name, *args):
    """Remove and create ``name`` again: a new directory (new inode)."""
    add_group(root, 'new', *args)      # made first: the old inode is taken
    shutil.rmtree(os.path.join(root, name))
    os.rename(os.path.join(root, 'new'), os.path.join(root, name))


@pytest.fixture
def tree(tmp_path):
    root = str(tmp_path / 'resctrl')
    make_tree(root)
    add_group(root, '', '0=c;1=c', (1, 2, 3), {
        0: {'llc_occupancy': 1000, 'mbm_total_bytes': 5000},
        1: {'llc_occupancy': 'Unavailable', 'mbm_total_bytes': 'Error'}})
    add_group(root, HP, '0=7f0;1=7f0', (os.getpid(),), {
        0: {'llc_occupancy': 2048, 'mbm_total_bytes': 10,
            'mbm_local_bytes': 8}})
    add_group(root, VM, '0=1;1=1', (), {
        0: {'llc_occupancy': 64, 'mbm_total_bytes': 0}})
    add_group(root, 'COS3', '0=2;1=2')
    # What the agent's libvirt connection knows (None: not connected).
    libvirt: dict[str, Any] = {'names': {UUID: 'vm1'}}
    return root, libvirt


class Clock:
    now = 1000.0

    def __call__(self):
        return self.now


def collector(tree, pmds=None, counters=None):
    root, libvirt = tree
    rc = Resctrl(root, '/nonexistent', lock_timeout=0)
    counters = counters or Counters()
    return ResctrlCollector(rc, counters, Labeller(
        lambda: libvirt['names'], lambda: dict(pmds or {})), clock=Clock())


def scrape(coll):
    registry = CollectorRegistry(auto_describe=False)
    registry.register(coll)
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # As Prometheus stores it: an empty label is no label.
            labels = sorted((k, v) for k, v in sample.labels.items() if v)
            out.setdefault(family.name, {})[
                (sample.name,) + tuple(labels)] = (family.type, sample.value)
    return out


def value(metrics, family, sample, **labels):
    return metrics[family][(sample,) + tuple(sorted(labels.items()))]


def test_every_group_with_its_types_and_labels(tree):
    counters = Counters()
    counters.inc('policy_decisions', domain=0, direction='shrink',
                 reason='steady')
    counters.inc('errors', source='placement')
    got = scrape(collector(tree, {HP: '0,1'}, counters))
    occ = 'ovs_rdt_llc_occupancy_bytes'
    assert value(got, occ, occ, group='default', domain='0') == ('gauge',
                                                                 1000.0)
    assert value(got, occ, occ, group=HP, domain='0', pmd='0,1') == (
        'gauge', 2048.0)
    assert value(got, occ, occ, group=VM, domain='0', vm='vm1',
                 uuid=UUID) == ('gauge', 64.0)
    mbt = 'ovs_rdt_mbm_total_bytes'
    assert value(got, mbt, mbt + '_total', group=HP, domain='0',
                 pmd='0,1') == ('counter', 10.0)
    mbl = 'ovs_rdt_mbm_local_bytes'
    assert value(got, mbl, mbl + '_total', group=HP, domain='0',
                 pmd='0,1') == ('counter', 8.0)
    ways, cbm = 'ovs_rdt_l3_ways', 'ovs_rdt_l3_cbm'
    assert value(got, ways, ways, group=HP, domain='1', pmd='0,1') == (
        'gauge', 7.0)
    assert value(got, cbm, cbm, group=HP, domain='1', pmd='0,1') == (
        'gauge', 0x7f0)
    assert value(got, cbm, cbm, group='COS3', domain='0') == ('gauge', 2.0)
    tasks = 'ovs_rdt_group_tasks'
    assert got[tasks][(tasks, ('group', HP), ('pmd', '0,1'))] == ('gauge',
                                                                  1.0)
    assert got[tasks][(tasks, ('group', 'default'))] == ('gauge', 3.0)
    pol = 'ovs_rdt_policy_decisions'
    assert got[pol] == {(pol + '_total', ('direction', 'shrink'),
                         ('domain', '0'), ('reason', 'steady')):
                        ('counter', 1.0)}
    err = 'ovs_rdt_errors'
    assert got[err] == {
        (err + '_total', ('source', 'metrics')): ('counter', 0.0),
        (err + '_total', ('source', 'placement')): ('counter', 1.0)}


def test_unavailable_reads_are_skipped_not_zero(tree):
    got = scrape(collector(tree))
    occ = got['ovs_rdt_llc_occupancy_bytes']
    mbt = got['ovs_rdt_mbm_total_bytes']
    assert [k for k in occ if ('group', 'default') in k] == [
        ('ovs_rdt_llc_occupancy_bytes', ('domain', '0'), ('group', 'default'))]
    assert not [k for k in mbt if ('domain', '1') in k]
    # Masks of that domain are there all the same.
    assert value(got, 'ovs_rdt_l3_ways', 'ovs_rdt_l3_ways', group='default',
                 domain='1') == ('gauge', 2.0)


def test_vm_label_is_kept_while_the_group_lives(tree):
    root, libvirt = tree
    coll = collector(tree)
    occ = 'ovs_rdt_llc_occupancy_bytes'
    got = scrape(coll)
    assert value(got, occ, occ, group=VM, domain='0', vm='vm1', uuid=UUID)
    assert value(got, 'ovs_rdt_libvirt_connected',
                 'ovs_rdt_libvirt_connected') == ('gauge', 1.0)
    libvirt['names'] = {}                               # the VM stopped
    put(root, VM + '/tasks', '%d\n' % os.getpid())      # tasks changed
    assert value(scrape(coll), occ, occ, group=VM, domain='0', vm='vm1',
                 uuid=UUID)
    # Re-created (a new directory): looked up again, no name now.
    recreate(root, VM, '0=1;1=1', (), {0: {'llc_occupancy': 0}})
    assert value(scrape(coll), occ, occ, group=VM, domain='0', uuid=UUID)
    # libvirt away: named from its QEMU's command line, and said so.
    libvirt['names'] = None
    qemu = subprocess.Popen(
        ['qemu-system-x86_64', '-c', 'import time; time.sleep(30)',
         '-name', 'guest=vm1-proc,debug-threads=on', '-uuid', UUID],
        executable=sys.executable)
    try:
        recreate(root, VM, '0=1;1=1', (qemu.pid,), {0: {'llc_occupancy': 0}})
        got = scrape(coll)
    finally:
        qemu.kill()
        qemu.wait()
    assert value(got, occ, occ, group=VM, domain='0', vm='vm1-proc',
                 uuid=UUID)
    assert value(got, 'ovs_rdt_libvirt_connected',
                 'ovs_rdt_libvirt_connected') == ('gauge', 0.0)


def test_recreated_group_gets_a_created_timestamp(tree):
    root, _ = tree
    coll = collector(tree)
    first = scrape(coll)
    mbt = 'ovs_rdt_mbm_total_bytes'
    # Series there at the first scrape: their start is not known.
    assert mbt + '_created' not in first
    coll.clock.now = 1010.0
    # Re-created: the new counter (99) is above the old one (10), so only
    # the created timestamp can tell Prometheus it was reset.
    recreate(root, HP, '0=7f0;1=7f0', (), {0: {'mbm_total_bytes': 99}})
    got = scrape(coll)
    assert got[mbt + '_created'] == {
        (mbt + '_created', ('domain', '0'), ('group', HP)): ('gauge', 1000.0)}
    assert got[mbt][(mbt + '_total', ('domain', '0'), ('group', HP))] == (
        'counter', 99.0)


def test_lock_held_serves_counters_and_counts_the_error(tree, caplog):
    root, _ = tree
    counters = Counters()
    coll = collector(tree, counters=counters)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)        # a writer holds resctrl
        for _ in range(3):
            got = scrape(coll)
    finally:
        os.close(fd)
    assert 'ovs_rdt_llc_occupancy_bytes' not in got
    assert got['ovs_rdt_errors'][('ovs_rdt_errors_total',
                                  ('source', 'metrics'))] == ('counter', 3.0)
    assert len([r for r in caplog.records if r.levelname == 'ERROR']) == 1
    assert 'ovs_rdt_llc_occupancy_bytes' in scrape(coll)


def test_endpoint_serves_moves_and_stops(tree):
    root, _ = tree
    counters = Counters()
    ep = Endpoint(counters)
    settings = Settings.defaults(resctrl={'root': root},
                                 metrics={'listen': '127.0.0.1:0'})
    # Port 0 is refused by the option, but not here: find a free port.
    import socket
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    settings.metrics.listen = '127.0.0.1:%d' % port
    ep.configure(settings)
    try:
        body = urllib.request.urlopen('http://127.0.0.1:%d/metrics' % port,
                                      timeout=5).read().decode()
        assert 'ovs_rdt_l3_cbm{' in body and 'process_cpu_seconds' in body
        # A second endpoint on the same port: logged, counted, no exception.
        other = Endpoint(counters)
        other.configure(settings)
        assert counters.snapshot('errors')[(('source', 'metrics'),)] == 1.0
        # Turned off: the port is closed.
        settings.metrics.listen = None
        ep.configure(settings)
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen('http://127.0.0.1:%d/metrics' % port,
                                   timeout=5)
        other.retry()                          # the address is free now
        assert urllib.request.urlopen(
            'http://127.0.0.1:%d/metrics' % port, timeout=5).status == 200
        other.stop()
    finally:
        ep.stop()


def test_pool_members_as_one_info_series_per_vm(tree):
    """A pool's VMs: ``ovs_rdt_pool_vm_info{group, vm, uuid} 1``, one
    series per VM in the pool (libvirt's name), gone once it leaves; the
    pool's own series keep their labels (no VM label on them).
    """
    root, libvirt = tree
    coll = collector(tree)
    info = 'ovs_rdt_pool_vm_info'      # (a gauge in the 0.0.4 text format)
    assert scrape(coll).get(info, {}) == {}
    qemu = subprocess.Popen(
        ['qemu-system-x86_64', '-c', 'import time; time.sleep(30)',
         '-name', 'guest=vm1-proc,debug-threads=on', '-uuid', UUID.upper()],
        executable=sys.executable)
    try:
        deadline = time.monotonic() + 10   # (its command line, once exec'd)
        while procfs.qemu_guest(qemu.pid) is None and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        put(root, HP + '/tasks', '%d\n%d\n' % (os.getpid(), qemu.pid))
        got = scrape(coll)
        libvirt['names'] = None
        away = scrape(coll)
    finally:
        qemu.kill()
        qemu.wait()
    assert got[info] == {(info, ('group', HP), ('uuid', UUID),
                          ('vm', 'vm1')): ('gauge', 1.0)}
    # Without libvirt: the name on its QEMU's command line.
    assert list(away[info]) == [(info, ('group', HP), ('uuid', UUID),
                                 ('vm', 'vm1-proc'))]
    occ = 'ovs_rdt_llc_occupancy_bytes'
    assert value(got, occ, occ, group=HP, domain='0') == ('gauge', 2048.0)
    put(root, HP + '/tasks', '%d\n' % os.getpid())
    assert scrape(coll).get(info, {}) == {}
