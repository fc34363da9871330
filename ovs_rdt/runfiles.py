"""Where ovs-rdt keeps its run-time files: ``/run/ovs-rdt`` (tmpfs: gone
at boot), one set per resctrl root (the agent's lock, the policy's state,
the hook server's socket).
"""
from __future__ import annotations

import hashlib
import os

#: Where the agent keeps its files.
RUN_DIR = '/run/ovs-rdt'


def run_path(root: str, name: str, run_dir: str = RUN_DIR) -> str:
    """``<run_dir>/<name>`` with ``{tag}`` the hash of the resctrl root."""
    tag = hashlib.sha1(os.path.realpath(root).encode()).hexdigest()[:12]
    return os.path.join(run_dir, name.format(tag=tag))
