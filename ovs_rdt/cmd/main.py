"""``ovs-rdt``: the operator CLI.

Each subcommand lives in its own module exposing ``add_arguments(parser)``
and ``run(settings, args) -> int``; it is imported only when chosen.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys


LOG = logging.getLogger(__name__)
DESCRIPTION = ('ovs-rdt: Intel RDT cache allocation for OvS-DPDK, libvirt and '
               'Nova on NFV compute nodes')

# name -> (module, help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    'apply': ('ovs_rdt.cmd.apply',
              'create or update the configured pools and the default '
              'group\'s mask now'),
    'status': ('ovs_rdt.cmd.status',
               'show the node\'s cache plan per cache domain'),
    'top': ('ovs_rdt.cmd.top',
            'live LLC occupancy and memory bandwidth per group'),
    'profile': ('ovs_rdt.cmd.profile',
                'peak LLC footprint per group over a window, the ways that '
                'hold it and the lines to paste'),
    'emulate': ('ovs_rdt.emulator.cli',
                'mount an emulated resctrl filesystem (FUSE)'),
    'check-domain': ('ovs_rdt.cmd.check_domain',
                     'what the libvirt hook would do with a domain XML on '
                     'this node, without doing it'),
    'install-hook': ('ovs_rdt.cmd.install_hook',
                     'install the libvirt hook wrapper'),
    'config': ('ovs_rdt.cmd.config',
               'show the effective configuration: every value, and the file '
               'and line it comes from'),
    'provider-config': ('ovs_rdt.cmd.provider_config',
                        'write a Nova provider config with the node\'s '
                        'cache-way inventory'),
    'demo': ('ovs_rdt.cmd.demo',
             'run the main job on an emulated platform'),
    'selftest': ('ovs_rdt.cmd.selftest',
                 'check that this node\'s resctrl behaves as ovs-rdt relies on '
                 'and that its cache ways shield'),
    'sandbox': ('ovs_rdt.cmd.sandbox',
                'start, show or stop an emulated resctrl, a private OvS and '
                'a private libvirtd with the hook, to try ovs-rdt here'),
}


#: The options before the subcommand that take a value.
VALUE_OPTIONS = ('--config-file', '--config-dir')


def takes_value(word: str) -> bool:
    """``word`` is one of :data:`VALUE_OPTIONS` with its value to follow,
    spelt out or abbreviated as argparse accepts (``--config-f``).
    """
    return (word.startswith('--') and '=' not in word and len(word) > 2
            and any(o.startswith(word) for o in VALUE_OPTIONS))


def chosen(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names (the first word that is not an option
    or an option's value), None if none.
    """
    words = iter(argv)
    for word in words:
        if takes_value(word):
            next(words, None)
        elif not word.startswith('-'):
            return word if word in SUBCOMMANDS else None
    return None


def _add_parsers(subparsers: argparse._SubParsersAction,
                 wanted: str | None) -> None:
    """Every subcommand's parser; only the ``wanted`` one's module is
    imported, to add its own arguments (the others are not needed to parse
    this command line, nor to list them in ``--help``).
    """
    from ovs_rdt import opts

    for name, (module, help_) in SUBCOMMANDS.items():
        parser = subparsers.add_parser(name, help=help_, description=help_)
        # Also after the subcommand (the contract writes
        # "install-hook --config-file F").
        opts.add_config_arguments(parser, prefix='sub_')
        parser.set_defaults(command=name)
        if name != wanted:
            continue
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            parser.set_defaults(unavailable=str(exc))
            continue
        mod.add_arguments(parser)


def main(argv: list[str] | None = None) -> int:
    from ovs_rdt.cmd import say
    from ovs_rdt.exceptions import ConfigError, RDTError, describe
    from ovs_rdt import opts

    argv = sys.argv[1:] if argv is None else argv

    def add_cli(parser: argparse.ArgumentParser) -> None:
        subparsers = parser.add_subparsers(title='subcommands',
                                           metavar='COMMAND',
                                           help='what to do')
        subparsers.required = True
        _add_parsers(subparsers, chosen(argv))

    try:
        settings, args = opts.load(argv, 'ovs-rdt', add_cli,
                                   description=DESCRIPTION)
    except RDTError as exc:
        say(chosen(argv), str(exc))
        return 2
    opts.setup_logging(settings)
    name = args.command
    if getattr(args, 'unavailable', None):
        hint = ''
        if name == 'emulate':
            from ovs_rdt import install_advice
            hint = ' (%s)' % install_advice.emulator()
        say(name, 'not available: %s%s' % (args.unavailable, hint))
        return 2
    if name != 'emulate':         # (which reads no configuration)
        for warning in settings.warnings:
            say(name, warning, 'warning')
    module = importlib.import_module(SUBCOMMANDS[name][0])
    try:
        if name == 'emulate':
            return int(module.run(args) or 0)
        return int(module.run(settings, args) or 0)
    except ConfigError as exc:      # (one this node shows: a mask too wide)
        say(name, str(exc))
        return 2
    except RDTError as exc:
        say(name, str(exc))
        return 1
    except BrokenPipeError:
        return 0
    except OSError as exc:
        say(name, describe(exc))
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: one line for the operator, the
        # traceback in the log at debug level
        logging.getLogger(__name__).debug('internal error', exc_info=True)
        say(name, 'internal error: %s: %s (run with --debug for the '
            'traceback, and please report it)' % (type(exc).__name__, exc))
        return 1


if __name__ == '__main__':
    sys.exit(main())
