"""Platform detection in the resctrl layer (issue 14), on plain-file trees.

Each tree is what the kernel shows on that platform (fs/resctrl,
arch/x86/kernel/cpu/resctrl; doc/platforms.md): CDP, mba_MBps, AMD MB
units, SMBA, io_alloc, assignable MBM counters.
"""
from __future__ import annotations

import os
import re
import shutil

import pytest

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import UNIT_AMD, UNIT_MBPS, UNIT_PERCENT, MBA_MAX_MBPS
from ovs_rdt.conf import Settings
from ovs_rdt.exceptions import ConfigError, InvalidValue
from ovs_rdt.exceptions import ResctrlUnavailable
from ovs_rdt.resctrl import Resctrl
from ovs_rdt.resctrl.text import mount_entry, parse_schemata
from tests.unit.fakes import make_tree


def put(root: str, path: str, text: str) -> None:
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, 'w') as fh:
        fh.write(text)


def cdp_tree(root: str, cbm_len: int = 11, domains=(0, 1),
             mba: bool = True) -> None:
    """``mount -o cdp``: info/L3CODE and info/L3DATA with half the CLOSIDs,
    ``L3DATA:``/``L3CODE:`` lines (kernel list order: MB, L3DATA, L3CODE),
    names padded to the longest.
    """
    make_tree(root, cbm_len=cbm_len, domains=domains, mba=mba)
    full = '%x' % ((1 << cbm_len) - 1)
    for kind in ('L3CODE', 'L3DATA'):
        shutil.copytree(os.path.join(root, 'info', 'L3'),
                        os.path.join(root, 'info', kind))
        put(root, 'info/%s/num_closids' % kind, '8\n')
    shutil.rmtree(os.path.join(root, 'info', 'L3'))
    doms = ';'.join('%d=%s' % (d, full) for d in domains)
    lines = ['    MB:' + ';'.join('%d=100' % d for d in domains)] if mba else []
    lines += ['L3DATA:' + doms, 'L3CODE:' + doms]
    put(root, 'schemata', '\n'.join(lines) + '\n')


def amd_tree(root: str, domains=tuple(range(4)), smba: bool = True) -> None:
    """EPYC: MB in 1/8 GB/s (min 0, gran 1, delay_linear 0, 2048 = no
    limit, no thread_throttle_mode), SMBA, one L3 per CCD.
    """
    make_tree(root, cbm_len=16, domains=domains, mba=True)
    put(root, 'info/MB/min_bandwidth', '0\n')
    put(root, 'info/MB/bandwidth_gran', '1\n')
    put(root, 'info/MB/delay_linear', '0\n')
    full = ';'.join('%d=ffff' % d for d in domains)
    mb = ';'.join('%d=2048' % d for d in domains)
    text = 'SMBA:%s\n  MB:%s\n  L3:%s\n' % (mb, mb, full) if smba else \
        '  MB:%s\n  L3:%s\n' % (mb, full)
    put(root, 'schemata', text)
    if smba:
        for name, val in (('min_bandwidth', '0'), ('bandwidth_gran', '1'),
                          ('delay_linear', '0'), ('num_closids', '16')):
            put(root, 'info/SMBA/' + name, val + '\n')


def rc_at(tmp_path, mounts: str = '') -> Resctrl:
    path = str(tmp_path / 'mounts')
    with open(path, 'w') as fh:
        fh.write(mounts)
    return Resctrl(str(tmp_path / 'rc'), mounts=path)


# -- CDP ---------------------------------------------------------------------
def test_cdp_mount_is_l3_cat_with_code_and_data(tmp_path):
    cdp_tree(str(tmp_path / 'rc'))
    plat = rc_at(tmp_path).platform()      # was: "no L3 cache allocation"
    assert plat.cdp
    assert plat.cbm_len == 11
    assert plat.num_closids == 8           # the kernel halved it already
    assert plat.domains == (0, 1)


def test_cdp_group_uses_code_or_data_ways(tmp_path):
    root = str(tmp_path / 'rc')
    cdp_tree(root)
    os.mkdir(os.path.join(root, 'COS1'))
    put(root, 'COS1/schemata', 'L3DATA:0=3;1=7ff\nL3CODE:0=c;1=7ff\n')
    grp = rc_at(tmp_path).group('COS1', with_tasks=False)
    assert grp.l3[0] == CBM(0xf, 11)       # a way either uses is in use
    assert grp.l3code[0] == CBM(0xc, 11)
    assert grp.l3data[0] == CBM(0x3, 11)
    assert grp.cdp_split


