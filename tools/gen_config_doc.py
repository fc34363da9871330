"""Regenerate the option table of the docs from the options' declarations:
README.md's configuration reference, from ovs_rdt.conf.SPEC.

python3 tools/gen_config_doc.py [--check]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from ovs_rdt.conf import SPEC  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), '..')
BEGIN = '<!-- BEGIN CONFIG REFERENCE (tools/gen_config_doc.py) -->'
END = '<!-- END CONFIG REFERENCE -->'


def table() -> str:
    lines = []
    for section, specs in SPEC.items():
        title = 'pool:NAME' if section == 'pool' else section
        lines.append('\n### [%s]\n' % title)
        lines.append('| option | type | default | meaning |')
        lines.append('|---|---|---|---|')
        for opt in specs:
            kind = 'HOST:PORT' if opt.type == 'listen' else opt.type
            if opt.choices is not None:
                kind = ' \\| '.join(opt.choices)
            if opt.min is not None or opt.max is not None:
                kind += ' (%s..%s)' % ('' if opt.min is None else opt.min,
                                       '' if opt.max is None else opt.max)
            shown = ','.join(opt.default) if isinstance(opt.default, list) \
                else opt.default
            lines.append('| `%s` | %s | `%s` | %s |' % (
                opt.name, kind, '' if shown is None else shown,
                opt.help.replace('|', '\\|')))
    return '\n'.join(lines) + '\n'


def replace(path: str, begin: str, end: str, body: str, check: bool) -> bool:
    """Put ``body`` between the markers; whether the file was current."""
    with open(path) as fh:
        text = fh.read()
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    new = head + begin + '\n' + body + end + tail
    if new == text:
        return True
    if check:
        print('%s: the table between %s and %s is stale: run '
              'python3 tools/gen_config_doc.py' % (os.path.relpath(path, ROOT),
                                                   begin, end),
              file=sys.stderr)
        return False
    with open(path, 'w') as fh:
        fh.write(new)
    return True


def main() -> int:
    check = '--check' in sys.argv
    current = replace(os.path.join(ROOT, 'README.md'), BEGIN, END, table(),
                      check)
    return 0 if current else 1


if __name__ == '__main__':
    sys.exit(main())
