"""[metrics] web_config_file: the exporter-toolkit format, checked field by
field, and the server that honours it (in-process, real TLS on loopback)."""
from __future__ import annotations

import base64
import http.client
import os
import ssl

import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge

from ovs_rdt.agent import httpd, webconfig
from ovs_rdt.exceptions import ConfigError
from tests import tls


@pytest.fixture(scope='module')
def pki(tmp_path_factory: pytest.TempPathFactory) -> tls.Pki:
    return tls.Pki(str(tmp_path_factory.mktemp('pki')))


def write(tmp_path, data) -> str:
    path = str(tmp_path / 'web.yml')
    with open(path, 'w', encoding='utf-8') as fh:
        fh.write(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def refused(tmp_path, data) -> str:
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as info:
        webconfig.load(path)
    text = str(info.value)
    assert '\n' not in text and text.startswith(
        '[metrics] web_config_file %s' % path), text
    return text


def test_a_full_config_loads(tmp_path, pki) -> None:
    web = webconfig.load(tls.web_config(pki, str(tmp_path / 'web.yml')))
    assert web.scheme == 'https'
    assert web.context is not None
    assert web.context.verify_mode == ssl.CERT_REQUIRED
    assert web.context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert set(web.users) == {tls.USER}


def test_basic_auth_only_is_plain_http(tmp_path) -> None:
    web = webconfig.load(write(tmp_path, {'basic_auth_users': {
        'a': tls.bcrypt_hash('pw', 4)}}))
    assert web.scheme == 'http' and web.context is None


@pytest.mark.parametrize('tls_conf, field', [
    ({'cert_file': 'S', 'key_file': 'K', 'client_auth_type': 'Sometimes'},
     "tls_server_config.client_auth_type: 'Sometimes' is not one of"),
    ({'cert_file': 'S', 'key_file': 'K',
      'client_auth_type': 'RequireAnyClientCert', 'client_ca_file': 'CA'},
     "tls_server_config.client_auth_type: 'RequireAnyClientCert' is not "
     "supported"),
    ({'cert_file': 'S', 'key_file': 'K', 'client_ca_file': 'CA'},
     "tls_server_config.client_auth_type: 'NoClientCert' with client_ca_file"),
    ({'cert_file': 'S', 'key_file': 'K',
      'client_auth_type': 'RequireAndVerifyClientCert'},
     'tls_server_config.client_ca_file: is missing'),
    ({'cert_file': 'S'}, 'tls_server_config.key_file: is missing'),
    ({'cert_file': 'S', 'key_file': 'S'},
     "tls_server_config.key_file: '%(S)s' is not the PEM private key"),
    ({'cert_file': 'K', 'key_file': 'K'},
     "tls_server_config.cert_file: '%(K)s' is not a PEM certificate"),
    ({'cert_file': '/nonexistent.crt', 'key_file': 'K'},
     "tls_server_config.cert_file: '/nonexistent.crt' cannot be read"),
    ({'cert_file': 'S', 'key_file': 'K', 'min_version': 'TLS14'},
     "tls_server_config.min_version: 'TLS14' is not one of"),
    ({'cert_file': 'S', 'key_file': 'K', 'max_version': 'TLS11'},
     "tls_server_config.max_version: 'TLS11' is below min_version TLS12"),
    ({'cert_file': 'S', 'key_file': 'K', 'cipher_suites': ['X']},
     'tls_server_config.cipher_suites: is not supported by ovs-rdt-agent'),
    ({'cert_file': 'S', 'key_file': 'K', 'certfile': 'S'},
     'tls_server_config.certfile: is not a field of tls_server_config'),
])
def test_bad_tls_fields_are_named(tmp_path, pki, tls_conf, field) -> None:
    names = {'S': pki.path('server.crt'), 'K': pki.path('server.key'),
             'CA': pki.path('ca.crt')}
    conf = {k: names.get(v, v) if isinstance(v, str) else v
            for k, v in tls_conf.items()}
    text = refused(tmp_path, {'tls_server_config': conf})
    assert field % names in text, text


@pytest.mark.parametrize('data, field', [
    ({'basic_auth_users': {'a': 'secret'}},
     "basic_auth_users.a: '<hidden>' is not a bcrypt hash"),
    ({'basic_auth_users': {'a:b': '$2y$10$' + 'x' * 53}},
     "basic_auth_users: 'a:b' is not a user name"),
    ({'basic_auth_users': ['a']},
     'basic_auth_users: must be a mapping'),
    ({'basic_auth_user': {}}, 'basic_auth_user: is not a field of a web '
     'config'),
    ({'http_server_config': {'headers': {'Server': 'x'}}},
     'http_server_config.headers.Server: is not a header'),
    ('tls_server_config: [a\n', 'not YAML'),
])
def test_bad_fields_are_named(tmp_path, data, field) -> None:
    text = refused(tmp_path, data)
    assert field in text, text
    assert 'secret' not in text


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match='cannot be read: No such file'):
        webconfig.load(str(tmp_path / 'none.yml'))