def test_cdp_cache_size_from_the_code_and_data_lines(tmp_path):
    # Under CDP the kernel's size file has L3CODE/L3DATA lines, no L3 line
    # (rdtgroup_size_show() prints each schema's name): the way size must
    # still be known (status KiB, profile's ways, the policy's demand).
    root = str(tmp_path / 'rc')
    cdp_tree(root)
    put(root, 'schemata', 'L3DATA:0=7ff;1=7ff\nL3CODE:0=7f;1=7ff\n')
    put(root, 'size', '    MB:0=100;1=100\n'
        'L3DATA:0=28835840;1=28835840\nL3CODE:0=18350080;1=28835840\n')
    plat = rc_at(tmp_path).platform()
    assert plat.cache_bytes == {0: 28835840, 1: 28835840}
    assert plat.way_bytes(0) == 28835840 // 11


def test_no_l3_at_all_still_refused(tmp_path):
    root = str(tmp_path / 'rc')
    make_tree(root)
    shutil.rmtree(os.path.join(root, 'info', 'L3'))
    with pytest.raises(ResctrlUnavailable, match='neither info/L3 nor'):
        rc_at(tmp_path).platform()


def test_padded_names_and_smba_lines_parse():
    l3, mb = parse_schemata('SMBA:0=1024;1=2048\n    MB:0=50;1=2048\n'
                            '    L3:0=ff;1=ffff\n', 16)
    assert mb == {0: 50, 1: 2048}          # SMBA is not MB
    assert l3 == {0: CBM(0xff, 16), 1: CBM(0xffff, 16)}


# -- MB units ----------------------------------------------------------------
def test_intel_percent_by_default(tmp_path):
    make_tree(str(tmp_path / 'rc'))
    mb = rc_at(tmp_path).platform().mb
    assert mb.unit == UNIT_PERCENT and mb.field == 'mb_percent'
    assert mb.max_value == 100
    assert mb.value(percent=45) == 50      # bandwidth_gran 10, rounded up
    assert mb.value() == 100


def test_mba_mbps_from_the_mba_mbps_event_file(tmp_path):
    root = str(tmp_path / 'rc')
    make_tree(root)
    put(root, 'schemata', 'MB:0=4294967295;1=4294967295\nL3:0=7ff;1=7ff\n')
    put(root, 'mba_MBps_event', 'mbm_local_bytes\n')
    mb = rc_at(tmp_path).platform().mb
    assert mb.unit == UNIT_MBPS and mb.field == 'mb_mbps'
    assert mb.max_value == MBA_MAX_MBPS == 4294967295
    assert mb.value() == MBA_MAX_MBPS      # no cap: not MB:100 (100 MiB/s)
    assert mb.value(mbps=2500) == 2500


@pytest.mark.parametrize('line, unit', [
    ('resctrl {root} resctrl rw,relatime,cdp,mba_MBps 0 0\n', UNIT_MBPS),
    ('resctrl {root} resctrl rw,relatime 0 0\n', UNIT_PERCENT),
    ('resctrl /elsewhere resctrl rw,mba_MBps 0 0\n', UNIT_PERCENT),
    ('tmpfs {root} tmpfs rw,mba_MBps 0 0\n', UNIT_PERCENT),
])
def test_mba_mbps_from_the_mount_options(tmp_path, line, unit):
    root = str(tmp_path / 'rc')
    make_tree(root)
    rc = rc_at(tmp_path, 'proc /proc proc rw 0 0\n' +
               line.format(root=os.path.realpath(root)))
    assert rc.platform().mb.unit == unit


def test_mount_entry_unescapes_spaces():
    text = ('resctrl /run/my\\040rc resctrl rw,mba_MBps 0 0\n'
            'resctrl /run/x fuse.resctrl rw,nosuid 0 0\n')
    assert mount_entry(text, '/run/my rc') == ('resctrl', ['rw', 'mba_MBps'])
    assert mount_entry(text, '/run/x/') == ('fuse.resctrl', ['rw', 'nosuid'])
    assert mount_entry(text, '/run/my') is None


