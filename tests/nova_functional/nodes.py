"""Emulated compute nodes and what ``ovs-rdt provider-config`` writes for them.

Each kind of node is the resctrl emulator mounted with a profile (and
emulator overrides) and an ``ovs-rdt.conf``; the real ``ovs-rdt
provider-config`` command runs against it and its YAML is what the
computes of that kind are started with (``[compute]
provider_config_location``): Placement's inventory of the node.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import NamedTuple

import yaml

from ovs_rdt.sandbox.emulator import MountedEmulator

RC_WAYS = 'CUSTOM_RDT_L3_WAY'
RC_CLOSID = 'CUSTOM_RDT_CLOSID'


class Kind(NamedTuple):
    """How one kind of node is emulated and configured."""

    name: str
    profile: str
    conf: str
    """[allocation] (and pool) sections of its ovs-rdt.conf."""
    emulator_args: tuple[str, ...] = ()
    """Extra ``ovs-rdt emulate`` arguments (``--set l3_num_closids=4``)."""


class Node(NamedTuple):
    """What the real command wrote for a kind of node."""

    kind: Kind
    provider_yaml: str
    groups: int
    """Cache groups (sockets here)."""

    def inventory(self, rc: str) -> dict:
        doc = yaml.safe_load(self.provider_yaml)
        for item in doc['providers'][0]['inventories']['additional']:
            if rc in item:
                return item[rc]
        raise KeyError(rc)

    @property
    def traits(self) -> list[str]:
        return yaml.safe_load(self.provider_yaml)['providers'][0]['traits'][
            'additional']

    @property
    def vm_ways(self) -> int:
        """Ways per cache group VMs may take."""
        inv = self.inventory(RC_WAYS)
        return (inv['total'] - inv['reserved']) // self.groups

    @property
    def vm_closids(self) -> int:
        inv = self.inventory(RC_CLOSID)
        return inv['total'] - inv['reserved']


#: Two-socket Xeon Gold 6230 (11-way CBM, 16 CLOSIDs) keeping 2 ways per
#: socket for the system: 9 ways per socket for VMs, 18 in all.
GOLD = Kind('gold', 'xeon-gold-6230', '[allocation]\nsystem_min_ways = 2\n')
#: The same platform with a shared pool: 2 + 2 ways kept per socket and one
#: more CLOSID reserved.
GOLD_POOL = Kind('gold-pool', 'xeon-gold-6230',
                 '[allocation]\nsystem_min_ways = 2\npools = hp\n\n'
                 '[pool:hp]\nl3_ways = 2\n')
#: One-socket Xeon D-1540 (12-way CBM, 16 CLOSIDs), 3 ways for the system.
XEON_D = Kind('xeon-d', 'xeon-d-1540', '[allocation]\nsystem_min_ways = 3\n')
#: GOLD with 4 CLOSIDs (``--set``): 3 VMs fill it while ways are left.
GOLD_FEW_CLOSIDS = Kind('gold-4clos', 'xeon-gold-6230',
                        '[allocation]\nsystem_min_ways = 2\n',
                        ('--set', 'l3_num_closids=4', '--set',
                         'mb_num_closids=4'))

KINDS = (GOLD, GOLD_POOL, XEON_D, GOLD_FEW_CLOSIDS)


def emulate(kind: Kind, workdir: str) -> Node:
    """Mount the emulator for ``kind``, run ``ovs-rdt provider-config`` on it,
    unmount.  Raises what the emulator or the command raise.
    """
    tmp = tempfile.mkdtemp(prefix=kind.name + '-', dir=workdir)
    emu = MountedEmulator(tmp, kind.profile, kind.emulator_args).start()
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
    finally:
        problems = emu.stop()
    if problems:
        raise RuntimeError('emulator of %s: %s' % (kind.name, problems))
    groups = text.split('cache group: ', 1)[1].split('\n', 1)[0].count(';') + 1
    return Node(kind, text, groups)


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
