"""Command lines and config files: one reader for every command.

Every command (``ovs-rdt``, ``ovs-rdt-agent``, the hook) reads its
configuration with the one stdlib reader, :func:`ovs_rdt.conf.load_files`.
oslo.config serves only oslo-config-generator (``list_opts()``, the
``oslo.config.opts`` entry point): importing it would cost the hook ~70 ms at
every event (``python3 -c 'import oslo_config.cfg'`` against ``-c pass``),
several times per VM start.  The files keep oslo.config's format and its
command-line conventions: ``--config-file`` (repeatable, later files win),
``--config-dir`` (its ``*.conf`` files, sorted, after them), and
``/etc/ovs-rdt/ovs-rdt.conf`` and ``/etc/ovs-rdt/ovs-rdt.conf.d/*.conf`` when
neither is given (oslo.config's default files and directories).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Callable

from ovs_rdt import conf
from ovs_rdt.exceptions import RDTError
from ovs_rdt.inputs import integers
from ovs_rdt.version import VersionAction

POOL_SAMPLE_GROUP = 'pool:NAME'
#: What the sample says of it (its header is commented out there:
#: tools/gen_sample_config.py).
POOL_SAMPLE_HELP = ('One section per pool named in [allocation] pools, '
                    'e.g. [pool:hp] for pools = hp: copy this one without the '
                    '"#" of its header, NAME being the pool\'s name. A '
                    '[pool:NAME] section that pools does not list is ignored, '
                    'with a warning.')


def list_opts() -> list[tuple[Any, list[Any]]]:
    """Every option as oslo.config options, for oslo-config-generator."""
    from oslo_config import cfg

    def opt(spec: conf.Opt) -> Any:
        kind = conf.TYPES[spec.type]
        return getattr(cfg, kind.oslo)(
            spec.name, default=spec.default, help=spec.help,
            **{limit: getattr(spec, limit) for limit in kind.limits})

    return [(cfg.OptGroup(POOL_SAMPLE_GROUP, help=POOL_SAMPLE_HELP)
             if section == 'pool' else section,
             [opt(spec) for spec in specs])
            for section, specs in conf.SPEC.items()]


def whole_number(low: int = 0) -> Callable[[str], int]:
    """An argparse ``type``: a whole number by the one rule.

    That is :mod:`ovs_rdt.inputs.integers`: no ``+3``, ``0_3`` or ``٣``.
    """
    def convert(text: str) -> int:
        try:
            return integers.parse(text, 'value', low)
        except RDTError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def add_config_arguments(parser: argparse.ArgumentParser,
                         prefix: str = '') -> None:
    """``--config-file`` and ``--config-dir`` on ``parser``.

    ``prefix`` keeps a subcommand's own copy apart (both are honoured, see
    :func:`config_files`).
    """
    parser.add_argument('--config-file', metavar='PATH', action='append',
                        dest=prefix + 'config_file',
                        help='a configuration file (default: $%s if set, '
                        'else %s, then the *.conf files of %s); repeatable, '
                        'later files win' % (CONFIG_ENV,
                                             conf.DEFAULT_CONFIG_FILE,
                                             conf.DEFAULT_CONFIG_DIR))
    parser.add_argument('--config-dir', metavar='DIR', action='append',
                        dest=prefix + 'config_dir',
                        help='a directory whose *.conf files are read after '
                        'the --config-file ones, in sorted order')


#: The configuration file of the commands when neither --config-file nor
#: --config-dir is given (``eval "$(ovs-rdt sandbox env)"`` sets it).  The
#: hook never reads it: its wrapper names its files.
CONFIG_ENV = 'OVS_RDT_CONF'


def _given(args: argparse.Namespace, name: str) -> list[str]:
    """An option's values before the subcommand, then after it."""
    return (list(getattr(args, name, None) or [])
            + list(getattr(args, 'sub_' + name, None) or []))


def config_args(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The ``--config-file`` and ``--config-dir`` values of ``args``, in
    order (before the subcommand, then after it); when there are none,
    ``$OVS_RDT_CONF`` if set (:data:`CONFIG_ENV`).
    """
    files, dirs = _given(args, 'config_file'), _given(args, 'config_dir')
    if not files and not dirs and os.environ.get(CONFIG_ENV):
        files = [os.environ[CONFIG_ENV]]
    return files, dirs


def config_source(args: argparse.Namespace) -> str:
    """Which rule chose the files (:func:`config_args`), in words."""
    named = ' and '.join(o for o in ('--config-file', '--config-dir')
                         if _given(args, o[2:].replace('-', '_')))
    if named:
        return named + ('; $%s is set, and not read when either is given'
                        % CONFIG_ENV if os.environ.get(CONFIG_ENV) else '')
    if os.environ.get(CONFIG_ENV):
        return '$%s' % CONFIG_ENV
    return 'the default ones: %s, then %s/*.conf, those that exist' % (
        conf.DEFAULT_CONFIG_FILE, conf.DEFAULT_CONFIG_DIR)


def config_files(args: argparse.Namespace) -> list[str]:
    """The files to read, in order; ConfigError for a missing one
    (:func:`ovs_rdt.conf.config_paths`, the rule the hook follows too).
    """
    return conf.config_paths(*config_args(args))


def load(argv: list[str] | None, prog: str,
         add_cli: Callable[[argparse.ArgumentParser], None] | None = None,
         description: str | None = None
         ) -> tuple[conf.Settings, argparse.Namespace]:
    """Parse ``argv`` and read the config files it names.

    ConfigError (naming the file, option and value) on a bad file; argparse
    itself prints usage errors and ``--help``.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument('--version', action=VersionAction)
    add_config_arguments(parser)
    parser.add_argument('--debug', action='store_true',
                        help='log at debug level (as [DEFAULT] debug = true)')
    if add_cli is not None:
        add_cli(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    settings = conf.load_files(config_files(args))
    if args.debug:
        settings.default.debug = True
    return settings, args


def setup_logging(settings: conf.Settings) -> None:
    """Plain logging: stderr, plus [DEFAULT] log_file when set."""
    level = logging.DEBUG if settings.default.debug else logging.INFO
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if settings.default.log_file:
        handlers.append(logging.FileHandler(settings.default.log_file))
    logging.basicConfig(level=level, handlers=handlers,
                        format='%(asctime)s %(levelname)s %(name)s: %(message)s')
