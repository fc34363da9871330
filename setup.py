"""pbr builds ovs-rdt: metadata in setup.cfg, the version from git tags.

Where the checkout has no release tag (a clone made without tags), pbr
would say 0.0.1.devN, older than every release: the version is then counted
from the newest release of releases.txt that HEAD contains, as pbr counts
from a tag (its Sem-Ver: commit lines, commits since), and handed to pbr
as PBR_VERSION.
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


def main():
    if not (os.environ.get('PBR_VERSION') or
            os.environ.get('OSLO_PACKAGE_VERSION')):
        try:
            found = untagged_version()
        except ImportError:     # pbr not there yet (setup_requires gets it)
            found = None
        if found:
            os.environ['PBR_VERSION'] = found
    setuptools.setup(setup_requires=['pbr>=2.0.0'], pbr=True)


if __name__ == '__main__':      # as pip, build and pybuild run it
    main()
