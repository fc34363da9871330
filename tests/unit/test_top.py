"""ovs-rdt top: rates, resets and names (no resctrl needed)."""
import time

from ovs_rdt.cmd import top
from ovs_rdt.core.bitmask import CBM

MIB = 2 ** 20
WAY = 2560 * 1024


def test_rates_and_resets():
    before = {'': (1, {0: {'mbm_total_bytes': 1000, 'llc_occupancy': 0}},
                   {}),
              'g': (5, {0: {'mbm_total_bytes': 5_000_000}}, {}),
              'h': (7, {0: {'mbm_total_bytes': 10}}, {})}
    after = {'': (1, {0: {'mbm_total_bytes': 1000 + 2 * MIB,
                          'llc_occupancy': 2048}}, {}),
             'g': (6, {0: {'mbm_total_bytes': 9_000_000}}, {}),  # re-created
             'h': (7, {0: {'mbm_total_bytes': 5}}, {})}           # went back
    rows = {r[0]: r for r in top.rows(before, after, 2.0)}
    # MiB/s: 2 MiB over 2 s (before: MB/s, 1.048576)
    assert rows['default'] == ('default', 0, 2.0, None, None, 1.0)
    assert rows['g'][5] is None and rows['h'][5] is None
    text = top.render(list(rows.values()), 2.0, {'g': 'vm=sut pmd=0,1'})
    line = next(ln for ln in text.splitlines() if ln.startswith('g '))
    assert line.endswith('vm=sut pmd=0,1') and ' - ' in line
    assert 'MBT[MiB/s]' in text and 'MB/s]' not in text.replace('MiB/s]', '')


def test_occupied_of_allocated_and_a_timestamp_per_refresh():
    """The occupancy against the bytes of the group's ways on that domain
    (3 ways of 2560 KiB: 7680 KiB), and when the sample was taken.
    """
    masks = {0: CBM(0x70, 11), 1: CBM(0x7ff, 11)}
    sample = {'ovsrdt-pool-hp': (3, {0: {'llc_occupancy': 3840 * 1024},
                                     1: {'llc_occupancy': 0}}, masks)}
    rows = top.rows(sample, sample, 1.0, lambda dom: WAY)
    assert rows[0][:4] == ('ovsrdt-pool-hp', 0, 3840.0, 7680.0)
    assert rows[1][3] == 11 * 2560.0
    stamp = time.mktime((2024, 5, 6, 7, 8, 9, 0, 0, -1))
    text = top.render(rows, 1.0, stamp=stamp)
    lines = text.splitlines()
    assert lines[0] == '2024-05-06 07:08:09'
    head = lines[1].split()
    hp = dict(zip(head, lines[2].split()))
    assert (hp['LLC[KiB]'], hp['OF[KiB]'], hp['OCC%']) == ('3840.0', '7680',
                                                           '50')
    assert dict(zip(head, lines[3].split()))['OCC%'] == '0'
