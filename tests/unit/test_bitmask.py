import pytest

from ovs_rdt.bitmask import CBM
from ovs_rdt.exceptions import InvalidMask


def test_parse_and_format():
    mask = CBM.parse('0x7F0', 11)
    assert mask.value == 0x7f0
    assert str(mask) == '7f0'
    assert mask.count == 7
    assert (mask.low, mask.high) == (4, 10)


@pytest.mark.parametrize('text', ['', 'zz', '0x', '7g'])
def test_parse_rejects_non_hex(text):
    with pytest.raises(InvalidMask, match='not a hexadecimal'):
        CBM.parse(text, 11, 'l3_cbm')


def test_parse_rejects_bits_beyond_width_naming_field():
    with pytest.raises(InvalidMask, match=r"\[pool:hp\] l3_cbm '800'"):
        CBM.parse('800', 11, '[pool:hp] l3_cbm')


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
