"""Fixtures that start real parts: each area keeps its own module."""
pytest_plugins = [
    'tests.functional.fixtures.emulator',
    'tests.functional.fixtures.ovs',
    'tests.functional.fixtures.libvirt',
]