def test_amd_mb_unit_and_smba(tmp_path):
    amd_tree(str(tmp_path / 'rc'))
    plat = rc_at(tmp_path).platform()
    mb = plat.mb
    assert mb.unit == UNIT_AMD and mb.field == 'mb_mbps'
    assert mb.max_value == 2048            # was taken for a percentage
    assert mb.value() == 2048
    # 1000 MiB/s = 1048576000 B/s = 8.39 units of 125 MB/s: 9 (rounded up)
    assert mb.value(mbps=1000) == 9
    assert mb.value(mbps=1) == 1           # never 0 (no bandwidth at all)
    assert mb.value(mbps=10 ** 6) == 2048
    assert mb.mbps_of(9) == 1072
    assert mb.value(mbps=mb.mbps_of(9)) == 9
    assert plat.smba
    assert plat.domains == (0, 1, 2, 3)


def test_amd_maximum_follows_the_default_group(tmp_path):
    root = str(tmp_path / 'rc')
    amd_tree(root, domains=(0, 1), smba=False)
    put(root, 'schemata', 'MB:0=4096;1=4096\nL3:0=ffff;1=ffff\n')
    plat = rc_at(tmp_path).platform()
    assert plat.mb.max_value == 4096       # 1 << CPUID's width
    assert not plat.smba


def test_amd_a_capped_default_group_does_not_lower_the_maximum(tmp_path):
    # Someone capped the root (MB:0=64): "no cap" stays the kernel's 2048,
    # so a VM's 20000 MiB/s (168 units) is still written as a cap, and our
    # uncapped groups are not rewritten to 64.
    root = str(tmp_path / 'rc')
    amd_tree(root, domains=(0, 1), smba=False)
    put(root, 'schemata', 'MB:0=64;1=64\nL3:0=ffff;1=ffff\n')
    plat = rc_at(tmp_path).platform()
    assert plat.mb.max_value == 2048
    assert plat.mb_uncapped == 2048
    assert plat.mb.value(mbps=20000) == 168    # 20000 MiB/s in 125 MB/s units, up


def test_non_linear_intel_mba_is_not_amd(tmp_path):
    # delay_linear 0 with an Intel minimum (the kernel refuses every MB
    # value there): percentages kept, an uncapped group's 100 is no cap,
    # and a cap is refused naming delay_linear instead of taking MiB/s.
    from ovs_rdt.core.allocator import plan
    from ovs_rdt.core.model import Request
    from ovs_rdt.exceptions import AllocationError
    root = str(tmp_path / 'rc')
    make_tree(root, cbm_len=11, domains=(0, 1), mba=True)
    put(root, 'info/MB/delay_linear', '0\n')
    rc = rc_at(tmp_path)
    plat = rc.platform()
    assert plat.mb.unit == UNIT_PERCENT and plat.mb_uncapped == 100
    assert 'delay_linear is 0' in plat.mb.kind
    groups = rc.groups()
    assert plat.mb.field == ''
    with pytest.raises(AllocationError, match="vm mb_percent: '50' cannot be "
                       'met on this host: MB values cannot be set.*'
                       'delay_linear is 0'):
        plan(plat, groups, [Request('vm', ways={0: 1}, mb_percent=50)])
    assert plan(plat, groups, [Request('vm', ways={0: 1})]).mb['vm'] == \
        {0: 100, 1: 100}


def test_non_linear_intel_mba_refuses_a_cap_at_every_surface(tmp_path):
    """The input rule refused nothing there before (the allocator then
    refused naming the group): now every surface refuses with one message
    naming its own field, a pool's cap included.
    """
    from ovs_rdt import desired
    from ovs_rdt.inputs import request as inputs
    root = str(tmp_path / 'rc')
    make_tree(root, cbm_len=11, domains=(0, 1), mba=True)
    put(root, 'info/MB/delay_linear', '0\n')
    plat = rc_at(tmp_path).platform()
    why = "'50' cannot be met on this host: MB values cannot be set"
    settings = Settings.defaults(pools={'p': {'l3_ways': 1,
                                              'mb_percent': 50}})
    with pytest.raises(ConfigError, match=re.escape('[pool:p] mb_percent: ')
                       + why):
        desired.pool_requests(settings, plat)
    from ovs_rdt.core.model import mb_terms
    for label, raw in (('rdt:mb_percent', {'mb_percent': '50',
                                           'l3_ways': '1'}),
                       ('<rdt:mb percent>', {'mb_percent': '50',
                                             'l3_ways': '1'})):
        req = inputs.parse(raw, {'mb_percent': label, 'l3_ways': 'ways'})
        with pytest.raises(InvalidValue, match=re.escape(label) + ': ' + why):
            inputs.check_host(req, None, 11, *mb_terms(plat.mb))


