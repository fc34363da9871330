"""Regenerate the configuration reference in README.md from ovs_rdt.conf.SPEC.

python3 tools/gen_config_doc.py [--check]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from ovs_rdt.conf import SPEC  # noqa: E402

BEGIN = '<!-- BEGIN CONFIG REFERENCE (tools/gen_config_doc.py) -->'
END = '<!-- END CONFIG REFERENCE -->'


def table() -> str:
    lines = []
    for section, specs in SPEC.items():
        title = 'pool:NAME' if section == 'pool' else section
        lines.append('\n### [%s]\n' % title)
        lines.append('| option | type | default | meaning |')
        lines.append('|---|---|---|---|')
        for name, type_, default, help_, extra in specs:
            kind = 'HOST:PORT' if type_ == 'listen' else type_
            if 'choices' in extra:
                kind = ' \\| '.join(extra['choices'])
            if 'min' in extra or 'max' in extra:
                kind += ' (%s..%s)' % (extra.get('min', ''), extra.get('max', ''))
            shown = ','.join(default) if isinstance(default, list) else default
            lines.append('| `%s` | %s | `%s` | %s |' % (
                name, kind, '' if shown is None else shown,
                help_.replace('|', '\\|')))
    return '\n'.join(lines) + '\n'


def main() -> int:
    path = os.path.join(os.path.dirname(__file__), '..', 'README.md')
    with open(path) as fh:
        text = fh.read()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new = head + BEGIN + '\n' + table() + END + tail
    if '--check' in sys.argv:
        if new != text:
            print('README.md configuration reference is stale: run '
                  'python3 tools/gen_config_doc.py', file=sys.stderr)
            return 1
        return 0
    with open(path, 'w') as fh:
        fh.write(new)
    return 0


if __name__ == '__main__':
    sys.exit(main())
