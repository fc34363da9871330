"""Emulated compute nodes and what ``ovs-rdt provider-config`` writes for them.

Each kind of node is the resctrl emulator mounted with a profile and an
``ovs-rdt.conf``; the real ``ovs-rdt provider-config`` command runs against
it and its YAML is what the fake computes of that kind are started with
(``[compute] provider_config_location``).  The aggregate metadata the
scheduler filter reads is derived from the same emulated node: the CBM
length and the CLOSIDs from its ``info/L3`` files, ``rdt_system_ways`` and
``rdt_reserved_closids`` from the provider config's reservations (the
number the command prints per domain), as an operator would copy them.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import NamedTuple

import yaml

from ovs_rdt.sandbox.emulator import MountedEmulator


class Kind(NamedTuple):
    """How one kind of node is emulated and configured."""

    name: str
    profile: str
    conf: str
    """[allocation] (and pool) sections of its ovs-rdt.conf."""
    pools: str = ''
    """Its ``[allocation] pools`` (the ``rdt_pools`` metadata)."""


class Node(NamedTuple):
    """What the real command wrote for a kind of node, and what follows."""

    kind: Kind
    provider_yaml: str
    domains: int
    """L3 cache domains (sockets)."""
    metadata: dict[str, str]
    """Aggregate metadata for RDTCacheFilter."""

    @property
    def vm_ways(self) -> int:
        """Ways per domain VMs may take."""
        return (int(self.metadata['rdt_l3_ways'])
                - int(self.metadata['rdt_system_ways']))

    @property
    def vm_closids(self) -> int:
        return (int(self.metadata['rdt_closids'])
                - int(self.metadata['rdt_reserved_closids']))

    def inventory(self, rc: str) -> dict:
        doc = yaml.safe_load(self.provider_yaml)
        for item in doc['providers'][0]['inventories']['additional']:
            if rc in item:
                return item[rc]
        raise KeyError(rc)


#: Two-socket Xeon Gold 6230 (11-way CBM, 16 CLOSIDs) keeping 2 ways per
#: socket for the system: 9 ways per socket for VMs (the issue's host).
GOLD = Kind('gold', 'xeon-gold-6230',
            '[allocation]\nsystem_min_ways = 2\n')
#: The same platform with a shared pool: 2 + 2 ways kept per socket and one
#: more CLOSID reserved.
GOLD_POOL = Kind('gold-pool', 'xeon-gold-6230',
                 '[allocation]\nsystem_min_ways = 2\npools = hp\n\n'
                 '[pool:hp]\nl3_ways = 2\n', pools='hp')
#: One-socket Xeon D-1540 (12-way CBM, 16 CLOSIDs), 3 ways for the system.
XEON_D = Kind('xeon-d', 'xeon-d-1540', '[allocation]\nsystem_min_ways = 3\n')

KINDS = (GOLD, GOLD_POOL, XEON_D)


def _read(path: str) -> str:
    with open(path, encoding='ascii') as fh:
        return fh.read().strip()


def emulate(kind: Kind, workdir: str) -> Node:
    """Mount the emulator for ``kind``, run ``ovs-rdt provider-config`` on it,
    unmount.  Raises what the emulator or the command raise.
    """
    tmp = tempfile.mkdtemp(prefix=kind.name + '-', dir=workdir)
    emu = MountedEmulator(tmp, kind.profile).start()
    try:
        conf = os.path.join(tmp, 'ovs-rdt.conf')
        with open(conf, 'w', encoding='ascii') as fh:
            fh.write('[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n\n%s'
                     % (emu.root, emu.sysfs, kind.conf))
        out = os.path.join(tmp, 'provider.yaml')
        proc = subprocess.run(
            [sys.executable, '-m', 'ovs_rdt.cmd.main', '--config-file', conf,
             'provider-config', '--output', out],
            capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise RuntimeError('ovs-rdt provider-config failed for %s: %s'
                               % (kind.name, proc.stderr.strip()))
        with open(out, encoding='utf-8') as fh:
            text = fh.read()
        cbm_len = bin(int(_read(emu.path('info', 'L3', 'cbm_mask')),
                          16)).count('1')
        closids = int(_read(emu.path('info', 'L3', 'num_closids')))
    finally:
        problems = emu.stop()
    if problems:
        raise RuntimeError('emulator of %s: %s' % (kind.name, problems))
    doc = yaml.safe_load(text)
    inv = {k: v for item in doc['providers'][0]['inventories']['additional']
           for k, v in item.items()}
    ways = inv['CUSTOM_RDT_L3_WAY']
    domains = ways['total'] // cbm_len
    assert ways['reserved'] % domains == 0, ways
    metadata = {'rdt_l3_ways': str(cbm_len),
                'rdt_system_ways': str(ways['reserved'] // domains),
                'rdt_closids': str(closids),
                'rdt_reserved_closids': str(inv['CUSTOM_RDT_CLOSID']
                                            ['reserved']),
                'rdt_pools': kind.pools}
    return Node(kind, text, domains, metadata)


_NODES: dict[str, Node] = {}


def prepare(workdir: str) -> None:
    """Emulate every kind once (a pytest session fixture calls this)."""
    for kind in KINDS:
        if kind.name not in _NODES:
            _NODES[kind.name] = emulate(kind, workdir)


def node(kind: Kind) -> Node:
    if kind.name not in _NODES:
        with tempfile.TemporaryDirectory(prefix='ovs-rdt-nova-') as tmp:
            prepare(tmp)
    return _NODES[kind.name]
