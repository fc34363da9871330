"""ovs_rdt.core.mbm: counter resets from wraps and re-created groups."""
from ovs_rdt.core.mbm import Epochs

T = 'mbm_total_bytes'


def test_series_there_at_start_have_no_created():
    ep = Epochs()
    assert ep.observe(100.0, {'': 1, 'g': 5}, {('', 0, T): 10,
                                               ('g', 0, T): 7}) == {
        ('', 0, T): None, ('g', 0, T): None}
    # Growing counters keep it: an agent restart is no reset.
    assert ep.observe(101.0, {'': 1, 'g': 5}, {('', 0, T): 20,
                                               ('g', 0, T): 9}) == {
        ('', 0, T): None, ('g', 0, T): None}


def test_new_group_starts_after_the_last_scrape():
    ep = Epochs()
    ep.observe(100.0, {'': 1}, {('', 0, T): 10})
    got = ep.observe(101.0, {'': 1, 'h': 9}, {('', 0, T): 11, ('h', 0, T): 3})
    assert got == {('', 0, T): None, ('h', 0, T): 100.0}
    assert ep.observe(102.0, {'': 1, 'h': 9},
                      {('', 0, T): 12, ('h', 0, T): 4})[('h', 0, T)] == 100.0


def test_recreated_group_is_a_reset_even_when_its_value_grew():
    ep = Epochs()
    ep.observe(100.0, {'g': 5}, {('g', 0, T): 1000, ('g', 1, T): 10})
    # Same name, new directory: the new counter already passed the old one.
    got = ep.observe(101.0, {'g': 6}, {('g', 0, T): 5000, ('g', 1, T): 20})
    assert got == {('g', 0, T): 100.0, ('g', 1, T): 100.0}
    assert ep.observe(102.0, {'g': 6}, {('g', 0, T): 6000,
                                        ('g', 1, T): 30})[('g', 0, T)] == 100.0


def test_a_counter_that_goes_back_resets_only_its_series():
    ep = Epochs()
    ep.observe(100.0, {'g': 5}, {('g', 0, T): 1 << 40, ('g', 1, T): 10})
    got = ep.observe(101.0, {'g': 5}, {('g', 0, T): 3, ('g', 1, T): 20})
    assert got == {('g', 0, T): 100.0, ('g', 1, T): None}


def test_a_group_gone_and_back_is_new():
    ep = Epochs()
    ep.observe(100.0, {'g': 5}, {('g', 0, T): 10})
    assert ep.observe(101.0, {}, {}) == {}
    assert ep.observe(102.0, {'g': 5}, {('g', 0, T): 50}) == {
        ('g', 0, T): 101.0}


def test_one_reset_rule_for_rates() -> None:
    """core.mbm's rule serves rates too: a re-created group whose counter
    already passed the old value is a reset (a drop alone would miss it).
    """
    from ovs_rdt.core import mbm
    assert mbm.increase((5, 100), (5, 300)) == 200
    assert mbm.increase((5, 100), (6, 300)) is None     # re-created
    assert mbm.increase((5, 100), (5, 50)) is None      # went back
    assert mbm.increase(None, (5, 50)) is None
    rates = mbm.Rates()
    key = ('ovsrdt-pool-hp', 0, 'mbm_total_bytes')
    assert rates.observe(10.0, {key[0]: 1}, {key: 1000}) == {key: None}
    assert rates.observe(12.0, {key[0]: 1}, {key: 5000}) == {key: 2000.0}
    assert rates.observe(13.0, {key[0]: 2}, {key: 9000}) == {key: None}
    assert rates.observe(14.0, {key[0]: 2}, {key: 9500}) == {key: 500.0}
