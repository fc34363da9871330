"""The ``ovs-rdt`` subcommands (:mod:`ovs_rdt.cmd.main` dispatches)."""
from __future__ import annotations

import sys


def say(command: str | None, text: str, kind: str = 'error') -> None:
    """One line on standard error, in the one form of every CLI message:
    ``ovs-rdt COMMAND: KIND: TEXT`` (``ovs-rdt: KIND: TEXT`` while no
    subcommand is known; ``COMMAND`` may be a whole program name).
    """
    prog = command if command and ' ' in command else \
        'ovs-rdt %s' % command if command else 'ovs-rdt'
    print('%s: %s: %s' % (prog, kind, text), file=sys.stderr, flush=True)
