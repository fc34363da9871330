"""Where a server listens: ``HOST:PORT``, ``[V6ADDR]:PORT`` for IPv6."""
from __future__ import annotations

from ovs_rdt.exceptions import ConfigError, refuse
from ovs_rdt.inputs.integers import whole


def parse_listen(text: str, where: str = '[metrics] listen') -> tuple[str, int]:
    """``HOST:PORT`` (``[V6ADDR]:PORT`` for IPv6) -> ``(host, port)``;
    ConfigError naming ``where`` otherwise.
    """
    raw = text.strip()
    host, _, port_s = raw.rpartition(':')
    bracketed = host.startswith('[') and host.endswith(']')
    if bracketed:
        host = host[1:-1]
    port = whole(port_s)
    if (not host or port is None or not 0 < port < 65536
            or (not bracketed and ':' in host)
            or any(c.isspace() or c in '[]/' for c in host)):
        raise refuse(where, text, 'is not HOST:PORT (e.g. 127.0.0.1:9468, '
                     '[::1]:9468; port 1-65535)', ConfigError)
    return host, port
