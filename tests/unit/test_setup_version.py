"""setup.py's version of a ``git archive`` export (issue 38 item 9): a
release's is its version, any other commit's is refused with what to do,
where pbr alone stopped with "Versioning for this project requires either
an sdist tarball, or access to an upstream git repository".
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile

import pytest

import setup

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
RELEASES = [('0.1.0', '2765cac'), ('0.2.0', 'c4796e1a6ac4f8d8')]


def test_archived_version() -> None:
    text = 'node: %s\nref-names: %s\n'
    assert setup.archived_version(text % ('a' * 40, 'HEAD -> main, tag: '
                                          '0.3.0, origin/main'), RELEASES) \
        == '0.3.0'
    assert setup.archived_version(text % ('c4796e1a6ac4f8d884192ea2ddfab79e4a'
                                          'a8175a', ''), RELEASES) == '0.2.0'
    assert setup.archived_version(text % ('b' * 40, 'HEAD -> main'),
                                  RELEASES) is None
    # Not filled in by git: a checkout's copy of the file, not an export.
    assert setup.archived_version(
        'node: $Format:%H$\nref-names: $Format:%D$\n', RELEASES) is None


@pytest.mark.skipif(not os.path.exists(os.path.join(REPO, '.git')),
                    reason='not a git checkout (a source package build)')
def test_git_archive_export_builds_or_says_why(tmp_path) -> None:
    archive = subprocess.run(['git', 'archive', 'HEAD'], cwd=REPO,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tmp_path)
    env = {k: v for k, v in os.environ.items()
           if k not in ('PBR_VERSION', 'OSLO_PACKAGE_VERSION')}
    env.update(SKIP_GENERATE_AUTHORS='1', SKIP_WRITE_GIT_CHANGELOG='1')
    res = subprocess.run([sys.executable, 'setup.py', '-q', '--version'],
                         cwd=tmp_path, env=env, capture_output=True,
                         text=True)
    tags = subprocess.run(['git', 'tag', '--points-at', 'HEAD'], cwd=REPO,
                          capture_output=True, text=True).stdout.split()
    released = [t for t in tags if t.count('.') == 2]
    if released:
        assert res.stdout.split()[-1] == released[0], res.stderr
    else:
        assert res.returncode != 0
        assert 'this git archive export is of commit' in res.stderr
        assert 'set PBR_VERSION' in res.stderr
