"""``ovs-rdt``: the operator CLI.

Each subcommand lives in its own module exposing ``add_arguments(parser)``
and ``run(settings, args) -> int``; it is imported only when chosen.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from ovs_rdt.conf import DEFAULT_CONFIG_FILE

LOG = logging.getLogger(__name__)

# name -> (module, help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    'apply': ('ovs_rdt.cmd.apply',
              'create or update the configured pools and the default '
              'group\'s mask now'),
    'status': ('ovs_rdt.cmd.status',
               'show the node\'s cache plan per cache domain'),
    'top': ('ovs_rdt.cmd.top',
            'live LLC occupancy and memory bandwidth per group'),
    'emulate': ('ovs_rdt.emulator.cli',
                'mount an emulated resctrl filesystem (FUSE)'),
    'install-hook': ('libvirt_hooks.install',
                     'install the libvirt hook wrapper'),
    'provider-config': ('ovs_rdt.provider_config',
                        'write a Nova provider config with the node\'s '
                        'cache-way inventory'),
    'demo': ('ovs_rdt.demo',
             'run the main job on an emulated platform'),
}


def _add_parsers(subparsers: argparse._SubParsersAction) -> None:
    for name, (module, help_) in SUBCOMMANDS.items():
        parser = subparsers.add_parser(name, help=help_, description=help_)
        # Shown for each subcommand; hoist_global_options() hands it to
        # oslo.config wherever it is written.
        parser.add_argument('--config-file', metavar='PATH', dest='_unused',
                            help='the configuration file (default %s); may '
                            'also come before the subcommand'
                            % DEFAULT_CONFIG_FILE)
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            parser.set_defaults(unavailable=str(exc))
            continue
        mod.add_arguments(parser)


GLOBAL_OPTS = ('--config-file', '--config-dir')


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move ``--config-file F`` given after the subcommand to the front.

    oslo.config parses them on the top-level parser; users (and the
    contract: ``install-hook --config-file F``) put them anywhere.
    """
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in GLOBAL_OPTS and i + 1 < len(argv):
            front += argv[i:i + 2]
            i += 2
            continue
        if arg.split('=', 1)[0] in GLOBAL_OPTS and '=' in arg:
            front.append(arg)
        else:
            rest.append(arg)
        i += 1
    return front + rest


def main(argv: list[str] | None = None) -> int:
    from oslo_config import cfg

    from ovs_rdt.exceptions import RDTError
    from ovs_rdt import opts

    def add_cli(config: cfg.ConfigOpts) -> None:
        config.register_cli_opt(cfg.SubCommandOpt(
            'command', title='subcommands', handler=_add_parsers,
            help='what to do'))

    try:
        argv = hoist_global_options(sys.argv[1:] if argv is None else argv)
        settings, config = opts.load(argv, 'ovs-rdt', add_cli,
                                     description=__doc__.splitlines()[0])
    except RDTError as exc:
        print('ovs-rdt: error: %s' % exc, file=sys.stderr)
        return 2
    opts.setup_logging(settings)
    args = config.command
    name = args.name
    if getattr(args, 'unavailable', None):
        print('ovs-rdt %s: not available: %s' % (name, args.unavailable),
              file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    try:
        if name == 'emulate':
            return int(module.run(args) or 0)
        return int(module.run(settings, args) or 0)
    except RDTError as exc:
        print('ovs-rdt %s: error: %s' % (name, exc), file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except OSError as exc:
        print('ovs-rdt %s: error: %s%s' % (
            name, exc.strerror or exc,
            ': %s' % exc.filename if exc.filename else ''), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: one line for the operator, the
        # traceback in the log at debug level
        logging.getLogger(__name__).debug('internal error', exc_info=True)
        print('ovs-rdt %s: internal error: %s: %s (run with --debug for the '
              'traceback, and please report it)' % (name, type(exc).__name__,
                                                    exc), file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
