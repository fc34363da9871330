"""``tools/setup.sh demo``'s .venv runs this checkout's ovs-rdt, even where
another ovs_rdt sits in the site packages it also sees (issue 51 trial 7:
a Debian python3-ovs-rdt on the host shadowed the checkout's editable
install, whose import finder comes after them).

The real script on a copy of the checkout, with Debian's packages of the
demo profile already installed (it then installs none: skipped otherwise,
as it would run apt-get on the host).  The host's site packages are not
touched: a ``.pth`` in the venv's own, read after the install's, puts the
other ovs_rdt where the host's dist-packages are, behind it.  mfusepy (from
PyPI) is stood in for, so that pip needs no network.
"""
from __future__ import annotations

import os
import subprocess

import pytest

from tests.functional.fixtures.ovs import REPO

SHADOW = 'raise SystemExit("the other ovs_rdt, not the checkout\'s")\n'


def demo_packages_missing() -> list[str]:
    awk = ['awk', '/^[a-z0-9]/ && /platform:dpkg[^]]*demo/ {print $1}',
           os.path.join(REPO, 'bindep.txt')]
    out = subprocess.run(awk, capture_output=True, text=True,
                         check=True).stdout.split()
    out += ['python3', 'python3-venv', 'git']
    return [p for p in out if 'ok installed' not in subprocess.run(
        ['dpkg-query', '-W', '-f=${Status}', p], capture_output=True,
        text=True).stdout]


pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason='tools/setup.sh needs root'),
    pytest.mark.skipif(not os.path.exists('/usr/bin/dpkg-query')
                       or bool(demo_packages_missing()),
                       reason='the demo profile\'s Debian packages are not '
                       'all installed (setup.sh would install them)')]


def test_the_demo_venv_imports_the_checkout_first(tmp_path) -> None:
    tree = tmp_path / 'ovs-rdt'
    files = subprocess.run(['git', 'ls-files', '-z'], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout
    for name in filter(None, files.split('\0')):
        src, dst = os.path.join(REPO, name), tree / name
        if os.path.isfile(src):
            dst.parent.mkdir(parents=True, exist_ok=True)
            with open(src, 'rb') as fh:
                dst.write_bytes(fh.read())
            os.chmod(dst, os.stat(src).st_mode & 0o777)
    venv = tree / '.venv'
    # What an earlier setup.sh left: a venv on the system site packages,
    # this checkout installed editable the default way (an import finder).
    subprocess.run(['/usr/bin/python3', '-m', 'venv', '--system-site-packages',
                    str(venv)], check=True)
    site = subprocess.run([str(venv / 'bin' / 'python'), '-c',
                           'import sysconfig; print(sysconfig.get_path('
                           '"purelib"))'], check=True, capture_output=True,
                          text=True).stdout.strip()
    os.makedirs(os.path.join(site, 'mfusepy-3.0.0.dist-info'))
    with open(os.path.join(site, 'mfusepy-3.0.0.dist-info', 'METADATA'),
              'w') as fh:
        fh.write('Metadata-Version: 2.1\nName: mfusepy\nVersion: 3.0.0\n')
    with open(os.path.join(site, 'mfusepy.py'), 'w') as fh:
        fh.write('# stands in for PyPI\'s mfusepy (no network in tests)\n')
    env = dict(os.environ, PBR_VERSION='0.0.1', PIP_NO_INDEX='1')
    env.pop('PYTHONPATH', None)
    subprocess.run([str(venv / 'bin' / 'pip'), 'install', '-q',
                    '--disable-pip-version-check', '--no-build-isolation',
                    '-e', '.[emulator]'], cwd=tree, env=env, check=True,
                   capture_output=True)
    # Another ovs_rdt where the host's site packages come: after .venv's.
    (tmp_path / 'other' / 'ovs_rdt').mkdir(parents=True)
    (tmp_path / 'other' / 'ovs_rdt' / '__init__.py').write_text(SHADOW)
    with open(os.path.join(site, 'zz-host-site-packages.pth'), 'w') as fh:
        fh.write(str(tmp_path / 'other') + '\n')

    def version() -> subprocess.CompletedProcess:
        return subprocess.run([str(venv / 'bin' / 'ovs-rdt'), '--version'],
                              env=env, capture_output=True, text=True,
                              timeout=60)

    shadowed = version()       # (the trial's: "invalid choice: 'config'")
    assert 'the other ovs_rdt' in shadowed.stderr, shadowed

    res = subprocess.run(['bash', 'tools/setup.sh', 'demo'], cwd=tree,
                         env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert 'installing Debian packages' not in res.stdout
    ran = version()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    where = subprocess.run([str(venv / 'bin' / 'python'), '-I', '-c',
                            'import ovs_rdt; print(ovs_rdt.__file__)'],
                           env=env, capture_output=True, text=True,
                           check=True, cwd=str(tmp_path)).stdout.strip()
    assert os.path.realpath(where) == os.path.realpath(
        tree / 'ovs_rdt' / '__init__.py')
    # Idempotent: a second run finds it right and installs nothing.
    again = subprocess.run(['bash', 'tools/setup.sh', 'demo'], cwd=tree,
                           env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert 'installing ovs-rdt' not in again.stdout, again.stdout
