"""What a resctrl mount says about itself, read as the kernel writes it.

The behaviours take everything they need from here (CBM width, domain ids,
``min_cbm_bits``, sparse masks, CLOSIDs, MB range and unit, CDP, SNC,
io_alloc, assignable counters), so no expectation is per platform.  The
parsing is the selftest's own: it checks the kernel and, in
``behaviours.info``, ovs-rdt's reading of it (:mod:`ovs_rdt.resctrl`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ovs_rdt.selftest.node import Node

Schemata = dict[str, dict[int, str]]
#: What a behaviour may need from the node (see :meth:`Geometry.has`).
NEEDS = {
    'mon': 'L3 monitoring (info/L3_MON)',
    'cdp': 'L3 code/data prioritisation (mounted -o cdp)',
    'mb': 'memory bandwidth allocation (info/MB)',
    'snc': 'Sub-NUMA Clustering (mon_sub_L3_* directories)',
    'io_alloc': 'io_alloc (info/L3/io_alloc)',
    'mbm_event': 'assignable MBM counters in mbm_event mode',
}
#: Modes whose ways no other group may overlap.
UNSHAREABLE = ('exclusive', 'pseudo-locked')


def parse(text: str) -> Schemata:
    """``schemata``/``size``/``io_alloc_cbm`` text -> {resource: {domain:
    value}} (padded names stripped; a line without ``RES:`` is ``''``).
    """
    out: Schemata = {}
    for line in text.splitlines():
        res, _, rest = line.strip().rpartition(':')
        values = out.setdefault(res.strip(), {})
        for item in rest.strip().split(';'):
            dom, eq, value = item.partition('=')
            if eq:
                values[int(dom)] = value.strip()
    return out


def weight(mask: int) -> int:
    return bin(mask).count('1')


def run_in(avail: int, ways: int, width: int) -> int | None:
    """The lowest ``ways`` consecutive ways within ``avail``, or None."""
    want = (1 << ways) - 1
    for shift in range(width - ways + 1):
        if avail & (want << shift) == want << shift:
            return want << shift
    return None


def mount_entry(root: str, mounts: str = '/proc/self/mounts') -> tuple[str, list[str]] | None:
    """(fstype, options) of the mount at ``root``; None if it is none."""
    where = os.path.realpath(root)
    found = None
    try:
        with open(mounts, encoding='utf-8', errors='replace') as fh:
            for line in fh:
                fields = line.split()
                if len(fields) >= 4 and \
                        fields[1].replace('\\040', ' ').rstrip('/') == where.rstrip('/'):
                    found = (fields[2], fields[3].split(','))
    except OSError:
        return None
    return found


@dataclass
class GroupState:
    """A control group's mode and cache masks (``CODE | DATA`` under CDP)."""

    name: str
    mode: str
    l3: dict[int, int]


