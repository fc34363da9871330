"""Parsing the rdt: flavor extra specs (shared by filter and validators)."""
from __future__ import annotations

import re

import pytest

from nova_plugin import specs
from nova_plugin.specs import RDTSpec
from ovs_rdt.exceptions import AnnotationError


def test_no_rdt_keys() -> None:
    assert specs.parse(None) is None
    assert specs.parse({}) is None
    assert specs.parse({'hw:cpu_policy': 'dedicated'}) is None


@pytest.mark.parametrize('extra, expected', [
    ({'rdt:l3_ways': '3'}, RDTSpec(3)),
    ({'rdt:l3_ways': ' 64 ', 'rdt:mb_percent': '50'}, RDTSpec(64, None, 50)),
    ({'rdt:pool': 'noisy', 'hw:mem_page_size': 'large'},
     RDTSpec(None, 'noisy')),
    ({'rdt:pool': 'hp.v2_a-1'}, RDTSpec(None, 'hp.v2_a-1')),
])
def test_valid(extra: dict, expected: RDTSpec) -> None:
    assert specs.parse(extra) == expected


@pytest.mark.parametrize('extra, message', [
    ({'rdt:l3_ways': 'abc'}, "rdt:l3_ways='abc': not a whole number"),
    ({'rdt:l3_ways': '0'}, 'must be from 1 to 64'),
    ({'rdt:l3_ways': '65'}, 'must be from 1 to 64'),
    ({'rdt:l3_ways': '-1'}, 'not a whole number'),
    ({'rdt:l3_ways': '٣'}, 'not a whole number'),
    ({'rdt:mb_percent': '101', 'rdt:l3_ways': '1'}, 'from 1 to 100'),
    ({'rdt:pool': '../etc'}, 'not a pool name'),
    ({'rdt:pool': ''}, 'not a pool name'),
    ({'rdt:l3_way': '3'}, 'rdt:l3_way: unknown ovs-rdt key'),
    ({'rdt:l3_ways': '3', 'rdt:pool': 'p'}, 'exclude each other'),
    ({'rdt:mb_percent': '50'}, 'needs rdt:l3_ways too'),
    ({'rdt:pool': 'p', 'rdt:mb_percent': '50'}, 'needs rdt:l3_ways too'),
])
def test_invalid(extra: dict, message: str) -> None:
    with pytest.raises(AnnotationError, match=re.escape(message)):
        specs.parse(extra)


def test_lenient_ignores_unknown_keys_only() -> None:
    assert specs.parse({'rdt:l3_way': '3'}, strict=False) == RDTSpec()
    assert specs.parse({'rdt:l3_ways': '2', 'rdt:x': 'y'}, strict=False) \
        == RDTSpec(2)
    with pytest.raises(AnnotationError):
        specs.parse({'rdt:l3_ways': 'x', 'rdt:x': 'y'}, strict=False)


def test_pure_modules_import_no_nova_or_oslo() -> None:
    import subprocess
    import sys

    code = ('import sys, nova_plugin.specs, ovs_rdt.capacity; '
            'print(sorted(m for m in sys.modules '
            'if m.split(".")[0] in ("nova", "oslo_config", "oslo_log")))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == '[]'
