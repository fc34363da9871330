"""ovs-rdt inside Nova's own functional framework (``tox -e nova-functional``).

The emulated nodes' provider configs are written once per session by the
real ``ovs-rdt provider-config`` (:mod:`tests.nova_functional.nodes`).
"""
from __future__ import annotations

import warnings

# First: Nova's functional tests choose eventlet or native threads
# (OS_NOVA_DISABLE_EVENTLET_PATCHING) when this package is imported, before
# anything imports eventlet.
import nova.tests.functional  # noqa: F401,I100

import pytest  # noqa: I100

warnings.filterwarnings('ignore', category=DeprecationWarning)
warnings.filterwarnings('ignore', category=FutureWarning)

from tests.nova_functional import nodes  # noqa: E402


@pytest.fixture(scope='session', autouse=True)
def emulated_nodes(tmp_path_factory: pytest.TempPathFactory) -> None:
    nodes.prepare(str(tmp_path_factory.mktemp('nodes')))
