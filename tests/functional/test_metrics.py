"""The agent's Prometheus endpoint, scraped over HTTP from a real
``ovs-rdt-agent`` (real ovsdb-server + ovs-vswitchd with PMD threads, the
mounted resctrl emulator), parsed with prometheus_client's parser and
checked against the emulator's monitoring model (doc/emulator.md):
occupancy = min(footprint, ways x way size), MBM traffic = the footprint
that does not fit x 50 per second."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any, Iterator

from prometheus_client.parser import text_string_to_metric_families
import pytest

from ovs_rdt.core.model import PMD_GROUP
from ovs_rdt.resctrl import Resctrl
from ovs_rdt import vm_group
from tests.functional.fixtures.ovs import OvsTestbed, wait_for
from tests.functional.test_agent import wait_members, wait_status

WAY = 28835840 // 11          # xeon-gold-6230
UUID = '5d3e1c2a-8f4b-4c6d-9e7f-0a1b2c3d4e5f'
CONTRACT = ('ovs_rdt_llc_occupancy_bytes', 'ovs_rdt_mbm_total_bytes',
            'ovs_rdt_mbm_local_bytes', 'ovs_rdt_l3_ways', 'ovs_rdt_l3_cbm')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class Scrape:
    """One GET /metrics, parsed: (metric, sample name) -> [(labels, value)]."""

    def __init__(self, port: int) -> None:
        self.at = time.monotonic()
        self.text = urllib.request.urlopen(
            'http://127.0.0.1:%d/metrics' % port, timeout=10).read().decode()
        self.families = {f.name: f for f in
                         text_string_to_metric_families(self.text)}

    def samples(self, family: str, suffix: str = '') -> list[tuple[dict, float]]:
        # Text format 0.0.4: a counter's _created samples are a family of
        # their own.
        fam = self.families[family + ('_created' if suffix == '_created'
                                      else '')]
        return [(s.labels, s.value) for s in fam.samples
                if s.name == family + suffix]

    def get(self, family: str, suffix: str = '', **labels: str) -> float:
        found = [v for lab, v in self.samples(family, suffix)
                 if all(lab.get(k) == w for k, w in labels.items())]
        assert len(found) == 1, (family, labels, self.samples(family, suffix))
        return found[0]


def fake_qemu(name: str, uuid: str) -> subprocess.Popen:
    """A process that looks like libvirt's QEMU in /proc (argv[0], -name,
    -uuid): what ``members`` and the metrics name VMs by.
    """
    return subprocess.Popen(
        ['qemu-system-x86_64', '-c', 'import time; time.sleep(120)',
         '-name', 'guest=%s,debug-threads=on' % name, '-uuid', uuid],
        executable=sys.executable)


@pytest.fixture
def guest(emulated_resctrl: Any) -> Iterator[subprocess.Popen]:
    """A stand-in VM in its dedicated group, as the libvirt hook makes it."""
    proc = fake_qemu('vm1', UUID)
    group = emulated_resctrl.path(vm_group(UUID))
    try:
        os.mkdir(group)
        with open(os.path.join(group, 'tasks'), 'w') as fh:
            fh.write('%d\n' % proc.pid)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_scrape_a_running_agent(ovs: OvsTestbed, emulated_resctrl: Any,
                                rdt_agent: Any, guest: Any) -> None:
    rc = Resctrl(emulated_resctrl.root, emulated_resctrl.sysfs)
    vswitchd = ovs.vswitchd_pid
    port = free_port()
    # Footprints: a PMD thread wanting 4 ways (dedicated group: 3),
    # ovs-vswitchd's main thread 720 KiB (default group), the VM 1.5 ways.
    pmd_tid = next(iter(ovs.pmd_threads()))
    emulated_resctrl.set_footprints({
        'default': 0, str(pmd_tid): {'0': 4 * WAY},
        str(vswitchd): {'0': 720 * 1024}, str(guest.pid): {'1': 3 * WAY // 2}})
    rc.read_mon('')     # the emulator takes the file in at its next read
    agent = rdt_agent(extra='[metrics]\nlisten = 127.0.0.1:%d\n' % port)
    ovs.other_config(rdt_pmd_l3_ways='3', rdt_vswitchd='default')
    wait_members(rc, PMD_GROUP, lambda: ovs.pmd_threads())
    wait_status(ovs, 'ok: PMD cores 0 (1 thread) in ovsrdt-ovs-pmd')
    first = wait_for(lambda: Scrape(port), what='the metrics endpoint',
                     timeout=10, step=0.1)
    time.sleep(1.0)
    scrape = Scrape(port)

    # Every contract metric for every group, typed as the contract says.
    groups = {g.name or 'default': g for g in rc.groups(with_tasks=True)}
    assert set(groups) == {'default', 'ovsrdt-pool-hp', PMD_GROUP,
                           vm_group(UUID)}
    for family in CONTRACT:
        for name in groups:
            for dom in ('0', '1'):
                suffix = '_total' if 'mbm' in family else ''
                scrape.get(family, suffix, group=name, domain=dom)
    for family in ('ovs_rdt_mbm_total_bytes', 'ovs_rdt_mbm_local_bytes',
                   'ovs_rdt_policy_decisions', 'ovs_rdt_errors'):
        assert scrape.families[family].type == 'counter'
    for family in ('ovs_rdt_llc_occupancy_bytes', 'ovs_rdt_l3_ways',
                   'ovs_rdt_l3_cbm', 'ovs_rdt_group_tasks'):
        assert scrape.families[family].type == 'gauge'
    for source in ('placement', 'pools', 'reconcile', 'metrics'):
        assert scrape.get('ovs_rdt_errors', '_total', source=source) == 0

    # Labels: the PMD group names its core; the VM group its VM.
    occ = 'ovs_rdt_llc_occupancy_bytes'
    assert scrape.get(occ, group=PMD_GROUP, domain='0', pmd='0') >= 0
    assert scrape.get(occ, group=vm_group(UUID), domain='1', vm='vm1',
                      uuid=UUID) >= 0

    # Values: the emulator's model.  Occupancy = min(demand, 3 ways).
    assert scrape.get(occ, group=PMD_GROUP, domain='0') == 3 * WAY // 64 * 64
    assert scrape.get(occ, group=PMD_GROUP, domain='1') == 0
    assert scrape.get(occ, group='default', domain='0') == 720 * 1024
    assert scrape.get(occ, group=vm_group(UUID), domain='1') == \
        3 * WAY // 2 // 64 * 64
    for name, grp in groups.items():
        for dom, mask in grp.l3.items():
            labels = {'group': name, 'domain': str(dom)}
            assert scrape.get('ovs_rdt_l3_ways', **labels) == mask.count
            assert scrape.get('ovs_rdt_l3_cbm', **labels) == mask.value
        tasks = scrape.get('ovs_rdt_group_tasks', group=name)
        if grp.name:
            assert tasks == len(rc.tasks(grp.name))
        else:     # every thread of this busy host: it comes and goes
            assert tasks == pytest.approx(len(rc.tasks(grp.name)), abs=50)
    assert scrape.get('ovs_rdt_l3_ways', group=PMD_GROUP, domain='0') == 3
    # MBM: the way that does not fit misses, refetched 50 times a second;
    # 80% of it local (two sockets: read a few ms after the total, at
    # 130 MB/s).  Compared over the two scrapes.
    mbt = 'ovs_rdt_mbm_total_bytes'
    grew = (scrape.get(mbt, '_total', group=PMD_GROUP, domain='0')
            - first.get(mbt, '_total', group=PMD_GROUP, domain='0'))
    expected = WAY * 50 * (scrape.at - first.at)
    assert 0.7 * expected < grew < 1.3 * expected, (grew, expected)
    now = rc.read_mon(PMD_GROUP)[0]
    assert now['mbm_total_bytes'] >= scrape.get(
        mbt, '_total', group=PMD_GROUP, domain='0')
    local = scrape.get('ovs_rdt_mbm_local_bytes', '_total', group=PMD_GROUP,
                       domain='0')
    assert local == pytest.approx(0.8 * scrape.get(
        mbt, '_total', group=PMD_GROUP, domain='0'), rel=0.01)
    # A group with no traffic has a counter, at zero (not skipped).
    assert scrape.get(mbt, '_total', group=PMD_GROUP, domain='1') == 0

    # A bad knob: a placement error, counted.
    ovs.other_config(rdt_pmd_l3_ways='40')
    wait_status(ovs, 'error:')
    assert wait_for(lambda: Scrape(port).get(
        'ovs_rdt_errors', '_total', source='placement') >= 1,
        what='errors_total{source="placement"}', timeout=10, step=0.1)

    # status and top name members as the labels do.
    for cmd in (['status'], ['top', '--once', '--interval', '0.2']):
        out = subprocess.run([sys.executable, '-m', 'ovs_rdt.cmd.main', *cmd,
                              '--config-file', agent.config_file],
                             capture_output=True, text=True, timeout=60)
        # status: 5, the bad knob above (issue 51 item 1)
        assert out.returncode == (5 if cmd == ['status'] else 0), out.stderr
        assert 'vm=vm1' in out.stdout and 'pmd=0' in out.stdout, out.stdout


def test_recreated_group_and_a_stuck_client(ovs: OvsTestbed,
                                            emulated_resctrl: Any,
                                            rdt_agent: Any) -> None:
    """A group re-created under the same name is a counter reset; a scraper
    that connects and never sends keeps neither the agent nor other
    scrapers waiting.
    """
    rc = Resctrl(emulated_resctrl.root, emulated_resctrl.sysfs)
    port = free_port()
    agent = rdt_agent(extra='[metrics]\nlisten = 127.0.0.1:%d\n' % port)
    wait_status(ovs, 'ok: no rdt-* keys set')
    stuck = socket.create_connection(('127.0.0.1', port))

    def make_cos3() -> None:        # another tool's group, on way 0
        os.mkdir(rc.path('COS3'))
        with open(rc.path('COS3', 'schemata'), 'w') as fh:
            fh.write('L3:0=1;1=1\n')

    try:
        make_cos3()
        mbt = 'ovs_rdt_mbm_total_bytes'
        first = wait_for(lambda: Scrape(port), what='the endpoint',
                         timeout=10, step=0.1)
        assert first.get(mbt, '_total', group='COS3', domain='0') == 0
        assert mbt + '_created' not in first.families
        os.rmdir(rc.path('COS3'))
        make_cos3()
        again = Scrape(port)
        created = again.get(mbt, '_created', group='COS3', domain='0')
        assert 0 < time.time() - created < 60
        # The agent still follows OvS while the stuck client is connected.
        ovs.other_config(rdt_pmd_l3_ways='2')
        wait_members(rc, PMD_GROUP, lambda: ovs.threads())
        assert Scrape(port).get('ovs_rdt_l3_ways', group=PMD_GROUP,
                                domain='0') == 2
    finally:
        stuck.close()
        os.rmdir(rc.path('COS3'))
    # SIGHUP with another [metrics] listen: the endpoint moves.
    moved = free_port()
    with open(agent.config_file) as fh:
        text = fh.read()
    with open(agent.config_file, 'w') as fh:
        fh.write(text.replace(':%d' % port, ':%d' % moved))
    agent.signal(signal.SIGHUP)
    assert wait_for(lambda: up(moved), what='the moved endpoint',
                    timeout=10, step=0.1)
    assert not up(port)


def up(port: int) -> bool:
    try:
        Scrape(port)
    except OSError:
        return False
    return True
