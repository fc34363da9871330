"""Every entry point the distribution declares loads by name."""
import importlib.metadata as md
import importlib.util

import pytest

DIST = md.distribution('ovs-rdt')
POINTS = [ep for ep in DIST.entry_points]


def test_expected_entry_points_declared():
    names = {(ep.group, ep.name) for ep in POINTS}
    assert {('console_scripts', 'ovs-rdt'),
            ('console_scripts', 'ovs-rdt-agent'),
            ('console_scripts', 'ovs-rdt-hook'),
            ('oslo.config.opts', 'ovs_rdt'),
            ('nova.api.extra_spec_validators', 'rdt')} <= names


@pytest.mark.parametrize('ep', POINTS, ids=lambda ep: '%s:%s' % (ep.group,
                                                                 ep.name))
def test_entry_point_loads(ep):
    if ep.group.startswith('nova.') and importlib.util.find_spec('nova') is None:
        pytest.skip('nova is not installed here; tests/nova loads it')
    obj = ep.load()
    assert callable(obj) or hasattr(obj, '__name__')
