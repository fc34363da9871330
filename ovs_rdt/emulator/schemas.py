"""The schemata resources of one mount (``resctrl_schema_all``) and mount options.

``schemata_list_create()`` in ``fs/resctrl/rdtgroup.c`` adds one schema per
allocation-capable resource in resource order (L3, L2, MB, SMBA), two for a
resource mounted with CDP (``L3CODE`` then ``L3DATA``), each with
``list_add()``, so the list (and every ``schemata`` file) runs backwards:
``SMBA``, ``MB``, ``L3DATA``, ``L3CODE``.  A CDP schema has half the
resource's CLOSIDs; the name column is as wide as the longest name, counting
the ``CODE`` suffix for a CDP-capable resource even when CDP is off.
"""
from __future__ import annotations

from dataclasses import dataclass

from ovs_rdt.emulator.profiles import Profile

MBA_MAX_MBPS = 0xFFFFFFFF        # U32_MAX, the mba_MBps default (MBA_MAX_MBPS)
MOUNT_OPTIONS = ('cdp', 'cdpl2', 'mba_MBps', 'debug')
MBA_MBPS_REFUSED = ('mba_MBps requires MBM (mbm_event mode not supported) and '
                    'linear scale MBA at L3 scope')


@dataclass(frozen=True)
class Mount:
    """What ``mount -o`` asked for (``rdt_parse_param()``)."""

    cdp: bool = False
    mba_sc: bool = False
    debug: bool = False


@dataclass(frozen=True)
class Schema:
    name: str           # L3, L3CODE, L3DATA, MB, SMBA
    res: str            # L3, MB, SMBA
    num_closid: int

    @property
    def is_cache(self) -> bool:
        return self.res == 'L3'

    @property
    def peer(self) -> str:
        """``resctrl_peer_type()``: CODE <-> DATA; a non-CDP schema has none."""
        return {'L3CODE': 'L3DATA', 'L3DATA': 'L3CODE'}.get(self.name, '')


def supports_mba_mbps(profile: Profile) -> bool:
    """``supports_mba_mbps()``: MBM, linear MBA, same scope, no assignable counters."""
    return (profile.mba and profile.delay_linear and profile.snc_nodes == 1
            and profile.mbm_cntrs == 0)


def parse_mount_options(profile: Profile, text: str) -> Mount:
    """``-o cdp,mba_MBps`` -> :class:`Mount`; ``ValueError`` like a failed mount."""
    opts = [o for o in text.split(',') if o] if text else []
    for opt in opts:
        if opt not in MOUNT_OPTIONS:
            raise ValueError("resctrl: Unknown parameter '%s'" % opt)
        if opt == 'cdpl2':
            raise ValueError('cdpl2: the profile has no L2 CAT (mount fails with EINVAL)')
        if opt == 'cdp' and not profile.cdp_capable:
            raise ValueError('cdp: the profile is not CDP capable (mount fails with EINVAL)')
        if opt == 'mba_MBps' and not supports_mba_mbps(profile):
            raise ValueError('resctrl: ' + MBA_MBPS_REFUSED)
    return Mount(cdp='cdp' in opts, mba_sc='mba_MBps' in opts, debug='debug' in opts)


def build_schemas(profile: Profile, mount: Mount) -> list[Schema]:
    """``resctrl_schema_all`` in list order."""
    added: list[Schema] = []
    if mount.cdp:
        half = profile.l3_num_closids // 2
        added += [Schema('L3CODE', 'L3', half), Schema('L3DATA', 'L3', half)]
    else:
        added.append(Schema('L3', 'L3', profile.l3_num_closids))
    if profile.mba:
        added.append(Schema('MB', 'MB', profile.mb_num_closids))
    if profile.smba:
        added.append(Schema('SMBA', 'SMBA', profile.mb_num_closids))
    return list(reversed(added))


def name_width(profile: Profile, schemas: list[Schema]) -> int:
    """``max_name_width``: CDP-capable names count 4 more when CDP is off."""
    width = 0
    for schema in schemas:
        cl = len(schema.name)
        if schema.name == 'L3' and profile.cdp_capable:
            cl += 4
        width = max(width, cl)
    return width
