"""``[metrics] web_config_file``: TLS and basic auth for the metrics endpoint.

The file has the format of the Prometheus exporters' web configuration
(exporter-toolkit's ``--web.config.file``), so that one file and one habit
serve every exporter on a node::

    tls_server_config:
      cert_file: /etc/ovs-rdt/tls/server.crt
      key_file: /etc/ovs-rdt/tls/server.key
      # clients must show a certificate signed by this CA:
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: /etc/ovs-rdt/tls/ca.crt
    basic_auth_users:
      prometheus: $2y$10$...        # htpasswd -nBC 10 "" | tr -d ':\\n'

Every field is checked when the agent starts (and at SIGHUP): an unknown
field, one this agent does not support, an unreadable certificate or key,
a key that does not match its certificate, a password that is not a bcrypt
hash: one line naming the field (:func:`load`).  What exporter-toolkit
supports and Python's TLS cannot do (``RequestClientCert``,
``RequireAnyClientCert``: a client certificate asked for but not
verified; Go's cipher-suite and curve lists) is refused by name rather than
ignored: a security setting must not be dropped silently.
"""
from __future__ import annotations

import hashlib
import os
import re
import ssl
import threading
from typing import Any

from ovs_rdt.exceptions import ConfigError, quote

#: client_auth_type -> what Python's TLS does.
CLIENT_AUTH = {'NoClientCert': ssl.CERT_NONE,
               'VerifyClientCertIfGiven': ssl.CERT_OPTIONAL,
               'RequireAndVerifyClientCert': ssl.CERT_REQUIRED}
#: exporter-toolkit's values Python's TLS cannot honour, and why.
CLIENT_AUTH_UNSUPPORTED = ('RequestClientCert', 'RequireAnyClientCert',
                           'RequireClientCert')
TLS_VERSIONS = {'TLS10': ssl.TLSVersion.TLSv1, 'TLS11': ssl.TLSVersion.TLSv1_1,
                'TLS12': ssl.TLSVersion.TLSv1_2,
                'TLS13': ssl.TLSVersion.TLSv1_3}
#: exporter-toolkit's default minimum.
DEFAULT_MIN_VERSION = 'TLS12'
TLS_FIELDS = ('cert_file', 'key_file', 'client_ca_file', 'client_auth_type',
              'min_version', 'max_version')
#: exporter-toolkit fields this agent does not implement.
TLS_UNSUPPORTED = ('cert', 'key', 'client_ca', 'cipher_suites',
                   'curve_preferences', 'prefer_server_cipher_suites',
                   'client_allowed_sans')
TOP_FIELDS = ('tls_server_config', 'basic_auth_users', 'http_server_config')
HTTP_FIELDS = ('headers', 'http2')
#: Response headers exporter-toolkit lets a web config set.
HEADERS = ('Strict-Transport-Security', 'X-Content-Type-Options',
           'X-Frame-Options', 'X-XSS-Protection', 'Content-Security-Policy')
BCRYPT = re.compile(r'^\$2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}$')
#: Compared against when the user is unknown, so that an unknown user
#: costs as much as a wrong password (bcrypt of a random string, cost 10).
DUMMY_HASH = b'$2b$10$Ojk5Mf4jxnE0f0ZmgnYPAOGFPRnX0dpULXv6hlKcy7ID9pgcy9Mle'
#: Checked (user, password) pairs kept (bcrypt costs ~0.1 s a check).
CACHE_SIZE = 64


def _fail(path: str, field: str, value: Any, why: str) -> ConfigError:
    shown = quote(str(value)) if value is not None else ''
    return ConfigError('[metrics] web_config_file %s: %s: %s%s' % (
        path, field, shown + ' ' if shown else '', why))


