import pytest

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.exceptions import InvalidMask


def test_format():
    mask = CBM(0x7f0, 11)
    assert str(mask) == '7f0'
    assert mask.count == 7
    assert (mask.low, mask.high) == (4, 10)


def test_contiguity_and_runs():
    assert CBM(0x7f0, 11).is_contiguous()
    assert not CBM(0x5, 11).is_contiguous()
    assert CBM(0, 11).is_contiguous()
    assert CBM(0b1101100111, 11).runs() == [(0, 3), (5, 2), (8, 2)]
    assert CBM(0b1101100111, 11).largest_run() == CBM(0b111, 11)


def test_algebra_and_map():
    a, b = CBM(0x7f0, 11), CBM(0xc, 11)
    assert (a | b).value == 0x7fc
    assert not a.overlaps(b)
    assert (~a).value == 0xf
    assert (a - CBM(0x10, 11)).value == 0x7e0
    assert CBM(0x7f0, 11).way_map() == '#######....'
    assert CBM.span(2, 2, 11) == CBM(0xc, 11)
    with pytest.raises(InvalidMask):
        CBM.span(10, 2, 11)
