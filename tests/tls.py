"""Certificates and web config files for the metrics endpoint's tests.

``Pki(directory)`` makes, with the ``openssl`` command (EC P-256, two days):
a CA, a server certificate for 127.0.0.1/localhost, a client certificate
that CA signed and one a second CA signed (a stranger's).
"""
from __future__ import annotations

import os
import subprocess

import yaml

USER = 'prometheus'
PASSWORD = 'scrape-me'


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run(('openssl',) + args, cwd=cwd, check=True,
                   capture_output=True, timeout=30)


class Pki:
    """Key pairs below ``directory``: ``path('server.crt')`` and so on."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        for ca in ('ca', 'stranger-ca'):
            _openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt',
                     'ec_paramgen_curve:P-256', '-nodes', '-keyout',
                     ca + '.key', '-out', ca + '.crt', '-days', '2', '-subj',
                     '/CN=' + ca, cwd=directory)
        self.sign('server', 'ca', 'subjectAltName=IP:127.0.0.1,DNS:localhost')
        self.sign('client', 'ca', 'extendedKeyUsage=clientAuth')
        self.sign('stranger', 'stranger-ca', 'extendedKeyUsage=clientAuth')

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def sign(self, name: str, ca: str, ext: str) -> None:
        _openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256',
                 '-nodes', '-keyout', name + '.key', '-out', name + '.csr',
                 '-subj', '/CN=' + name, cwd=self.dir)
        with open(self.path(name + '.ext'), 'w', encoding='ascii') as fh:
            fh.write(ext + '\n')
        _openssl('x509', '-req', '-in', name + '.csr', '-CA', ca + '.crt',
                 '-CAkey', ca + '.key', '-CAcreateserial', '-out',
                 name + '.crt', '-days', '2', '-extfile', name + '.ext',
                 cwd=self.dir)


def bcrypt_hash(password: str, rounds: int = 10) -> str:
    """As ``htpasswd -nBC 10`` writes it ($2y$)."""
    import bcrypt
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds))
    return '$2y$' + hashed.decode()[4:]


def web_config(pki: Pki, path: str, users: dict[str, str] | None = None,
               **tls: str) -> str:
    """Write a web config: TLS with the server's pair, client certificates
    required (unless ``tls`` says otherwise), ``users`` (user: password).
    """
    tls_conf = {'cert_file': pki.path('server.crt'),
                'key_file': pki.path('server.key'),
                'client_auth_type': 'RequireAndVerifyClientCert',
                'client_ca_file': pki.path('ca.crt')}
    tls_conf.update(tls)
    data: dict = {'tls_server_config': {k: v for k, v in tls_conf.items()
                                        if v is not None}}
    if users is None:
        users = {USER: PASSWORD}
    if users:
        data['basic_auth_users'] = {u: bcrypt_hash(p, 4)
                                    for u, p in users.items()}
    with open(path, 'w', encoding='utf-8') as fh:
        yaml.safe_dump(data, fh)
    return path
