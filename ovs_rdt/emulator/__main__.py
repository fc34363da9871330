"""``python3 -m ovs_rdt.emulator [--profile P] [-d] MOUNTPOINT`` (no oslo.config)."""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from ovs_rdt.emulator import cli


def main(argv: Optional[list[str]] = None) -> int:
    cli.PROG = 'python3 -m ovs_rdt.emulator'
    parser = argparse.ArgumentParser(
        prog=cli.PROG,
        description='Mount a kernel-faithful emulated resctrl filesystem (FUSE).')
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(argv))


if __name__ == '__main__':
    sys.exit(main())
