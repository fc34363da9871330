"""``ovs-rdt config [--json]``: the effective configuration, every value
with the file and line it comes from.

The files are the ones every command reads, in oslo.config's order
(every ``--config-file``, then each ``--config-dir``'s ``*.conf`` sorted;
by default ``/etc/ovs-rdt/ovs-rdt.conf`` then ``ovs-rdt.conf.d``), read by
the one reader (:func:`ovs_rdt.conf.load_files`): what it shows is what the
hook, the agent and the other commands get.  An option set in several
files shows the one in force and the ones it overrides, as
oslo.config's ``ConfigOpts.get_location()`` names the file of a value
(here with its line); ``oslo-config-validator`` checks a file against the
options but reads it with oslo.config, not this reader.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ovs_rdt.conf import FREE_SECTIONS, POOL_SECTION_PREFIX, SPEC, Settings
from ovs_rdt.opts import config_source

EPILOG = '''Each option shows its value and where it comes from: FILE:LINE, or
"default".  A later file wins; what it overrides is shown after it.
Exit status 0; 2 when the configuration cannot be read (the error says
which file, line and option).'''


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument('--json', action='store_true',
                        help='the same as JSON, for scripts')


def options(settings: Settings) -> list[dict[str, Any]]:
    """Every option in force, in the order of SPEC: section, option, value
    (as written, or the default), file and line (None: the default) and
    the values it overrides; then each ``[pool:NAME]`` section read, the
    pools ``[allocation] pools`` does not list marked ``ignored``, and
    ``[flavors]``.
    """
    out = []

    def add(section: str, option: str, default: Any,
            note: str | None = None) -> None:
        where = settings.sources.get((section, option), [])
        last = where[-1] if where else None
        out.append({
            'section': section, 'option': option,
            'value': last.value if last else _text(default),
            'file': last.path if last else None,
            'line': last.line if last else None,
            'overrides': [{'file': w.path, 'line': w.line, 'value': w.value}
                          for w in where[:-1]],
            'note': note})

    for section, specs in SPEC.items():
        if section == 'pool':
            continue
        for opt in specs:
            add(section, opt.name, opt.default)
    read = [s for s in dict.fromkeys(sec for sec, _ in settings.sources)
            if s.startswith(POOL_SECTION_PREFIX)]
    for name in list(settings.pools) + [
            s[len(POOL_SECTION_PREFIX):] for s in read
            if s[len(POOL_SECTION_PREFIX):] not in settings.pools]:
        section = POOL_SECTION_PREFIX + name
        note = None if name in settings.pools else \
            'ignored: %s is not in [allocation] pools' % name
        for opt in SPEC['pool']:
            add(section, opt.name, opt.default, note)
    for section in FREE_SECTIONS:
        for option in sorted({k for sec, k in settings.sources
                              if sec == section}):
            add(section, option, None)
    return out


def _text(default: Any) -> str:
    if default is None:
        return ''
    if isinstance(default, list):
        return ','.join(default)
    return str(default)


def where(item: dict[str, Any]) -> str:
    """``FILE:LINE`` (and what it overrides), or ``default``."""
    if item['file'] is None:
        text = 'default'
    else:
        text = '%s:%d' % (item['file'], item['line'])
    if item['overrides']:
        text += ' (overrides %s)' % ', '.join(
            '%s at %s:%d' % (o['value'] or '""', o['file'], o['line'])
            for o in reversed(item['overrides']))
    return text


def render(paths: list[str], items: list[dict[str, Any]],
           source: str = '') -> str:
    lines = ['Files read%s, in this order (a later value wins):'
             % (' (%s)' % source if source else '')]
    lines += ['  %s' % p for p in paths] or ['  none: every value is the '
                                             'default']
    section = None
    width = max([len('%s = %s' % (i['option'], i['value'])) for i in items]
                + [30])
    for item in items:
        if item['section'] != section:
            section = item['section']
            lines += ['', '[%s]%s' % (section, '  # ' + item['note']
                                      if item['note'] else '')]
        lines.append('%-*s  # %s' % (width, '%s = %s' % (
            item['option'], item['value']), where(item)))
    return '\n'.join(lines)


def run(settings: Settings, args: argparse.Namespace) -> int:

    items = options(settings)
    source = config_source(args)
    if args.json:
        json.dump({'files': settings.paths, 'files_from': source,
                   'options': items, 'warnings': settings.warnings},
                  sys.stdout, indent=2)
        sys.stdout.write('\n')
        return 0
    print(render(settings.paths, items, source))
    return 0
