#!/usr/bin/env python3
"""Build every release artifact of ovs-rdt with one command.

    .venv/bin/python tools/build.py [--outdir dist] [--release 0.2.0] [--no-deb]
        [--nocheck] [--mfusepy-sdist PATH]

From the source tree (the default): ``python -m build`` makes the sdist
(pbr lists the files git tracks) and the wheel from that sdist; the sdist,
unpacked, is then the Debian source package: ``dpkg-buildpackage -us -uc``
(debhelper, dh-python/pybuild) builds ``ovs-rdt_<version>_all.deb``, and
``lintian`` checks the source and binary packages (a warning or an error
fails the build; what lintian says is kept in ``lintian.txt``).

The Debian source package is ``3.0 (quilt)``: the sdist is its upstream
tarball (``ovs-rdt_<version>.orig.tar.gz``) and the Debian revision (``-1``)
leaves room for a distribution's own.  Its binary packages are split as
OpenStack's distributions split theirs: ``python3-ovs-rdt`` (the library),
``ovs-rdt`` (the compute node: agent, hook, unit), ``python3-ovs-rdt-nova``
(the scheduler and API nodes' plugin) and ``ovs-rdt-emulator``, whose
dependency ``mfusepy`` Debian does not have: ``python3-mfusepy`` is built too,
from PyPI's sdist (fetched with pip, checked against the sha256 in
packaging/mfusepy/sdist.txt, or given with ``--mfusepy-sdist``) and the
packaging in packaging/mfusepy/debian.  The unit tests run during the
package build (``--nocheck``: not).

``--release V``: a released version, from its commit in releases.txt (no
tag needed): ``git archive`` of that commit, PBR_VERSION=V, the wheel and
the .deb (the release's own debian/, or this tree's where the release had
none; not lintian-checked again: the upgrade tests install it).

The Python version is pbr's (setup.py); Debian's is the same with ``~``
before a pre-release (0.2.0.dev3 -> 0.2.0~dev3, older than 0.2.0).  A
build of a version the changelog has no entry for gets a snapshot entry
(in the build's copy; the tree is not changed).  Needs the Debian packages
of bindep.txt's "build" profile and ``build`` in the Python environment
running this script (test-requirements.txt; tools/setup.sh makes .venv/
with both); without them it says what to install and builds nothing.
"""
from __future__ import annotations

import argparse
import email.utils
import glob
import importlib.machinery
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Debian's tools run with Debian's python3, whatever PATH says (pyenv).
DEB_PATH = '/usr/sbin:/usr/bin:/sbin:/bin'
ENTRY = re.compile(r'^ovs-rdt \(([^)]+)\) ')
MFUSEPY = os.path.join(REPO, 'packaging', 'mfusepy')


#: Python modules this script and its steps import: (module, where from).
PY_MODULES = (('build', 'build'), ('pbr', 'pbr'),
              ('setuptools', 'setuptools'), ('wheel', 'wheel'))
#: Debian tools the .deb needs (bindep.txt, profile "build").
DEB_TOOLS = (('dpkg-buildpackage', 'dpkg-dev'), ('dh', 'debhelper'),
             ('pybuild', 'dh-python'), ('help2man', 'help2man'),
             ('lintian', 'lintian'))


class BuildError(Exception):
    pass


def missing(deb: bool) -> list[str]:
    """What this machine lacks for the build, one line each with the fix."""
    out = []
    # Not this script's directory (it holds build.py itself) nor the
    # working directory: where "python -m build" looks, but for those.
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path
            if p and os.path.abspath(p) not in (here, os.getcwd())]
    modules = [pip for module, pip in PY_MODULES
               if not getattr(importlib.machinery.PathFinder.find_spec(
                   module, path), 'origin', None)]
    if modules:
        out.append('%s runs without the Python package(s) %s: run '
                   'tools/setup.sh (as root; it makes .venv/ with '
                   'test-requirements.txt), then .venv/bin/python '
                   'tools/build.py; or pip install %s into this Python'
                   % (sys.executable, ', '.join(modules), ' '.join(modules)))
    if deb:
        tools = [(cmd, pkg) for cmd, pkg in DEB_TOOLS
                 if shutil.which(cmd, path=DEB_PATH) is None]
        if tools:
            out.append('%s not found: apt-get install %s (bindep.txt, '
                       'profile "build"; tools/setup.sh installs them), or '
                       'build without the .deb: --no-deb'
                       % (', '.join(c for c, _ in tools),
                          ' '.join(dict.fromkeys(p for _, p in tools))))
    return out


