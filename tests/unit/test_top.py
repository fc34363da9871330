"""ovs-rdt top: rates, resets and names (no resctrl needed)."""
from ovs_rdt.cmd import top


def test_rates_and_resets():
    before = {'': (1, {0: {'mbm_total_bytes': 1000, 'llc_occupancy': 0}}),
              'g': (5, {0: {'mbm_total_bytes': 5_000_000}}),
              'h': (7, {0: {'mbm_total_bytes': 10}})}
    after = {'': (1, {0: {'mbm_total_bytes': 2_001_000,
                          'llc_occupancy': 2048}}),
             'g': (6, {0: {'mbm_total_bytes': 9_000_000}}),   # re-created
             'h': (7, {0: {'mbm_total_bytes': 5}})}            # went back
    rows = {r[0]: r for r in top.rows(before, after, 2.0)}
    assert rows['default'] == ('default', 0, 2.0, None, 1.0)
    assert rows['g'][4] is None and rows['h'][4] is None
    text = top.render(list(rows.values()), 2.0, {'g': 'vm=sut pmd=0,1'})
    line = next(ln for ln in text.splitlines() if ln.startswith('g '))
    assert line.endswith('vm=sut pmd=0,1') and ' - ' in line