@dataclass
class Geometry:
    root: Schemata
    info: list[str]
    l3: list[str]                       # ['L3'], or ['L3DATA', 'L3CODE'] (CDP)
    ids: list[int]
    full: int
    min_bits: int
    sparse: bool
    shareable_bits: int
    num_closids: int
    bw: dict[str, tuple[int, int]] = field(default_factory=dict)    # min, gran
    delay_linear: bool = True
    mb_unit: str | None = None          # 'percent', 'mbps', 'amd'
    mon: bool = False
    events: list[str] = field(default_factory=list)
    mbm_event: bool = False
    snc: int = 1                        # monitoring nodes per L3 domain
    io_alloc: str | None = None         # 'enabled', 'disabled'
    io_cbm: dict[int, int] = field(default_factory=dict)
    fstype: str | None = None
    options: list[str] = field(default_factory=list)

    @property
    def cbm_len(self) -> int:
        return self.full.bit_length()

    @property
    def d0(self) -> int:
        return self.ids[0]

    @property
    def dl(self) -> int:
        return self.ids[-1]

    @property
    def cdp(self) -> bool:
        return self.l3 != ['L3']

    def has(self, need: str) -> bool:
        return {'mon': self.mon, 'cdp': self.cdp, 'mb': 'MB' in self.root,
                'snc': self.snc > 1, 'io_alloc': self.io_alloc is not None,
                'mbm_event': self.mbm_event}[need]

    def hw_shared(self, dom: int) -> int:
        """Ways the hardware fills too: shareable_bits and io_alloc's."""
        return self.shareable_bits | self.io_cbm.get(dom, 0)

    def l3_line(self, masks: dict[int, int]) -> str:
        """The same masks on every L3 schema (CODE and DATA under CDP)."""
        body = ';'.join('%d=%x' % kv for kv in sorted(masks.items()))
        return ''.join('%s:%s\n' % (res, body) for res in self.l3)

    def masks(self, text: str) -> dict[int, int]:
        """A group's L3 masks from its schemata (CODE | DATA under CDP)."""
        out: dict[int, int] = {}
        lines = parse(text)
        for res in self.l3:
            for dom, value in lines.get(res, {}).items():
                out[dom] = out.get(dom, 0) | int(value, 16)
        return out

    def states(self, node: 'Node') -> list[GroupState]:
        """Every control group's mode and masks, the default group first."""
        out = []
        for name in node.groups():
            try:
                out.append(GroupState(
                    name, node.read(os.path.join(name, 'mode')).strip(),
                    self.masks(node.read(os.path.join(name, 'schemata')))))
            except OSError:
                continue
        return out

    def way_bytes(self, node: 'Node', dom: int) -> int:
        """Bytes per way, from the default group's ``size`` (its cache
        size over its ways), 0 when it has none there.
        """
        size = parse(node.read('size')).get(self.l3[0], {}).get(dom)
        mask = parse(node.read('schemata')).get(self.l3[0], {}).get(dom)
        if size is None or mask is None or not int(mask, 16):
            return 0
        return int(size) // weight(int(mask, 16))

    @classmethod
    def read(cls, node: 'Node') -> 'Geometry':
        root = parse(node.read('schemata'))
        info = node.listdir('info')
        l3 = ['L3DATA', 'L3CODE'] if 'L3CODE' in info else ['L3']
        first = 'info/%s/' % l3[0]
        ids = sorted(root.get(l3[0], {}))
        closids = [int(node.read('info/%s/num_closids' % r)) for r in info
                   if node.exists('info/%s/num_closids' % r)]
        geo = cls(root=root, info=info, l3=l3, ids=ids,
                  full=int(node.read(first + 'cbm_mask'), 16),
                  min_bits=int(node.read(first + 'min_cbm_bits')),
                  sparse=(node.read(first + 'sparse_masks').strip() == '1'
                          if node.exists(first + 'sparse_masks') else False),
                  shareable_bits=int(node.read(first + 'shareable_bits'), 16),
                  num_closids=min(closids))
        for res in ('MB', 'SMBA'):
            if res in root:
                geo.bw[res] = (int(node.read('info/%s/min_bandwidth' % res)),
                               int(node.read('info/%s/bandwidth_gran' % res)))
        if 'MB' in root:
            geo.delay_linear = node.read('info/MB/delay_linear').strip() == '1'
        entry = mount_entry(node.root)
        if entry is not None:
            geo.fstype, geo.options = entry
        if 'MB' in geo.bw:
            if node.exists('mba_MBps_event') or 'mba_MBps' in geo.options:
                geo.mb_unit = 'mbps'
            elif not geo.delay_linear and not geo.bw['MB'][0]:
                geo.mb_unit = 'amd'
            else:
                geo.mb_unit = 'percent'
        geo.mon = 'L3_MON' in info
        if geo.mon:
            geo.events = [e for e in node.read('info/L3_MON/mon_features').split()
                          if not e.endswith('_config')]
            mode = 'info/L3_MON/mbm_assign_mode'
            geo.mbm_event = (node.exists(mode)
                             and '[mbm_event]' in node.read(mode).split())
            subs = [n for n in node.listdir('mon_data/mon_L3_%02d' % geo.d0)
                    if n.startswith('mon_sub_L3_')]
            geo.snc = max(len(subs), 1)
        if node.exists(first + 'io_alloc'):
            state = node.read(first + 'io_alloc').strip()
            if state in ('enabled', 'disabled'):
                geo.io_alloc = state
            if state == 'enabled':
                geo.io_cbm = {d: int(v, 16) for d, v in
                              parse(node.read(first + 'io_alloc_cbm')).get('', {}).items()}
        return geo
