"""pbr builds ovs-rdt: metadata in setup.cfg, the version from git tags.

Where the checkout has no release tag (a clone made without tags), pbr
would say 0.0.1.devN, older than every release: the version is then counted
from the newest release of releases.txt that HEAD contains, as pbr counts
from a tag (its Sem-Ver: commit lines, commits since), and handed to pbr
as PBR_VERSION.

A ``git archive`` export has no git at all: .git_archival.txt (filled in
by git, export-subst in .gitattributes) names its commit and tags, and a
release's (a release tag, or a commit of releases.txt) is its version;
any other commit's export is refused with what to do (PBR_VERSION).
"""
import os
import subprocess

import setuptools

HERE = os.path.dirname(os.path.abspath(__file__))


def git(*args):
    return subprocess.run(('git',) + args, cwd=HERE, capture_output=True,
                          text=True, check=True).stdout


def releases():
    """(version, commit) from releases.txt, oldest first."""
    with open(os.path.join(HERE, 'releases.txt'), encoding='utf-8') as fh:
        return [tuple(line.split()[:2]) for line in fh
                if line.strip() and not line.startswith('#')]


def untagged_version():
    """The version pbr would give if the release tags were there, or None
    (no git, a release tag in reach, or no release in HEAD's history).
    """
    from pbr.version import SemanticVersion

    if not os.path.exists(os.path.join(HERE, '.git')):
        return None
    try:
        tags = git('tag', '--merged', 'HEAD').split()
        log = git('log', '--pretty=%H').split()
    except (OSError, subprocess.CalledProcessError):
        return None
    for tag in tags:
        try:
            SemanticVersion.from_pip_string(tag)
            return None             # pbr has a release tag: its own rules
        except ValueError:
            continue
    for version, commit in reversed(releases()):
        full = [sha for sha in log if sha.startswith(commit)]
        if not full:
            continue
        distance = log.index(full[0])
        base = SemanticVersion.from_pip_string(version)
        if distance == 0:
            return base.release_string()
        symbols = set()
        for line in git('log', '--pretty=%B', full[0] + '..HEAD').lower() \
                .splitlines():
            if line.strip().startswith('sem-ver:'):
                symbols |= {s.strip() for s in line.split(':', 1)[1]
                            .split(',')}
        bump = {'major': 'api-break' in symbols,
                'minor': bool(symbols & {'feature', 'deprecation'})}
        return base.increment(**bump).to_dev(distance).release_string()
    return None


def archived_version(text, known):
    """The release a ``git archive`` export is of, from its
    .git_archival.txt ``text``: a release tag among its ref names, or its
    commit in ``known`` ((version, commit) pairs); None if neither (or if
    git did not fill the file in: not an export).
    """
    fields = dict(line.split(':', 1) for line in text.splitlines()
                  if ':' in line)
    node = fields.get('node', '').strip()
    if not node or node.startswith('$Format'):
        return None
    for ref in fields.get('ref-names', '').split(','):
        ref = ref.strip()
        if ref.startswith('tag: ') and \
                ref[5:].replace('.', '').isdigit() and ref.count('.') == 2:
            return ref[5:]
    for version, commit in known:
        if node.startswith(commit) or commit.startswith(node):
            return version
    return None


def export_version():
    """The version of a ``git archive`` export (see the module); SystemExit
    with what to do for a commit that is not a release; None if this is
    not an export (a checkout, an sdist).
    """
    path = os.path.join(HERE, '.git_archival.txt')
    if os.path.exists(os.path.join(HERE, '.git')) or \
            os.path.exists(os.path.join(HERE, 'PKG-INFO')) or \
            not os.path.exists(path):
        return None
    with open(path, encoding='utf-8') as fh:
        text = fh.read()
    found = archived_version(text, releases())
    if found is None and 'node: $Format' not in text:
        raise SystemExit(
            'ovs-rdt: this git archive export is of commit %s, not a '
            'release: set PBR_VERSION to its version (e.g. '
            'PBR_VERSION=0.3.1.dev0), or export a release tag'
            % dict(line.split(':', 1) for line in text.splitlines()
                   if ':' in line).get('node', '?').strip())
    return found


def main():
    if not (os.environ.get('PBR_VERSION') or
            os.environ.get('OSLO_PACKAGE_VERSION')):
        found = export_version()
        if not found:
            try:
                found = untagged_version()
            except ImportError:     # pbr not there yet (setup_requires)
                found = None
        if found:
            os.environ['PBR_VERSION'] = found
    setuptools.setup(setup_requires=['pbr>=2.0.0'], pbr=True)


if __name__ == '__main__':      # as pip, build and pybuild run it
    main()
