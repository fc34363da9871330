"""``[metrics] web_config_file``: a real Prometheus (Debian's ``prometheus``)
scrapes a real ``ovs-rdt-agent`` over TLS with a client certificate and
basic auth; the same Prometheus, scraping with a wrong password, without a
client certificate, with one a stranger's CA signed, or over plain HTTP,
is refused.  A bad web config stops the agent with one line naming the
field.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from typing import Any, Iterator

import pytest
import yaml

from tests.functional.fixtures.ovs import OvsTestbed, wait_for
from tests.functional.test_agent import wait_status
from tests.functional.test_metrics import free_port
from tests import tls

#: job -> what its scrapes do wrong (None: nothing).
JOBS = {'good': None, 'wrong_password': 'password', 'no_client_cert': 'cert',
        'stranger_cert': 'stranger', 'plain_http': 'http'}


def scrape_config(job: str, fault: str | None, target: str,
                  pki: tls.Pki, password_file: str) -> dict[str, Any]:
    tls_config: dict[str, Any] = {'ca_file': pki.path('ca.crt'),
                                  'cert_file': pki.path('client.crt'),
                                  'key_file': pki.path('client.key')}
    if fault == 'cert':
        del tls_config['cert_file'], tls_config['key_file']
    elif fault == 'stranger':
        tls_config.update(cert_file=pki.path('stranger.crt'),
                          key_file=pki.path('stranger.key'))
    auth = {'username': tls.USER, 'password_file': password_file}
    if fault == 'password':
        auth = {'username': tls.USER, 'password': 'not-' + tls.PASSWORD}
    return {'job_name': job, 'scheme': 'http' if fault == 'http' else 'https',
            'tls_config': tls_config, 'basic_auth': auth,
            'static_configs': [{'targets': [target]}]}


@pytest.fixture
def prometheus(tmp_path: Any) -> Iterator[Any]:
    if shutil.which('prometheus') is None:
        pytest.fail('prometheus is not installed (apt-get install '
                    'prometheus; tools/setup.sh does)', pytrace=False)
    procs: list[subprocess.Popen] = []

    def start(config: dict[str, Any]) -> str:
        path = str(tmp_path / 'prometheus.yml')
        with open(path, 'w', encoding='utf-8') as fh:
            yaml.safe_dump(config, fh)
        check = subprocess.run(['promtool', 'check', 'config', path],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        port = free_port()
        log = open(str(tmp_path / 'prometheus.log'), 'wb')
        procs.append(subprocess.Popen(
            ['prometheus', '--config.file', path, '--storage.tsdb.path',
             str(tmp_path / 'tsdb'), '--web.listen-address',
             '127.0.0.1:%d' % port], stdout=log, stderr=log,
            stdin=subprocess.DEVNULL))
        log.close()
        return 'http://127.0.0.1:%d' % port

    try:
        yield start
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def api(base: str, path: str, **params: str) -> Any:
    url = base + path + ('?' + urllib.parse.urlencode(params) if params
                         else '')
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.load(resp)['data']


def test_prometheus_scrapes_over_tls_with_basic_auth(
        ovs: OvsTestbed, rdt_agent: Any, prometheus: Any,
        tmp_path: Any) -> None:
    pki = tls.Pki(str(tmp_path / 'pki'))
    web = tls.web_config(pki, str(tmp_path / 'web.yml'))
    port = free_port()
    agent = rdt_agent(extra='[metrics]\nlisten = 127.0.0.1:%d\n'
                      'web_config_file = %s\n' % (port, web))
    wait_status(ovs, 'ok:')
    password_file = str(tmp_path / 'password')
    with open(password_file, 'w', encoding='utf-8') as fh:
        fh.write(tls.PASSWORD)
    target = 'localhost:%d' % port
    base = prometheus({
        'global': {'scrape_interval': '1s', 'scrape_timeout': '1s'},
        'scrape_configs': [scrape_config(job, fault, target, pki,
                                         password_file)
                           for job, fault in JOBS.items()]})

    def scraped() -> dict[str, Any] | None:
        try:
            targets = api(base, '/api/v1/targets')['activeTargets']
        except OSError:
            return None
        found = {t['labels']['job']: t for t in targets
                 if t['health'] != 'unknown'}
        return found if set(found) == set(JOBS) else None

    targets = wait_for(scraped, timeout=60, step=0.3,
                       what='every job scraped once')
    health = {job: (t['health'], t['lastError']) for job, t in
              targets.items()}
    assert health['good'] == ('up', ''), health
    for job in JOBS:
        if job != 'good':
            assert health[job][0] == 'down', health
    assert '401' in health['wrong_password'][1], health
    # The samples got in: the pool's ways, as resctrl has them.
    result = wait_for(lambda: api(base, '/api/v1/query',
                                  query='ovs_rdt_l3_ways{job="good",'
                                  'group="ovsrdt-pool-hp"}')['result'],
                      timeout=20, step=0.3, what='ovs_rdt_l3_ways in '
                      'Prometheus')
    assert {r['value'][1] for r in result} == {'3'}, result
    assert ('serving metrics on https://127.0.0.1:%d/metrics (basic auth: '
            '1 users)' % port) in agent.log()


@pytest.mark.parametrize('tls_conf, field', [
    ({'client_auth_type': 'RequireAnyClientCert'},
     'tls_server_config.client_auth_type'),
    ({'key_file': '/nonexistent/server.key'}, 'tls_server_config.key_file'),
])
def test_agent_refuses_a_bad_web_config(tmp_path: Any, tls_conf: dict,
                                        field: str) -> None:
    pki = tls.Pki(str(tmp_path / 'pki'))
    web = tls.web_config(pki, str(tmp_path / 'web.yml'), **tls_conf)
    conf = str(tmp_path / 'agent.conf')
    with open(conf, 'w', encoding='utf-8') as fh:
        fh.write('[resctrl]\nroot = %s\n[metrics]\nlisten = 127.0.0.1:%d\n'
                 'web_config_file = %s\n' % (tmp_path, free_port(), web))
    start = time.monotonic()
    res = subprocess.run([sys.executable, '-m', 'ovs_rdt.agent.service',
                          '--config-file', conf], capture_output=True,
                         text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith('ovs-rdt-agent: error: [metrics] '
                               'web_config_file '
                               '%s: %s' % (web, field)), lines
    assert time.monotonic() - start < 30
