"""``tools/build.py`` on a machine not set up for it: one line saying what
to install or run, before anything is built (README, "Releases").
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

ROOT = os.path.join(os.path.dirname(__file__), '..', '..')
BUILD = os.path.join(ROOT, 'tools', 'build.py')


def test_a_python_without_build_is_told_what_to_run(tmp_path: Any) -> None:
    # A bare virtualenv: neither "build" nor pbr (as Debian's python3 lacks
    # "build" before tools/setup.sh made .venv).
    venv = tmp_path / 'bare'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', str(venv)],
                   check=True, timeout=120)
    out = tmp_path / 'dist'
    res = subprocess.run([str(venv / 'bin' / 'python'), BUILD, '--no-deb',
                          '--outdir', str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith('tools/build.py: '), lines
    assert 'Python package(s) build, pbr' in lines[0]
    assert 'run tools/setup.sh' in lines[0]
    assert '.venv/bin/python tools/build.py' in lines[0]
    assert 'Traceback' not in res.stderr and not out.exists()


def test_the_projects_virtualenv_has_what_it_needs() -> None:
    """tools/setup.sh's .venv (test-requirements.txt, requirements.txt)
    holds every Python package tools/build.py asks for (read from the
    files, not from the running Python: the Debian build's unit tests run
    without them).
    """
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location('tools_build', BUILD)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    named = set()
    for name in ('test-requirements.txt', 'requirements.txt'):
        with open(os.path.join(ROOT, name), encoding='utf-8') as fh:
            named |= {re.split(r'[<>=!~\[; ]', line.strip(), 1)[0].lower()
                      for line in fh if line.strip()
                      and not line.startswith('#')}
    wanted = {pip.lower() for _, pip in tool.PY_MODULES}
    assert wanted and wanted <= named, wanted - named