def run(*cmd: str, cwd: str = REPO, env: dict | None = None,
        log: str | None = None) -> str:
    """Run ``cmd``; BuildError with the end of its output if it fails."""
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True,
                         text=True)
    out = res.stdout + res.stderr
    if log:
        with open(log, 'a', encoding='utf-8') as fh:
            fh.write('$ %s\n%s\n' % (' '.join(cmd), out))
    if res.returncode != 0:
        tail = '\n'.join(out.strip().splitlines()[-15:])
        raise BuildError('%s failed (exit %d):\n%s'
                         % (' '.join(cmd[:3]), res.returncode, tail))
    return res.stdout


def tree_version() -> str:
    """pbr's version of the source tree (setup.py; see its docstring)."""
    out = run(sys.executable, 'setup.py', '-q', '--version',
              env=dict(os.environ, SKIP_GENERATE_AUTHORS='1',
                       SKIP_WRITE_GIT_CHANGELOG='1'))
    return out.strip().splitlines()[-1]


def debian_version(version: str) -> str:
    from pbr.version import SemanticVersion
    return SemanticVersion.from_pip_string(version).debian_string()


def upstream_of(deb: str) -> str:
    """The upstream part of a Debian version (``0.3.0-1`` -> ``0.3.0``)."""
    return deb.rsplit('-', 1)[0] if '-' in deb else deb


def version_key(version: str) -> object:
    from pbr.version import SemanticVersion
    return SemanticVersion.from_pip_string(
        upstream_of(version).replace('~', '.'))


def quilt(src: str) -> bool:
    """The source package's format is ``3.0 (quilt)`` (else native)."""
    with open(os.path.join(src, 'debian', 'source', 'format'),
              encoding='utf-8') as fh:
        return fh.read().strip() == '3.0 (quilt)'


def write_changelog(src: str, version: str, note: str) -> str:
    """debian/changelog of ``src`` for ``version``: the entries up to it,
    and a snapshot entry on top if it has none of its own (revision ``-1``
    for a quilt package).  Returns the Debian version built.
    """
    path = os.path.join(src, 'debian', 'changelog')
    with open(path, encoding='utf-8') as fh:
        text = fh.read()
    entries = re.split(r'\n(?=ovs-rdt \()', text.strip('\n'))
    deb = debian_version(version)
    kept = [e for e in entries
            if version_key(ENTRY.match(e).group(1)) <= version_key(deb)]
    if not kept or upstream_of(ENTRY.match(kept[0]).group(1)) != deb:
        maint = re.search(r'^ -- (.*?>)', text, re.M).group(1)
        kept.insert(0, 'ovs-rdt (%s%s) UNRELEASED; urgency=medium\n\n'
                    '  * %s\n\n -- %s  %s' % (
                        deb, '-1' if quilt(src) else '', note, maint,
                        email.utils.formatdate()))
    with open(path, 'w', encoding='utf-8') as fh:
        fh.write('\n\n'.join(kept) + '\n')
    return ENTRY.match(kept[0]).group(1)


def orig_tarball(src: str, name: str, upstream: str,
                 tarball: str | None = None) -> None:
    """``<name>_<upstream>.orig.tar.gz`` beside ``src`` (a quilt package's
    upstream tarball): ``tarball`` (the sdist) copied, or ``src`` without
    its debian/ packed.
    """
    dest = os.path.join(os.path.dirname(src), '%s_%s.orig.tar.gz'
                        % (name, upstream))
    if tarball:
        shutil.copy2(tarball, dest)
        return
    top = os.path.basename(src)
    with tarfile.open(dest, 'w:gz') as tar:
        tar.add(src, arcname=top, filter=lambda info: None if info.name in (
            top + '/debian', top + '/.git') else info)


def python_artifacts(src: str, outdir: str, version: str, log: str,
                     sdist: bool) -> list[str]:
    env = dict(os.environ, PBR_VERSION=version, SKIP_GENERATE_AUTHORS='1',
               SKIP_WRITE_GIT_CHANGELOG='1')
    args = [sys.executable, '-m', 'build', '--no-isolation', '--outdir',
            outdir]
    if not sdist:
        args.append('--wheel')
    run(*args, src, cwd=src, env=env, log=log)
    # setuptools before 69.3 names the sdist ovs-rdt-V.tar.gz.
    made = [p for pattern in ('ovs_rdt-%s[.-]*', 'ovs-rdt-%s.tar.gz')
            for p in glob.glob(os.path.join(outdir, pattern % version))]
    if not made:
        raise BuildError('python -m build made no ovs_rdt-%s files' % version)
    return sorted(made)


