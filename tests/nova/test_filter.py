"""RDTCacheFilter inside Nova: loaded by class path, run the way Nova's
scheduler runs it, on Nova's own objects; every host or none, one line why;
nothing kept between requests; the Nova version guard.
"""
from __future__ import annotations

import itertools
import logging
import types
from unittest import mock

import pytest

from nova import objects
from nova.scheduler import filters
from nova.tests.unit.scheduler import fakes

from nova_plugin import filters as rdt_filters

HANDLER = filters.HostFilterHandler()
PATH = 'nova_plugin.filters.RDTCacheFilter'
WAYS = 'resources:CUSTOM_RDT_L3_WAY'
CLOSID = 'resources:CUSTOM_RDT_CLOSID'
COUNTED = {WAYS: '6', CLOSID: '1'}
_ids = itertools.count(1)


def uuid() -> str:
    return '00000000-0000-4000-8000-%012d' % next(_ids)


def load(*paths: str) -> list:
    return [cls() for cls in HANDLER.get_matching_classes(list(paths))]


def flavor(**extra: str) -> objects.Flavor:
    return objects.Flavor(name='f%d' % next(_ids), flavorid='x', memory_mb=64,
                          vcpus=1, root_gb=0, ephemeral_gb=0, swap=0,
                          extra_specs=dict(extra))


def request(extra: dict[str, str] | None = None,
            hints: dict | None = None) -> objects.RequestSpec:
    return objects.RequestSpec(
        flavor=flavor(**(extra or {})), num_instances=1,
        instance_uuid=uuid(), numa_topology=None, pci_requests=None,
        requested_resources=[], scheduler_hints=hints or {},
        image=objects.ImageMeta(properties=objects.ImageMetaProps()))


def hosts(count: int = 3) -> list:
    return [fakes.FakeHostState('h%d' % i, 'n%d' % i, {})
            for i in range(count)]


def passes(spec: objects.RequestSpec, flt: list | None = None) -> list:
    """Host names that pass, the way Nova's scheduler runs the filter."""
    return [h.host for h in HANDLER.get_filtered_objects(
        flt or load(PATH), hosts(), spec, 0)]


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger='nova_plugin')
    return caplog


def test_loaded_by_its_class_path() -> None:
    [flt] = load(PATH)
    assert type(flt).__name__ == 'RDTCacheFilter'
    assert isinstance(flt, filters.BaseHostFilter)


@pytest.mark.parametrize('extra', [
    {}, {'hw:cpu_policy': 'dedicated'}, {'resources:VCPU': '2'},
    COUNTED, {**COUNTED, 'rdt:mb_percent': '50',
              'trait:CUSTOM_RDT_MB_PERCENT': 'required'},
    {'rdt:pool': 'hp', 'trait:CUSTOM_RDT_POOL_HP': 'required'},
    # 0.3's Placement flavors: the count is resources'; rdt:l3_ways unused
    {**COUNTED, 'rdt:l3_ways': '3'},
])
def test_every_host_passes_what_placement_counts(
        extra: dict, warnings: pytest.LogCaptureFixture) -> None:
    assert passes(request(extra)) == ['h0', 'h1', 'h2']
    assert warnings.messages == []


@pytest.mark.parametrize('extra, why', [
    ({'rdt:l3_ways': '3'}, 'rdt:l3_ways=3 is not counted by Placement: ask '
     'resources:CUSTOM_RDT_L3_WAY=<ways in all> and '
     'resources:CUSTOM_RDT_CLOSID=1 instead (python3 -m nova_plugin.upgrade '
     'lists what to set)'),
    ({WAYS: '6'}, 'resources:CUSTOM_RDT_L3_WAY=6 needs '
     'resources:CUSTOM_RDT_CLOSID=1 too'),
    ({'rdt:pool': 'hp'}, 'rdt:pool needs trait:CUSTOM_RDT_POOL_HP=required '
     'too'),
    ({**COUNTED, 'rdt:pool': 'hp'},
     'resources:CUSTOM_RDT_L3_WAY and rdt:pool exclude each other'),
    ({'rdt:l3_way': '3'}, 'rdt:l3_way: unknown ovs-rdt key'),
])
def test_no_host_passes_what_placement_would_not_count(
        extra: dict, why: str, warnings: pytest.LogCaptureFixture) -> None:
    spec = request(extra)
    assert passes(spec) == []
    [line] = warnings.messages
    assert line.startswith('RDTCacheFilter fails every host for instance %s: '
                           'flavor %s: %s' % (spec.instance_uuid,
                                              spec.flavor.name, why)), line


def test_host_passes_says_the_same() -> None:
    [flt] = load(PATH)
    assert flt.host_passes(hosts(1)[0], request(COUNTED))
    assert not flt.host_passes(hosts(1)[0], request({'rdt:l3_ways': '3'}))


def test_a_rebuild_is_not_filtered() -> None:
    """RUN_ON_REBUILD = False, as Nova's own filters that count."""
    spec = request({'rdt:l3_ways': '3'},
                   hints={'_nova_check_type': ['rebuild']})
    assert passes(spec) == ['h0', 'h1', 'h2']


def test_nothing_is_kept_between_requests() -> None:
    """No instance state beyond what Nova's base filter has, no mutable
    module state: what a request decides is its own.
    """
    [flt] = load(PATH)
    before = dict(vars(flt))
    for extra in ({'rdt:l3_ways': '3'}, COUNTED, {}):
        passes(request(extra), [flt])
    assert vars(flt) == before
    for name, value in vars(rdt_filters).items():
        if name.startswith('__') or name == 'annotations':
            continue
        assert isinstance(value, (types.ModuleType, type, types.FunctionType,
                                  str, tuple, logging.LoggerAdapter)) or \
            getattr(value, '__module__', '') == 'typing', name


@pytest.mark.parametrize('found, supported', [
    ('34.0.0', True), ('34.1.2', True), ('34.0.1.dev12', True),
    ('33.2.0', False), ('35.0.0', False), ('35.0.0.0rc1', False),
    ('2026.1', False)])
def test_supported_nova_versions(found: str, supported: bool) -> None:
    assert (rdt_filters.unsupported(found) is None) is supported


def test_an_unsupported_nova_fails_closed_for_cache_only(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger='nova_plugin')
    with mock.patch('nova.version.version_string', return_value='35.0.0'):
        flt = load(PATH)
        # at load: one line naming the version and the range
        [line] = caplog.messages
        assert line == (
            "Nova 35.0.0 is not supported by ovs-rdt's RDTCacheFilter "
            '(tested with Nova 34.0.0 up to, not including, 35.0.0): '
            'requests for cache fail every host')
        assert [r.levelname for r in caplog.records] == ['ERROR']
        assert passes(request(COUNTED), flt) == []
        assert passes(request({'rdt:pool': 'hp'}), flt) == []
        assert passes(request({'hw:cpu_policy': 'dedicated'}), flt) == \
            ['h0', 'h1', 'h2']
        assert passes(request(), flt) == ['h0', 'h1', 'h2']
    caplog.clear()
    load(PATH)                  # Nova 34: nothing said
    assert caplog.messages == []


def test_the_filter_reads_no_database() -> None:
    """No Nova import but the filter API, the rebuild hint and the version
    (``grep -rn nova.db nova_plugin/`` is empty too: tests/unit/test_layers).
    """
    imported = {name for name, value in vars(rdt_filters).items()
                if isinstance(value, types.ModuleType)}
    assert imported == {'filters', 'scheduler_utils', 'version', 'logging',
                        'placement'}, imported
    assert not hasattr(rdt_filters, 'CONF')