def _mapping(path: str, field: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(path, field, None, 'must be a mapping of fields, not %s'
                    % type(value).__name__)
    for key in value:
        if not isinstance(key, str):
            raise _fail(path, field, key, 'is not a field name')
    return value


def _string(path: str, field: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, field, value, 'must be a non-empty string')
    return value


def _readable(path: str, field: str, value: Any) -> str:
    name = _string(path, field, value)
    try:
        with open(name, 'rb'):
            pass
    except OSError as exc:
        raise _fail(path, field, name, 'cannot be read: %s'
                    % (exc.strerror or exc)) from None
    return name


class WebConfig:
    """A checked web configuration: a TLS context, users, headers."""

    def __init__(self, path: str, context: ssl.SSLContext | None,
                 users: dict[str, bytes], headers: list[tuple[str, str]],
                 fingerprint: bytes) -> None:
        self.path = path
        #: None: plain HTTP.
        self.context = context
        self.users = users
        self.headers = headers
        #: What the file and the files it names held when read.
        self.fingerprint = fingerprint
        self._ok: dict[bytes, bool] = {}
        self._lock = threading.Lock()

    @property
    def scheme(self) -> str:
        return 'https' if self.context is not None else 'http'

    def authorized(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header lets the request in."""
        if not self.users:
            return True
        import base64
        import binascii

        import bcrypt

        if not header or not header[:6].lower() == 'basic ':
            return False
        try:
            text = base64.b64decode(header[6:].strip(),
                                    validate=True).decode('utf-8')
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, sep, password = text.partition(':')
        if not sep:
            return False
        hashed = self.users.get(user)
        key = hashlib.sha256(b'\0'.join((user.encode(), password.encode(),
                                         hashed or b''))).digest()
        with self._lock:
            if key in self._ok:
                return self._ok[key]
        ok = bcrypt.checkpw(password.encode(), hashed or DUMMY_HASH) and \
            hashed is not None
        with self._lock:
            if len(self._ok) >= CACHE_SIZE:
                self._ok.clear()
            self._ok[key] = ok
        return ok


def _tls(path: str, tls: dict[str, Any]) -> ssl.SSLContext | None:
    for key in tls:
        if key in TLS_UNSUPPORTED:
            raise _fail(path, 'tls_server_config.' + key, None,
                        'is not supported by ovs-rdt-agent (supported: %s)'
                        % ', '.join(TLS_FIELDS))
        if key not in TLS_FIELDS:
            raise _fail(path, 'tls_server_config.' + key, None,
                        'is not a field of tls_server_config (known: %s)'
                        % ', '.join(TLS_FIELDS))
    if not tls:
        return None
    field = 'tls_server_config.'
    if 'cert_file' not in tls or 'key_file' not in tls:
        missing = 'cert_file' if 'cert_file' not in tls else 'key_file'
        raise _fail(path, field + missing, None,
                    'is missing (TLS needs cert_file and key_file)')
    cert = _readable(path, field + 'cert_file', tls['cert_file'])
    key = _readable(path, field + 'key_file', tls['key_file'])
    auth = tls.get('client_auth_type') or 'NoClientCert'
    if auth in CLIENT_AUTH_UNSUPPORTED:
        raise _fail(path, field + 'client_auth_type', auth,
                    'is not supported by ovs-rdt-agent (Python\'s TLS '
                    'verifies every client certificate it asks for): use '
                    'VerifyClientCertIfGiven or RequireAndVerifyClientCert')
    if auth not in CLIENT_AUTH:
        raise _fail(path, field + 'client_auth_type', auth, 'is not one of %s'
                    % ', '.join(CLIENT_AUTH))
    versions: dict[str, str] = {}
    for name in ('min_version', 'max_version'):
        value = tls.get(name) or (DEFAULT_MIN_VERSION if name == 'min_version'
                                  else '')
        if value and value not in TLS_VERSIONS:
            raise _fail(path, field + name, value, 'is not one of %s'
                        % ', '.join(TLS_VERSIONS))
        versions[name] = value
    low, high = versions['min_version'], versions['max_version']
    if high and TLS_VERSIONS[high] < TLS_VERSIONS[low]:
        raise _fail(path, field + 'max_version', high,
                    'is below min_version %s' % low)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[low]
    if high:
        ctx.maximum_version = TLS_VERSIONS[high]
    try:
        ssl.create_default_context(cafile=cert)
    except ssl.SSLError as exc:
        raise _fail(path, field + 'cert_file', cert, 'is not a PEM '
                    'certificate (%s)' % exc.reason) from None
    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise _fail(path, field + 'key_file', key, 'is not the PEM private '
                    'key of cert_file %s (%s)' % (cert, exc.reason)) from None
    ca = tls.get('client_ca_file')
    if ca is not None:
        ca = _readable(path, field + 'client_ca_file', ca)
        if auth == 'NoClientCert':
            raise _fail(path, field + 'client_auth_type', auth,
                        'with client_ca_file set: name the policy '
                        '(VerifyClientCertIfGiven or '
                        'RequireAndVerifyClientCert)')
        try:
            ctx.load_verify_locations(cafile=ca)
        except ssl.SSLError as exc:
            raise _fail(path, field + 'client_ca_file', ca, 'is not a PEM '
                        'CA certificate (%s)' % exc.reason) from None
    elif auth != 'NoClientCert':
        raise _fail(path, field + 'client_ca_file', None,
                    'is missing: client_auth_type %s verifies client '
                    'certificates against it' % auth)
    ctx.verify_mode = CLIENT_AUTH[auth]
    return ctx


def _users(path: str, users: dict[str, Any]) -> dict[str, bytes]:
    out = {}
    for user, hashed in users.items():
        field = 'basic_auth_users.%s' % user
        if not user or ':' in user:
            raise _fail(path, 'basic_auth_users', user, 'is not a user name '
                        '(non-empty, no ":")')
        if not isinstance(hashed, str) or not BCRYPT.match(hashed):
            raise _fail(path, field, '<hidden>' if isinstance(hashed, str)
                        else hashed, 'is not a bcrypt hash ($2y$10$ and 53 '
                        'characters, as "htpasswd -nBC 10" writes)')
        out[user] = hashed.encode('ascii')
    return out


def _headers(path: str, http: dict[str, Any]) -> list[tuple[str, str]]:
    for key in http:
        if key not in HTTP_FIELDS:
            raise _fail(path, 'http_server_config.' + key, None,
                        'is not a field of http_server_config (known: %s)'
                        % ', '.join(HTTP_FIELDS))
    if not isinstance(http.get('http2', True), bool):
        raise _fail(path, 'http_server_config.http2', http['http2'],
                    'is not true or false')
    headers = _mapping(path, 'http_server_config.headers',
                       http.get('headers'))
    out = []
    for name, value in headers.items():
        field = 'http_server_config.headers.' + name
        if name not in HEADERS:
            raise _fail(path, field, None, 'is not a header a web config '
                        'may set (%s)' % ', '.join(HEADERS))
        value = _string(path, field, value)
        if '\n' in value or '\r' in value:
            raise _fail(path, field, value, 'holds a line break')
        out.append((name, value))
    return out


def load(path: str) -> WebConfig:
    """Read and check the file; ConfigError in one line naming the field."""
    import yaml

    try:
        with open(path, 'rb') as fh:
            raw = fh.read()
    except OSError as exc:
        raise ConfigError('[metrics] web_config_file %s: cannot be read: %s'
                          % (path, exc.strerror or exc)) from None
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        mark = getattr(exc, 'problem_mark', None)
        where = ' line %d' % (mark.line + 1) if mark is not None else ''
        raise ConfigError('[metrics] web_config_file %s%s: not YAML: %s'
                          % (path, where, getattr(exc, 'problem', None)
                             or exc)) from None
    top = _mapping(path, 'the file', data)
    for key in top:
        if key not in TOP_FIELDS:
            raise _fail(path, key, None, 'is not a field of a web config '
                        '(known: %s)' % ', '.join(TOP_FIELDS))
    tls = _mapping(path, 'tls_server_config', top.get('tls_server_config'))
    context = _tls(path, tls)
    users = _users(path, _mapping(path, 'basic_auth_users',
                                  top.get('basic_auth_users')))
    headers = _headers(path, _mapping(path, 'http_server_config',
                                      top.get('http_server_config')))
    if users:
        import bcrypt  # noqa: F401 (missing: say so now, not at a scrape)
    fingerprint = hashlib.sha256(raw)
    for name in ('cert_file', 'key_file', 'client_ca_file'):
        if tls.get(name):
            with open(tls[name], 'rb') as fh:
                fingerprint.update(fh.read())
    return WebConfig(os.path.abspath(path), context, users, headers,
                     fingerprint.digest())