def test_without_mba_a_pool_cap_is_refused_like_a_vm_cap(tmp_path):
    """A pool's cap was ignored without MBA while a VM's was refused."""
    from ovs_rdt import desired
    from ovs_rdt.inputs import request as inputs
    make_tree(str(tmp_path / 'rc'), cbm_len=11, domains=(0, 1), mba=False)
    plat = rc_at(tmp_path).platform()
    assert plat.mb is None
    why = "'50' cannot be met: this host has no memory bandwidth allocation"
    settings = Settings.defaults(pools={'p': {'l3_ways': 1,
                                              'mb_percent': 50}})
    with pytest.raises(ConfigError, match=re.escape('[pool:p] mb_percent: ')
                       + why):
        desired.pool_requests(settings, plat)
    from ovs_rdt.core.model import mb_terms
    req = inputs.parse({'mb_percent': '50', 'l3_ways': '1'},
                       {'mb_percent': 'rdt:mb_percent', 'l3_ways': 'w'})
    with pytest.raises(InvalidValue, match='rdt:mb_percent: ' + why):
        inputs.check_host(req, None, 11, *mb_terms(plat.mb))


# -- io_alloc ----------------------------------------------------------------
def test_io_alloc_enabled_ways_and_closid(tmp_path):
    root = str(tmp_path / 'rc')
    make_tree(root, cbm_len=16, closids=16)
    put(root, 'info/MB/num_closids', '16\n')
    put(root, 'info/L3/io_alloc', 'enabled\n')
    put(root, 'info/L3/io_alloc_cbm', '0=3;1=f\n')
    plat = rc_at(tmp_path).platform()
    assert plat.io_alloc == 'enabled'
    assert plat.io_alloc_cbm == {0: CBM(0x3, 16), 1: CBM(0xf, 16)}
    assert plat.num_closids == 15          # the io_alloc CLOSID is no group's
    assert plat.hw_shared(0) == 0x3 and plat.hw_shared(1) == 0xf
    assert 'io_alloc_cbm 3' in plat.hw_shared_source(0)


def test_io_alloc_disabled_holds_nothing(tmp_path):
    root = str(tmp_path / 'rc')
    make_tree(root, cbm_len=16)
    put(root, 'info/L3/io_alloc', 'disabled\n')
    plat = rc_at(tmp_path).platform()
    assert plat.io_alloc == 'disabled'
    assert plat.io_alloc_cbm == {} and plat.hw_shared(0) == 0
    assert plat.num_closids == 8           # MB's 8 (make_tree)


def test_io_alloc_under_cdp_reads_both_types(tmp_path):
    root = str(tmp_path / 'rc')
    cdp_tree(root, cbm_len=16)
    for kind in ('L3CODE', 'L3DATA'):
        put(root, 'info/%s/io_alloc' % kind, 'enabled\n')
        put(root, 'info/%s/io_alloc_cbm' % kind, '0=c000;1=c000\n')
    plat = rc_at(tmp_path).platform()
    assert plat.io_alloc_cbm[0] == CBM(0xc000, 16)
    assert plat.num_closids == 7


# -- assignable counters -------------------------------------------------------
@pytest.mark.parametrize('text, mode', [('[mbm_event]\ndefault\n', 'mbm_event'),
                                        ('[default]\n', 'default')])
def test_mbm_assign_mode(tmp_path, text, mode):
    root = str(tmp_path / 'rc')
    make_tree(root)
    put(root, 'info/L3_MON/mbm_assign_mode', text)
    assert rc_at(tmp_path).platform().mbm_assign_mode == mode


def test_no_mbm_assign_mode_on_older_kernels(tmp_path):
    make_tree(str(tmp_path / 'rc'))
    assert rc_at(tmp_path).platform().mbm_assign_mode is None


def test_unassigned_and_sub_numa_entries_are_not_values(tmp_path):
    root = str(tmp_path / 'rc')
    make_tree(root)
    put(root, 'mon_data/mon_L3_00/llc_occupancy', '65536\n')
    put(root, 'mon_data/mon_L3_00/mbm_total_bytes', 'Unassigned\n')
    put(root, 'mon_data/mon_L3_00/mbm_local_bytes', 'Unavailable\n')
    put(root, 'mon_data/mon_L3_00/mon_sub_L3_00/llc_occupancy', '21\n')
    put(root, 'mon_data/mon_L3_01/mbm_total_bytes', 'Error\n')
    assert rc_at(tmp_path).read_mon('') == {0: {'llc_occupancy': 65536},
                                            1: {}}
