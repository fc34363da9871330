"""oslo.config options, built from the one declaration in :mod:`ovs_rdt.conf`.

``list_opts()`` is the ``oslo.config.opts`` entry point for
oslo-config-generator; :func:`load` parses a command line and config files
the OpenStack way and returns the plain :class:`~ovs_rdt.conf.Settings`
the rest of the code is given.
"""
from __future__ import annotations

import logging
import sys
from typing import Any, Callable

from oslo_config import cfg

from ovs_rdt import conf
from ovs_rdt.exceptions import ConfigError

POOL_SAMPLE_GROUP = 'pool:NAME'


def _opt(section: str, name: str, type_: str, default: Any, help_: str,
         extra: dict) -> cfg.Opt:
    if type_ == 'bool':
        return cfg.BoolOpt(name, default=default, help=help_)
    if type_ == 'int':
        return cfg.IntOpt(name, default=default, help=help_,
                          min=extra.get('min'), max=extra.get('max'))
    if type_ == 'list':
        return cfg.ListOpt(name, default=default, help=help_)
    if type_ == 'choice':
        return cfg.StrOpt(name, default=default, help=help_,
                          choices=extra['choices'])
    return cfg.StrOpt(name, default=default, help=help_)


def opts_for(section: str) -> list[cfg.Opt]:
    return [_opt(section, *spec) for spec in conf.SPEC[section]]


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """Every option, for oslo-config-generator (pools as [pool:NAME])."""
    out = []
    for section in conf.SPEC:
        group = POOL_SAMPLE_GROUP if section == 'pool' else section
        out.append((group, opts_for(section)))
    return out


def register(config: cfg.ConfigOpts) -> None:
    for section in conf.SPEC:
        if section == 'pool':
            continue
        if section == 'DEFAULT':
            config.register_opts(opts_for(section))
        else:
            config.register_opts(opts_for(section), group=section)


def settings_from(config: cfg.ConfigOpts) -> conf.Settings:
    """Settings from parsed oslo.config options (pool sections registered)."""
    for pool in config.allocation.pools:
        config.register_opts(opts_for('pool'),
                             group=conf.POOL_GROUP_PREFIX + pool)

    def get(section: str, name: str) -> str | None:
        if section.startswith(conf.POOL_GROUP_PREFIX) and \
                section[len(conf.POOL_GROUP_PREFIX):] not in \
                config.allocation.pools:
            return None
        grp = config if section == 'DEFAULT' else config[section]
        value = grp[name]
        if value is None:
            return None
        if isinstance(value, bool):
            return 'true' if value else 'false'
        if isinstance(value, list):
            return ','.join(value)
        return str(value)

    files = list(config.config_file or [])
    flavors: dict[str, str] = {}
    for path in files:   # names checked as the hook checks them
        flavors.update(conf.load(path).flavors)
    return conf.from_lookup(get, lambda s: True, flavors,
                            files[-1] if files else None)


def load(argv: list[str] | None, prog: str,
         add_cli: Callable[[cfg.ConfigOpts], None] | None = None,
         description: str | None = None) -> tuple[conf.Settings, cfg.ConfigOpts]:
    """Parse ``argv`` (``--config-file`` etc.) and the config files.

    ConfigError (with the option named) on a bad value; a missing default
    config file is fine, a missing explicit one is an error.
    """
    config = cfg.ConfigOpts()
    register(config)
    if add_cli is not None:
        add_cli(config)
    defaults = [conf.DEFAULT_CONFIG_FILE] if _exists(conf.DEFAULT_CONFIG_FILE) \
        else []
    try:
        config(args=sys.argv[1:] if argv is None else argv, project='ovs-rdt',
               prog=prog, default_config_files=defaults,
               description=description)
        return settings_from(config), config
    except (cfg.ConfigFilesNotFoundError, cfg.ConfigFileParseError) as exc:
        raise ConfigError(str(exc)) from None
    except (ValueError, cfg.Error) as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None


def _exists(path: str) -> bool:
    import os
    return os.path.exists(path)


def setup_logging(settings: conf.Settings) -> None:
    """Plain logging: stderr, plus [DEFAULT] log_file when set."""
    level = logging.DEBUG if settings.default.debug else logging.INFO
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if settings.default.log_file:
        handlers.append(logging.FileHandler(settings.default.log_file))
    logging.basicConfig(level=level, handlers=handlers,
                        format='%(asctime)s %(levelname)s %(name)s: %(message)s')
