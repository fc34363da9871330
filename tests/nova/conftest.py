"""Tests that run ovs-rdt's Nova plugin inside the real nova package.

Run in their own tox env (``tox -e nova``) where nova==34.0.0 is installed.
"""
from __future__ import annotations

import logging
import warnings
from typing import Callable, Iterator

import pytest

warnings.filterwarnings('ignore', category=DeprecationWarning)
warnings.filterwarnings('ignore', category=FutureWarning)

from nova import objects  # noqa: E402

objects.register_all()


@pytest.fixture
def rdt_conf() -> Iterator[Callable[..., None]]:
    """Set ``[ovs_rdt]`` nova.conf options for one test."""
    from nova_plugin.filters import CONF

    names: list[str] = []

    def set_(**values: object) -> None:
        for name, value in values.items():
            CONF.set_override(name, value, group='ovs_rdt')
            names.append(name)

    yield set_
    for name in names:
        CONF.clear_override(name, group='ovs_rdt')


@pytest.fixture
def debug_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger='nova_plugin')
    return caplog
