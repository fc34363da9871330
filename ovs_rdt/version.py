"""The installed ovs-rdt's version, as pbr wrote it at build time.

pbr takes it from the git tags (``0.2.0``; ``0.2.0.dev3`` three commits
after, with a ``Sem-Ver: feature`` line among them; see setup.py where a
checkout has no tags).  ``--version`` of every command prints it.
"""
from __future__ import annotations

import argparse
from typing import Any

DISTRIBUTION = 'ovs-rdt'


def version_string() -> str:
    """``0.2.0`` or ``0.2.0.dev3``: the distribution's full version."""
    import pbr.version
    return pbr.version.VersionInfo(DISTRIBUTION).release_string()


class VersionAction(argparse.Action):
    """``--version``: prints ``PROG VERSION`` and exits (pbr is imported
    only then, not by every command).
    """

    def __init__(self, option_strings: list[str], dest: str = '==SUPPRESS==',
                 **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=None,
                         help='print the version and exit', **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any,
                 values: Any, option_string: str | None = None) -> None:
        print('%s %s' % (parser.prog, version_string()))
        parser.exit()
