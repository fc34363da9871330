import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), '..', '..')


@pytest.mark.parametrize('generator', ['gen_config_doc.py',
                                       'gen_sample_config.py'])
def test_generated_files_are_current(generator: str) -> None:
    """README's configuration reference, the sample configuration."""
    result = subprocess.run([sys.executable, 'tools/' + generator,
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


def test_sample_config_copied_as_is_reads_without_a_warning():
    # README: "cp .../ovs-rdt.conf.sample /etc/ovs-rdt/ovs-rdt.conf".  Its
    # [pool:name] header was a pool section [allocation] pools did not list.
    from ovs_rdt import conf

    path = os.path.join(ROOT, 'etc', 'ovs-rdt', 'ovs-rdt.conf.sample')
    with open(path) as fh:
        text = fh.read()
    assert '\n[pool:' not in text
    assert '\n#[pool:NAME]\n' in text
    settings = conf.load(path)
    assert settings.warnings == [] and settings.pools == {}


def _code(text: str) -> list[str]:
    """The inline code spans and code block lines of a Markdown text."""
    import re
    return re.findall(r'`([^`\n]+)`', text) + [
        line for block in re.findall(r'```.*?\n(.*?)```', text, re.S)
        for line in block.splitlines()]


def test_the_docs_name_only_subcommands_that_exist():
    """Issue 51: README listed "report" and "changes" as commands.  Every
    command line in README and doc/ (``ovs-rdt WORD ...``, after a path or
    a prompt) names a subcommand, and README's tree lists each one.
    """
    import glob
    import re

    from ovs_rdt.cmd.main import SUBCOMMANDS
    paths = [os.path.join(ROOT, 'README.md')] + sorted(
        glob.glob(os.path.join(ROOT, 'doc', '*.md')))
    seen, wrong = set(), []
    for path in paths:
        with open(path) as fh:
            for span in _code(fh.read()):
                m = re.match(r'\s*(?:\$\s+)?(?:\S*/)?ovs-rdt\s+'
                             r'(?:--\S+\s+\S+\s+)*([a-z][a-z-]+)', span)
                if m:
                    seen.add(m.group(1))
                    if m.group(1) not in SUBCOMMANDS:
                        wrong.append((os.path.basename(path), span))
    assert not wrong
    assert len(seen) > 5
    with open(os.path.join(ROOT, 'README.md')) as fh:
        readme = fh.read()
    listed = re.search(r'one module per `ovs-rdt` subcommand \(([^)]*)\)',
                       readme).group(1)
    words = set(re.findall(r'[a-z][a-z-]+', listed.split(';')[0]))
    assert words == set(SUBCOMMANDS) - {'emulate'}
