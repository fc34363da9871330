"""What a resctrl mount says about itself, for the behaviours.

ovs-rdt's own reading of ``info/`` (:meth:`ovs_rdt.resctrl.Resctrl.platform`:
ways, CLOSIDs, domains, ``min_cbm_bits``, sparse masks, way sizes, MB,
CDP, io_alloc) and, beside it, what only the selftest needs: the default
group's schemata lines, the ``info/`` listing, the SNC nodes and the mount.
``behaviours.tree.check_info`` checks the reading against the files.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ovs_rdt.core.model import Platform
from ovs_rdt.resctrl.text import parse_schemata, resource_lines

if TYPE_CHECKING:
    from ovs_rdt.selftest.node import Node

#: What a behaviour may need from the node (see :meth:`Geometry.has`).
NEEDS = {
    'mon': 'L3 monitoring (info/L3_MON)',
    'cdp': 'L3 code/data prioritisation (mounted -o cdp)',
    'mb': 'memory bandwidth allocation (info/MB)',
    'snc': 'Sub-NUMA Clustering (mon_sub_L3_* directories)',
    'io_alloc': 'io_alloc (info/L3/io_alloc)',
    'mbm_event': 'assignable MBM counters in mbm_event mode',
}


@dataclass
class GroupState:
    """A control group's mode and cache masks (``CODE | DATA`` under CDP)."""

    name: str
    mode: str
    l3: dict[int, int]


@dataclass
class Geometry:
    plat: Platform
    root: dict[str, dict[int, str]]     # the default group's schemata lines
    info: list[str]
    snc: int = 1                        # monitoring nodes per L3 domain
    fstype: str | None = None            # 'resctrl' on a node

    @property
    def cbm_len(self) -> int:
        return self.plat.cbm_len

    @property
    def full(self) -> int:
        return (1 << self.plat.cbm_len) - 1

    @property
    def ids(self) -> list[int]:
        return list(self.plat.domains)

    @property
    def d0(self) -> int:
        return self.plat.domains[0]

    @property
    def dl(self) -> int:
        return self.plat.domains[-1]

    @property
    def min_bits(self) -> int:
        return self.plat.min_cbm_bits

    @property
    def l3(self) -> list[str]:
        """``['L3']``, or ``['L3DATA', 'L3CODE']`` under CDP."""
        return ['L3DATA', 'L3CODE'] if self.plat.cdp else ['L3']

    @property
    def mon(self) -> bool:
        return 'L3_MON' in self.info

    @property
    def events(self) -> list[str]:
        return [e for e in self.plat.mon_features if not e.endswith('_config')]

    @property
    def mb_unit(self) -> str | None:
        return self.plat.mb.unit if self.plat.mb else None

    @property
    def io_cbm(self) -> dict[int, int]:
        return {d: m.value for d, m in self.plat.io_alloc_cbm.items()}

    def has(self, need: str) -> bool:
        return {'mon': self.mon, 'cdp': self.plat.cdp, 'mb': 'MB' in self.root,
                'snc': self.snc > 1, 'io_alloc': self.plat.io_alloc is not None,
                'mbm_event': self.plat.mbm_assign_mode == 'mbm_event'}[need]

    def way_bytes(self, dom: int) -> int:
        """Bytes per way on ``dom`` (0: the default group has no ways there)."""
        return self.plat.cache_bytes.get(dom, 0) // self.cbm_len

    def l3_line(self, masks: dict[int, int]) -> str:
        """The same masks on every L3 schema (CODE and DATA under CDP)."""
        body = ';'.join('%d=%x' % kv for kv in sorted(masks.items()))
        return ''.join('%s:%s\n' % (res, body) for res in self.l3)

    def masks(self, text: str) -> dict[int, int]:
        """A group's L3 masks from its schemata (CODE | DATA under CDP)."""
        return {d: m.value for d, m in parse_schemata(text, self.cbm_len)[0].items()}

    def groups(self, node: 'Node', but: str | None = None) -> list[GroupState]:
        """Every control group (but ``but``), the default group ('') first."""
        return [GroupState(name, mode.strip(), self.masks(text))
                for name, (mode, text) in node.states().items() if name != but]

    @classmethod
    def read(cls, node: 'Node') -> 'Geometry':
        plat = node.resctrl.platform(refresh=True)
        geo = cls(plat, resource_lines(node.read('schemata')), node.listdir('info'))
        if geo.mon:
            subs = [n for n in node.listdir('mon_data/mon_L3_%02d' % geo.d0)
                    if n.startswith('mon_sub_L3_')]
            geo.snc = max(len(subs), 1)
        geo.fstype = (node.resctrl.mount_entry() or (None, []))[0]
        return geo
