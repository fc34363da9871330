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