def test_authorized(tmp_path) -> None:
    web = webconfig.load(write(tmp_path, {'basic_auth_users': {
        'alice': tls.bcrypt_hash('pw', 4)}}))

    def basic(text: str) -> str:
        return 'Basic ' + base64.b64encode(text.encode()).decode()
    assert web.authorized(basic('alice:pw'))
    assert web.authorized(basic('alice:pw'))        # from the cache
    assert not web.authorized(basic('alice:pW'))
    assert not web.authorized(basic('bob:pw'))
    assert not web.authorized(basic('alice'))
    assert not web.authorized('Bearer x')
    assert not web.authorized(None)
    assert not web.authorized('Basic !!!')


# -- the server ----------------------------------------------------------------
@pytest.fixture
def served(tmp_path, pki):
    registry = CollectorRegistry()
    Gauge('ovs_rdt_test', 'a test gauge', registry=registry).set(7)
    web = webconfig.load(tls.web_config(pki, str(tmp_path / 'web.yml')))
    server = httpd.serve('127.0.0.1', 0, registry, web)
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def client_context(pki: tls.Pki, cert: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.path('ca.crt'))
    if cert:
        ctx.load_cert_chain(pki.path(cert + '.crt'), pki.path(cert + '.key'))
    return ctx


def get(port: int, ctx: ssl.SSLContext | None,
        auth: str | None = None) -> tuple[int, bytes]:
    conn = (http.client.HTTPSConnection('127.0.0.1', port, context=ctx,
                                        timeout=10) if ctx else
            http.client.HTTPConnection('127.0.0.1', port, timeout=10))
    headers = {}
    if auth:
        headers['Authorization'] = 'Basic ' + base64.b64encode(
            auth.encode()).decode()
    try:
        conn.request('GET', '/metrics', headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_server_lets_in_only_the_client_with_cert_and_password(served, pki) -> None:
    good = '%s:%s' % (tls.USER, tls.PASSWORD)
    status, body = get(served, client_context(pki, 'client'), good)
    assert status == 200 and b'ovs_rdt_test 7.0' in body
    status, body = get(served, client_context(pki, 'client'), tls.USER + ':x')
    assert status == 401
    assert get(served, client_context(pki, 'client'))[0] == 401
    for ctx in (client_context(pki, None), client_context(pki, 'stranger')):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            get(served, ctx, good)
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        get(served, None, good)


def test_a_silent_client_does_not_stall_others(served, pki) -> None:
    import socket
    with socket.create_connection(('127.0.0.1', served)):
        status, _ = get(served, client_context(pki, 'client'),
                        '%s:%s' % (tls.USER, tls.PASSWORD))
    assert status == 200


def test_load_fingerprint_follows_the_certificate(tmp_path) -> None:
    pki = tls.Pki(str(tmp_path / 'pki'))
    path = tls.web_config(pki, str(tmp_path / 'web.yml'))
    first = webconfig.load(path).fingerprint
    assert webconfig.load(path).fingerprint == first
    os.utime(pki.path('server.crt'))
    assert webconfig.load(path).fingerprint == first      # same bytes
    pki.sign('server', 'ca', 'subjectAltName=IP:127.0.0.1')
    assert webconfig.load(path).fingerprint != first