def deb_artifacts(src: str, outdir: str, deb: str, log: str,
                  lint: bool = True, check: bool = True,
                  name: str = 'ovs-rdt') -> list[str]:
    """dpkg-buildpackage in ``src`` (a source package of Debian version
    ``deb``, its orig tarball beside it if quilt); what it made moved to
    ``outdir``, and lintian's report.
    """
    env = {'PATH': DEB_PATH, 'LC_ALL': 'C.UTF-8', 'HOME': os.environ.get(
        'HOME', '/root')}
    if not check:
        env.update(DEB_BUILD_OPTIONS='nocheck', DEB_BUILD_PROFILES='nocheck')
    run('dpkg-buildpackage', '-us', '-uc', cwd=src,
        env=env, log=log)
    parent = os.path.dirname(src)
    made = []
    for path in os.listdir(parent):
        if path.endswith(('.deb', '.dsc', '.changes', '.buildinfo',
                          '.tar.gz', '.tar.xz')):
            dest = os.path.join(outdir, path)
            shutil.move(os.path.join(parent, path), dest)
            made.append(dest)
    changes = [p for p in made if p.endswith('.changes')]
    if not changes:
        raise BuildError('dpkg-buildpackage made no .changes file')
    if not lint:
        return sorted(made)
    report = os.path.join(outdir, '%s_%s.lintian.txt' % (name, deb))
    res = subprocess.run(['lintian', '--display-info', '--fail-on',
                          'error,warning', changes[0]], env=env,
                         capture_output=True, text=True)
    with open(report, 'w', encoding='utf-8') as fh:
        fh.write(res.stdout + res.stderr)
    if res.returncode != 0:
        raise BuildError('lintian found errors or warnings (%s):\n%s'
                         % (report, (res.stdout + res.stderr).strip()))
    return sorted(made) + [report]


def from_tree(outdir: str, work: str, log: str, deb: bool, check: bool,
              mfusepy: str | None) -> list[str]:
    version = tree_version()
    made = python_artifacts(REPO, outdir, version, log, sdist=True)
    if not deb:
        return made
    sdist = [p for p in made if p.endswith('.tar.gz')][0]
    unpacked = os.path.join(work, 'sdist')
    with tarfile.open(sdist) as tar:
        tar.extractall(unpacked)
    top, = os.listdir(unpacked)
    src = os.path.join(work, 'ovs-rdt', 'ovs-rdt-%s' % debian_version(version))
    os.makedirs(os.path.dirname(src))
    os.rename(os.path.join(unpacked, top), src)
    head = run('git', 'rev-parse', '--short', 'HEAD').strip()
    full = write_changelog(src, version, 'Snapshot of %s.' % head)
    orig_tarball(src, 'ovs-rdt', debian_version(version), sdist)
    made += deb_artifacts(src, outdir, full, log, check=check)
    return made + mfusepy_artifacts(outdir, work, log, mfusepy)


def mfusepy_sdist(work: str, log: str) -> str:
    """PyPI's sdist of the mfusepy release packaging/mfusepy names, checked."""
    import hashlib

    with open(os.path.join(MFUSEPY, 'sdist.txt'), encoding='utf-8') as fh:
        fields = dict(line.split(None, 1) for line in fh.read().splitlines()
                      if line.strip() and not line.startswith('#'))
    name = 'mfusepy-%s.tar.gz' % fields['version'].strip()
    dest = os.path.join(work, 'pypi')
    try:
        run(sys.executable, '-m', 'pip', 'download', '--quiet', '--no-deps',
            '--no-binary', ':all:', '--no-build-isolation', '--dest', dest,
            'mfusepy==%s' % fields['version'].strip(), log=log)
    except BuildError as exc:
        raise BuildError('cannot fetch %s from PyPI (give it with '
                         '--mfusepy-sdist): %s' % (name, exc)) from None
    path = os.path.join(dest, name)
    with open(path, 'rb') as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    if digest != fields['sha256'].strip():
        raise BuildError('%s: sha256 %s, packaging/mfusepy/sdist.txt says %s'
                         % (name, digest, fields['sha256'].strip()))
    return path


