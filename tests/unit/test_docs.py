import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(__file__), '..', '..')


def test_readme_config_reference_is_current():
    result = subprocess.run([sys.executable, 'tools/gen_config_doc.py',
                             '--check'], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr


def test_ci_calls_the_readme_test_command():
    with open(os.path.join(ROOT, 'README.md')) as fh:
        readme = fh.read()
    with open(os.path.join(ROOT, '.ci', 'run')) as fh:
        ci = fh.read()
    commands = [line.split('#')[0].strip() for line in readme.splitlines()
                if line.startswith('./tools/')]
    assert commands == ['./tools/demo.sh', './tools/test.sh']
    assert 'tools/test.sh' in ci


def test_sample_config_is_current(tmp_path):
    from oslo_config import generator
    out = tmp_path / 'ovs-rdt.conf.sample'
    conf = generator.cfg.ConfigOpts()
    generator.register_cli_opts(conf)
    conf(['--namespace', 'ovs_rdt', '--wrap-width', '79',
          '--output-file', str(out)])
    generator.generate(conf)
    with open(os.path.join(ROOT, 'etc', 'ovs-rdt',
                           'ovs-rdt.conf.sample')) as fh:
        assert fh.read() == out.read_text(), 'run: tox -e genconfig'
