"""Tests that run ovs-rdt's Nova plugin inside the real nova package.

Run in their own tox env (``tox -e nova``) where nova==34.0.0 is installed.
"""
from __future__ import annotations

import warnings

# First: Nova's tests choose eventlet or native threads
# (OS_NOVA_DISABLE_EVENTLET_PATCHING) when this package is imported, before
# anything imports eventlet.
import nova.tests.unit  # noqa: F401,I100

warnings.filterwarnings('ignore', category=DeprecationWarning)
warnings.filterwarnings('ignore', category=FutureWarning)

from nova import objects  # noqa: E402

objects.register_all()
