"""``python3 -m nova_plugin.upgrade``: what to change after 0.3's flavors.

Since 0.4 Placement counts an instance's cache; a flavor asks for it with
``resources:CUSTOM_RDT_L3_WAY`` and ``resources:CUSTOM_RDT_CLOSID``, a pool
or a cap also with its trait (:mod:`ovs_rdt.inputs.placement`).  This lists,
through the Nova API, the flavors that ask the 0.3 way (``rdt:l3_ways``
alone, which RDTCacheFilter now refuses) with the ``openstack flavor``
commands that change them (:func:`ovs_rdt.inputs.placement.advice`), and
the servers on a host with such specs: a flavor's change does not
reach its instances (each keeps a copy), so each is resized to a flavor
with the new specs.  Nothing is changed.

Credentials as every OpenStack client takes them (``OS_*`` variables or
``--os-*`` options: keystoneauth1's).  Exit status 0 when nothing is left
to change, 3 when something is listed, 1 on an error.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any, Iterator, TextIO

from ovs_rdt.inputs import placement

#: Flavor listings with extra specs; server listings with each one's
#: embedded flavor and its extra specs.
FLAVOR_MICROVERSION = '2.61'
SERVER_MICROVERSION = '2.47'
PAGE = 1000


def _pages(api: Any, path: str, key: str, microversion: str,
           query: str) -> Iterator[dict]:
    marker = None
    while True:
        url = '%s?%s&limit=%d' % (path, query, PAGE) + (
            '&marker=%s' % marker if marker else '')
        found = api.get(url, microversion=microversion).json()[key]
        yield from found
        if len(found) < PAGE:
            return
        marker = found[-1]['id']


def report(api: Any, cache_groups: int, out: TextIO) -> int:
    """List through ``api`` (a keystoneauth1 Adapter for the compute API)
    what to change; 0 nothing, 3 something.
    """
    changed = {}
    for flavor in _pages(api, '/flavors/detail', 'flavors',
                         FLAVOR_MICROVERSION, 'is_public=None'):
        todo = placement.advice(flavor.get('extra_specs') or {},
                                cache_groups)
        if not todo:
            continue
        changed[flavor['name']] = flavor
        out.write('flavor %s (id %s): %s\n' % (
            flavor['name'], flavor['id'], '; '.join(todo.notes) or
            'what Placement is to count'))
        ident = shlex.quote(flavor['id'])
        if todo.set:
            out.write('  openstack flavor set %s %s\n' % (' '.join(
                '--property %s' % shlex.quote('%s=%s' % kv)
                for kv in sorted(todo.set.items())), ident))
        if todo.unset:
            out.write('  openstack flavor unset %s %s\n' % (' '.join(
                '--property %s' % shlex.quote(key) for key in todo.unset),
                ident))
    old = []
    for server in _pages(api, '/servers/detail', 'servers',
                         SERVER_MICROVERSION, 'all_tenants=1'):
        embedded = server.get('flavor') or {}
        if server.get('OS-EXT-SRV-ATTR:host') and placement.advice(
                embedded.get('extra_specs') or {}, cache_groups):
            old.append(server)
    if old:
        out.write('servers whose flavor copy asks the 0.3 way (Placement does '
                  'not count their cache; RDTCacheFilter refuses to move '
                  'them): resize each to a flavor with the new specs\n')
        for server in old:
            out.write('  server %s (%s) on %s: flavor %s\n' % (
                server['id'], server['name'], server['OS-EXT-SRV-ATTR:host'],
                server['flavor'].get('original_name', '?')))
    if not changed and not old:
        out.write('nothing to change: every flavor and server asks Placement '
                  'for its cache\n')
        return 0
    return 3


def parser(argv: list[str]) -> argparse.ArgumentParser:
    from keystoneauth1 import loading

    out = argparse.ArgumentParser(
        prog='python3 -m nova_plugin.upgrade',
        description=__doc__.split('\n\n')[1].replace('\n', ' '))
    out.add_argument(
        '--cache-groups', type=int, default=2, metavar='N',
        help='cache groups (sockets; NUMA nodes on AMD EPYC) of the hosts an '
             'instance without a NUMA topology runs on: it spans them all, so '
             'its flavor asks rdt:l3_ways x N ways in all (default: 2)')
    out.add_argument('--os-interface',
                     default=os.environ.get('OS_INTERFACE', 'public'),
                     help='the compute endpoint\'s interface (public)')
    out.add_argument('--os-region-name',
                     default=os.environ.get('OS_REGION_NAME'))
    loading.register_session_argparse_arguments(out)
    loading.register_auth_argparse_arguments(out, argv, default='password')
    return out


def main(argv: list[str] | None = None) -> int:
    from keystoneauth1 import adapter
    from keystoneauth1 import exceptions
    from keystoneauth1 import loading

    argv = sys.argv[1:] if argv is None else argv
    args = parser(argv).parse_args(argv)
    if args.cache_groups < 1:
        sys.stderr.write('--cache-groups: must be 1 or more\n')
        return 2
    try:
        auth = loading.load_auth_from_argparse_arguments(args)
        session = loading.load_session_from_argparse_arguments(args,
                                                               auth=auth)
        api = adapter.Adapter(session, service_type='compute',
                              interface=args.os_interface,
                              region_name=args.os_region_name)
        return report(api, args.cache_groups, sys.stdout)
    except exceptions.ClientException as exc:
        sys.stderr.write('python3 -m nova_plugin.upgrade: %s\n' % exc)
        return 1


if __name__ == '__main__':
    sys.exit(main())
