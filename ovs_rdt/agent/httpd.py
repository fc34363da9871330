"""The metrics endpoint's HTTP(S) server: one thread per connection.

``prometheus_client`` formats the metrics (its WSGI app: text format or
OpenMetrics as the scraper asks, gzip); this module serves them with what
``[metrics] web_config_file`` asks (:mod:`ovs_rdt.agent.webconfig`):

* TLS: the handshake runs in the connection's own thread, with a deadline
  (prometheus_client's own server shakes hands in its accept loop, where
  one client that connects and sends nothing stalls every scrape);
  a client that speaks plain HTTP, shows no certificate where one is
  required, or one no trusted CA signed, is dropped at the handshake.
* basic auth: ``401`` with ``WWW-Authenticate`` unless the request names
  a user of ``basic_auth_users`` and that user's password.
"""
from __future__ import annotations

import logging
import socket
import socketserver
import ssl
import threading
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ovs_rdt.agent.webconfig import WebConfig

LOG = logging.getLogger(__name__)

#: Seconds a client has for the TLS handshake and for each read.
CLIENT_TIMEOUT = 10.0


class _Handler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        LOG.debug('metrics: %s %s', self.address_string(), format % args)


class Server(socketserver.ThreadingMixIn, WSGIServer):
    """A threaded WSGI server, TLS optional."""

    daemon_threads = True
    web: WebConfig | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(CLIENT_TIMEOUT)
        if isinstance(request, ssl.SSLSocket):
            try:
                request.do_handshake()
            except (ssl.SSLError, OSError) as exc:
                LOG.debug('metrics: TLS handshake with %s refused: %s',
                          client_address[0], exc)
                return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        LOG.debug('metrics: connection from %s failed', client_address[0],
                  exc_info=True)


def guarded(app: Callable, web: WebConfig | None) -> Callable:
    """``app`` behind the web config's basic auth and headers."""
    if web is None:
        return app
    extra = list(web.headers)

    def wrapped(environ: dict[str, Any],
                start_response: Callable) -> Iterable[bytes]:
        if not web.authorized(environ.get('HTTP_AUTHORIZATION')):
            start_response('401 Unauthorized', [
                ('Content-Type', 'text/plain; charset=utf-8'),
                ('WWW-Authenticate', 'Basic realm="ovs-rdt"')] + extra)
            return [b'Unauthorized\n']

        def respond(status: str, headers: list, *args: Any) -> Any:
            return start_response(status, headers + extra, *args)
        return app(environ, respond)

    return wrapped


def serve(host: str, port: int, registry: Any,
          web: WebConfig | None = None) -> Server:
    """Listen on ``host:port`` and serve ``registry`` from a thread."""
    from prometheus_client.exposition import make_wsgi_app

    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                flags=socket.AI_PASSIVE)[0][0]

    class Bound(Server):
        address_family = family

    httpd = Bound((host, port), _Handler)
    httpd.web = web
    httpd.set_app(guarded(make_wsgi_app(registry), web))
    if web is not None and web.context is not None:
        httpd.socket = web.context.wrap_socket(
            httpd.socket, server_side=True, do_handshake_on_connect=False)
    thread = threading.Thread(target=httpd.serve_forever,
                              name='metrics-http', daemon=True)
    thread.start()
    return httpd
