"""``info/L3/io_alloc`` and ``io_alloc_cbm``: cache ways for I/O (AMD SDCIAE).

From ``fs/resctrl/ctrlmondata.c`` (``resctrl_io_alloc_write()``,
``resctrl_io_alloc_cbm_write()`` and their ``_show`` twins): enabling takes
the highest CLOSID (half of them under CDP, minus one), which must be free,
and gives it every shareable or unused way (``rdtgroup_init_cat()``); the
CLOSID then counts as allocated with no group, so new groups start off its
ways, an exclusive group may not overlap them and ``bit_usage`` shows them as
hardware-shared (``H``/``X``).  Under CDP, CODE and DATA stay in sync.
"""
from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Callable

from ovs_rdt.emulator.context import Model, oserror
from ovs_rdt.emulator.groups import SHAREABLE
from ovs_rdt.emulator.kparse import ParseError, cstr, kstrtobool

if TYPE_CHECKING:
    from ovs_rdt.emulator.model import Caller
    from ovs_rdt.emulator.schemas import Schema


class IoAlloc:
    def __init__(self, model: 'Model') -> None:
        self.model = model
        self.enabled = False

    @property
    def closid(self) -> int:
        """``resctrl_io_alloc_closid()``."""
        num = self.model.profile.l3_num_closids
        return num // 2 - 1 if self.model.mount.cdp else num - 1

    def info_files(self, schema: 'Schema') -> dict[str, Callable[[], str]]:
        return {'io_alloc': self.show, 'io_alloc_cbm': lambda: self.cbm_show(schema)}

    def writers(self, schema: 'Schema') -> dict[str, Callable[[bytes, 'Caller'], None]]:
        if not (schema.is_cache and self.model.profile.io_alloc):
            return {}
        return {'io_alloc': lambda data, _c: self.write(schema, data),
                'io_alloc_cbm': lambda data, _c: self.cbm_write(schema, data)}

    def show(self) -> str:
        return 'enabled\n' if self.enabled else 'disabled\n'

    def write(self, schema: 'Schema', data: bytes) -> None:
        model = self.model
        try:
            enable = kstrtobool(cstr(data.decode('latin-1')))
        except ParseError as exc:
            raise oserror(exc.errno) from None
        model.status.clear()
        if enable == self.enabled:
            return
        closid = self.closid
        if closid >= model.closids_supported:
            raise model.status.fail(
                errno.EINVAL, 'io_alloc CLOSID (ctrl_hw_id) %u is not available\n' % closid)
        if not enable:
            model.closid_used[closid] = False
            self.enabled = False
            model.mon.controls_changed()
            return
        if model.closid_used[closid]:
            owner = next((g.name for g in model.ctrl_groups() if g.closid == closid), 'another')
            raise model.status.fail(errno.ENOSPC, 'CLOSID (ctrl_hw_id) %u for io_alloc is used by '
                                    '%s group\n' % (closid, owner))
        model.closid_used[closid] = True
        try:
            staged = {key: val for key, val in self._init_cbm(schema).items()}
        except OSError:
            model.status.puts('Failed to initialize io_alloc allocations\n')
            model.closid_used[closid] = False
            raise
        model.apply(closid, staged)
        self.enabled = True

    def _init_cbm(self, schema: 'Schema') -> dict[tuple[str, int], int]:
        """``resctrl_io_alloc_init_cbm()``: this schema's init, copied to its peer."""
        model = self.model
        staged = {}
        for dom in model.profile.domains:
            val = model.init_one_domain(dom, self.closid, schema)
            if bin(val).count('1') < model.profile.min_cbm_bits:
                raise model.status.fail(errno.ENOSPC, 'No space on %s:%d\n' % (schema.name, dom))
            staged[(schema.name, dom)] = val
            if schema.peer:
                staged[(schema.peer, dom)] = val
        return staged

    def _check_enabled(self, schema: 'Schema') -> None:
        if not self.enabled:
            raise self.model.status.fail(errno.EINVAL,
                                         'io_alloc is not enabled on %s\n' % schema.name)

    def cbm_show(self, schema: 'Schema') -> str:
        self.model.status.clear()
        if 'io-alloc-cbm-readable' not in self.model.diverge:
            self._check_enabled(schema)
        return self.model.show_doms(schema, self.closid)

    def cbm_write(self, schema: 'Schema', data: bytes) -> None:
        model = self.model
        if not data or data[-1:] != b'\n':
            raise oserror(errno.EINVAL)
        text = cstr(data[:-1].decode('latin-1'))
        model.status.clear()
        self._check_enabled(schema)
        staged: dict[tuple[str, int], int] = {}
        model.parse_line(text, schema.name, model.root, staged, closid=self.closid,
                         mode=SHAREABLE)
        if schema.peer:
            staged.update({(schema.peer, dom): val for (_res, dom), val in staged.items()})
        model.apply(self.closid, staged)
