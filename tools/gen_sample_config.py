"""Regenerate etc/ovs-rdt/ovs-rdt.conf.sample (``tox -e genconfig``).

python3 tools/gen_sample_config.py [--check]

It is oslo-config-generator's output (etc/ovs-rdt/ovs-rdt-config-generator.conf,
namespace ovs_rdt) with the ``[pool:NAME]`` header commented out: the sample
is copied as a first configuration, where an uncommented ``[pool:name]``
would be a pool section that ``[allocation] pools`` does not list.
"""
import io
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
sys.path.insert(0, ROOT)

from ovs_rdt.opts import POOL_SAMPLE_GROUP  # noqa: E402

GENERATOR_CONF = os.path.join(ROOT, 'etc', 'ovs-rdt',
                              'ovs-rdt-config-generator.conf')
SAMPLE = os.path.join(ROOT, 'etc', 'ovs-rdt', 'ovs-rdt.conf.sample')


def sample_text() -> str:
    from oslo_config import generator

    conf = generator.cfg.ConfigOpts()
    generator.register_cli_opts(conf)
    conf(['--config-file', GENERATOR_CONF])
    out = io.StringIO()
    generator.generate(conf, out)
    text = out.getvalue()
    # (oslo.config lower-cases the group's name.)
    header = '\n[%s]\n' % POOL_SAMPLE_GROUP.lower()
    assert text.count(header) == 1, 'no %s in the generated sample' % header
    return text.replace(header, '\n#[%s]\n' % POOL_SAMPLE_GROUP)


def main() -> int:
    text = sample_text()
    if '--check' in sys.argv:
        with open(SAMPLE, encoding='utf-8') as fh:
            if fh.read() != text:
                print('%s is stale: run python3 tools/gen_sample_config.py '
                      '(tox -e genconfig)' % os.path.relpath(SAMPLE),
                      file=sys.stderr)
                return 1
        return 0
    with open(SAMPLE, 'w', encoding='utf-8') as fh:
        fh.write(text)
    return 0


if __name__ == '__main__':
    sys.exit(main())