def mfusepy_artifacts(outdir: str, work: str, log: str,
                      sdist: str | None) -> list[str]:
    """python3-mfusepy (ovs-rdt-emulator's dependency) from its sdist."""
    sdist = sdist or mfusepy_sdist(work, log)
    unpacked = os.path.join(work, 'mfusepy')
    os.makedirs(unpacked)
    with tarfile.open(sdist) as tar:
        tar.extractall(unpacked)
    top, = os.listdir(unpacked)
    upstream = top.split('-', 1)[1]
    src = os.path.join(unpacked, 'mfusepy-%s' % upstream)
    if top != os.path.basename(src):
        os.rename(os.path.join(unpacked, top), src)
    shutil.copytree(os.path.join(MFUSEPY, 'debian'),
                    os.path.join(src, 'debian'))
    orig_tarball(src, 'mfusepy', upstream, sdist)
    with open(os.path.join(src, 'debian', 'changelog'),
              encoding='utf-8') as fh:
        deb = re.match(r'^mfusepy \(([^)]+)\)', fh.read()).group(1)
    if upstream_of(deb) != upstream:
        raise BuildError('packaging/mfusepy/debian/changelog is for %s, the '
                         'sdist for %s' % (deb, upstream))
    return deb_artifacts(src, outdir, deb, log, name='mfusepy')


def from_release(version: str, outdir: str, work: str, log: str,
                 deb: bool) -> list[str]:
    sys.path.insert(0, REPO)
    from setup import releases          # the one reader of releases.txt
    commits = dict(releases())
    if version not in commits:
        raise BuildError('releases.txt has no release %s (it has %s)'
                         % (version, ', '.join(commits)))
    src = os.path.join(work, 'ovs-rdt-%s' % debian_version(version))
    os.makedirs(src)
    archive = subprocess.run(['git', 'archive', '--format=tar',
                              commits[version]], cwd=REPO,
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise BuildError('git archive %s: %s (a shallow clone lacks the '
                         'commit of release %s)' % (
                             commits[version], archive.stderr.decode().strip(),
                             version))
    subprocess.run(['tar', '-x', '-C', src], input=archive.stdout,
                   check=True)
    made = python_artifacts(src, outdir, version, log, sdist=False)
    if not deb:
        return made
    # Packaging written after the release: this tree's debian/ and the
    # release notes (which cover every release).
    for name in ('debian', 'RELEASENOTES.md'):
        if not os.path.exists(os.path.join(src, name)):
            copy = shutil.copytree if name == 'debian' else shutil.copy2
            copy(os.path.join(REPO, name), os.path.join(src, name))
    full = write_changelog(src, version, 'Release %s.' % version)
    for junk in ('build', 'ovs_rdt.egg-info'):
        shutil.rmtree(os.path.join(src, junk), ignore_errors=True)
    if quilt(src):
        orig_tarball(src, 'ovs-rdt', debian_version(version))
    # Built to upgrade from, not to ship: lintian checks the tree's package.
    return made + deb_artifacts(src, outdir, full, log, lint=False,
                                check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--outdir', default=os.path.join(REPO, 'dist'),
                        help='where the artifacts go (default: dist/)')
    parser.add_argument('--release', metavar='VERSION',
                        help='build a release of releases.txt from its '
                        'commit instead of the tree')
    parser.add_argument('--no-deb', action='store_true',
                        help='the sdist and wheel only')
    parser.add_argument('--nocheck', action='store_true',
                        help='no unit tests during the Debian build '
                        '(DEB_BUILD_OPTIONS=nocheck)')
    parser.add_argument('--mfusepy-sdist', metavar='PATH',
                        help='mfusepy\'s sdist for python3-mfusepy (default: '
                        'fetched from PyPI with pip)')
    args = parser.parse_args(argv)
    problems = missing(not args.no_deb)
    if problems:
        for line in problems:
            print('tools/build.py: %s' % line, file=sys.stderr)
        return 2
    outdir = os.path.abspath(args.outdir)
    os.makedirs(outdir, exist_ok=True)
    log = os.path.join(outdir, 'build.log')
    start = time.monotonic()
    work = tempfile.mkdtemp(prefix='ovs-rdt-build-')
    try:
        if args.release:
            made = from_release(args.release, outdir, work, log,
                                not args.no_deb)
        else:
            made = from_tree(outdir, work, log, not args.no_deb,
                             not args.nocheck, args.mfusepy_sdist and
                             os.path.abspath(args.mfusepy_sdist))
    except BuildError as exc:
        print('tools/build.py: %s\n(log: %s)' % (exc, log), file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for path in made:
        print(path)
    print('built in %.1f s' % (time.monotonic() - start), file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
