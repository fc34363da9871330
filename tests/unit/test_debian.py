"""debian/: what the Debian packages promise, read from the files.

The packages are built, installed, upgraded and purged for real in
tests/functional/test_package.py; these are the rules that need no build.
"""
from __future__ import annotations

import os
import re
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
#: requirements.txt's names -> Debian's package (and the epoch of its
#: version).
DEBIAN_NAME = {
    'pbr': ('python3-pbr', ''),
    'oslo.config': ('python3-oslo.config', '1:'),
    'ovsdbapp': ('python3-ovsdbapp', ''),
    'prometheus_client': ('python3-prometheus-client', ''),
    'PyYAML': ('python3-yaml', ''),
    'bcrypt': ('python3-bcrypt', ''),
    'libvirt-python': ('python3-libvirt', ''),
}


def read(*path: str) -> str:
    with open(os.path.join(REPO, *path), encoding='utf-8') as fh:
        return fh.read()


def paragraphs() -> list[dict[str, str]]:
    """debian/control as fields per paragraph (comments dropped)."""
    text = '\n'.join(line for line in read('debian', 'control').splitlines()
                     if not line.startswith('#'))
    out = []
    for block in re.split(r'\n\s*\n', text.strip()):
        fields: dict[str, str] = {}
        key = ''
        for line in block.splitlines():
            if line[:1] in (' ', '\t'):
                fields[key] += '\n' + line.strip()
            else:
                key, _, value = line.partition(':')
                fields[key] = value.strip()
        out.append(fields)
    return out


def relations(value: str) -> dict[str, list[str]]:
    """``Depends:`` -> {package: [version constraints]}."""
    out: dict[str, list[str]] = {}
    for item in value.replace('\n', ' ').split(','):
        item = re.sub(r'<[^>]*>', '', item).strip()   # build profiles
        if not item or item.startswith('${'):
            continue
        m = re.match(r'^(\S+)\s*(?:\(([^)]*)\))?$', item)
        assert m, item
        out.setdefault(m.group(1), [])
        if m.group(2):
            out[m.group(1)].append(' '.join(m.group(2).split()))
    return out


def package(name: str) -> dict[str, str]:
    found = [p for p in paragraphs() if p.get('Package') == name]
    assert len(found) == 1, name
    return found[0]


def requirements() -> dict[str, str]:
    out = {}
    for line in read('requirements.txt').splitlines():
        line = line.split('#')[0].strip()
        if line:
            name, version = line.split('>=')
            out[name.strip()] = version.strip()
    return out


def test_library_depends_on_requirements_with_their_versions() -> None:
    """Every requirements.txt line is a Depends of python3-ovs-rdt with the
    same lowest version (dh_python3 alone leaves the versions out).
    """
    depends = relations(package('python3-ovs-rdt')['Depends'])
    reqs = requirements()
    assert set(reqs) == set(DEBIAN_NAME), 'a requirement without a ' \
        'Debian name in this test: %s' % sorted(set(reqs) - set(DEBIAN_NAME))
    for name, version in reqs.items():
        deb, epoch = DEBIAN_NAME[name]
        assert depends.get(deb) == ['>= %s%s' % (epoch, version)], (name,
                                                                    depends)


def test_build_depends_cover_what_help_imports() -> None:
    """help2man runs every command's --help at build time: what they
    import is built against (a clean chroot has nothing else), with the
    versions the library depends on.
    """
    build = relations(paragraphs()[0]['Build-Depends'])
    runtime = relations(package('python3-ovs-rdt')['Depends'])
    for deb, versions in runtime.items():
        assert build.get(deb) == versions, deb
    assert 'help2man' in build


def test_nova_plugin_states_the_nova_it_is_tested_with() -> None:
    nova = re.search(r'^nova==(\d+)\.', read('nova-requirements.txt'),
                     re.M).group(1)
    depends = relations(package('python3-ovs-rdt-nova')['Depends'])
    assert sorted(depends['python3-nova']) == sorted([
        '>= 2:%s.0.0~' % nova, '<< 2:%d~' % (int(nova) + 1)])
    assert 'Nova %s' % nova in package('python3-ovs-rdt-nova')['Description']


def test_split_packages() -> None:
    """The node package has the agent, hook and daemons' recommends; the
    Nova plugin and the library pull no daemon; the emulator brings
    mfusepy and FUSE.
    """
    node = package('ovs-rdt')
    assert 'libvirt-daemon-system' in relations(node['Recommends'])
    for name in ('python3-ovs-rdt', 'python3-ovs-rdt-nova'):
        fields = package(name)
        assert 'Recommends' not in fields, name
    emulator = relations(package('ovs-rdt-emulator')['Depends'])
    assert emulator['python3-mfusepy'] == ['>= 3.0.0']
    assert 'fuse3' in emulator
    installs = {name: read('debian', name + '.install').split()
                for name in ('python3-ovs-rdt', 'ovs-rdt',
                             'python3-ovs-rdt-nova', 'ovs-rdt-emulator')}
    assert any(p.endswith('/nova_plugin')
               for p in installs['python3-ovs-rdt-nova'])
    assert not any('nova_plugin' in p for p in installs['python3-ovs-rdt'])
    assert 'usr/libexec/ovs-rdt/qemu-hook' in installs['ovs-rdt']


def test_a_debian_revision_and_unit_tests_at_build() -> None:
    assert read('debian', 'source', 'format').strip() == '3.0 (quilt)'
    rules = read('debian', 'rules')
    assert 'lib/systemd/system' not in rules     # dh_installsystemd's place
    test = rules[rules.index('override_dh_auto_test:'):].split('\n\n')[0]
    assert 'pytest' in test and 'tests/unit' in test


def test_the_hook_is_a_link_not_a_conffile() -> None:
    links = read('debian', 'ovs-rdt.links').split()
    assert links == ['usr/libexec/ovs-rdt/qemu-hook',
                     'etc/libvirt/hooks/qemu.d/50-ovs-rdt']
    assert not os.path.exists(os.path.join(REPO, 'debian', 'ovs-rdt.preinst'))


def test_bindep_profiles() -> None:
    """The build profile has what tools/build.py runs; the demo profile
    holds no build or test tool (tools/demo.sh installs only it).
    """
    profiles: dict[str, set[str]] = {}
    for line in read('bindep.txt').splitlines():
        m = re.match(r'^(\S+) \[platform:dpkg([^\]]*)\]', line)
        if m:
            for profile in m.group(2).split() or ['(none)']:
                profiles.setdefault(profile, set()).add(m.group(1))
    assert {'python3-build', 'debhelper', 'dh-python', 'lintian',
            'python3-pytest', 'python3-hypothesis',
            'pybuild-plugin-pyproject'} <= profiles['build']
    demo = profiles['demo']
    assert {'fuse3', 'openvswitch-switch', 'libvirt-daemon-system',
            'qemu-system-x86', 'python3-venv'} <= demo
    assert not demo & {'debhelper', 'lintian', 'help2man', 'prometheus',
                       'libvirt-dev', 'gcc', 'shellcheck'}


def test_pyproject_names_the_build_backend() -> None:
    text = read('pyproject.toml')
    assert '[build-system]' in text
    assert re.search(r'requires = \[.*"pbr>=', text)
    assert 'build-backend = "setuptools.build_meta"' in text


def _manpages(tmp_path, body: str) -> subprocess.CompletedProcess:
    bindir = tmp_path / 'bin'
    bindir.mkdir(exist_ok=True)
    for cmd in ('ovs-rdt', 'ovs-rdt-agent'):
        path = bindir / cmd
        path.write_text('#!/bin/sh\n' + body)
        path.chmod(0o755)
    return subprocess.run([os.path.join(REPO, 'debian', 'manpages.sh'),
                           str(bindir), str(tmp_path), str(tmp_path / 'man'),
                           '9.9'], capture_output=True, text=True)


def test_a_traceback_fails_the_build_not_becomes_the_manual(tmp_path) -> None:
    """A module missing at build time made ``ovs-rdt-agent --help`` a
    traceback on standard error, which help2man --no-discard-stderr wrote
    as the manual page, exit 0 (issue 38 item 2).
    """
    res = _manpages(tmp_path, 'echo "Traceback (most recent call last):" >&2\n'
                    'echo "ModuleNotFoundError: No module named libvirt" >&2\n'
                    'exit 1\n')
    assert res.returncode != 0
    assert not (tmp_path / 'man' / 'ovs-rdt.1').exists()
    # Printed on standard output with exit 0, it is refused too.
    res = _manpages(tmp_path, 'echo "Traceback (most recent call last):"\n')
    assert res.returncode != 0 and 'is an error, not a manual' in res.stderr
    res = _manpages(tmp_path, 'case "$1" in --version) echo "x 9.9";; '
                    '*) echo "usage: x [--config-file PATH]";; esac\n')
    assert res.returncode == 0, res.stderr
    page = (tmp_path / 'man' / 'ovs-rdt-agent.1').read_text()
    assert '\\-\\-config\\-file' in page


def _script(tmp_path, name: str, *args: str) -> subprocess.CompletedProcess:
    """debian/ovs-rdt.NAME run as dpkg --root runs it: below $DPKG_ROOT
    (``tmp_path/root``), debhelper's snippets left out.
    """
    path = tmp_path / name
    path.write_text(read('debian', 'ovs-rdt.' + name).replace(
        '#DEBHELPER#', ':'))
    env = dict(os.environ, DPKG_ROOT=str(tmp_path / 'root'))
    res = subprocess.run(['sh', str(path), *args], capture_output=True,
                         text=True, env=env)
    assert res.returncode == 0, res.stderr
    return res


def test_purge_removes_only_the_configuration_the_package_made(
        tmp_path) -> None:
    """postinst makes ovs-rdt.conf when it is missing and leaves one that is
    there; purge removes it only if postinst made it (issue 47: it removed
    an administrator's own).  0.3.0 kept no record: an upgrade takes the
    untouched template as made, an edited file as the administrator's.
    """
    root = tmp_path / 'root'
    conf = root / 'etc' / 'ovs-rdt' / 'ovs-rdt.conf'
    template = root / 'usr' / 'share' / 'ovs-rdt' / 'ovs-rdt.conf'
    template.parent.mkdir(parents=True)
    template.write_text(read('debian', 'ovs-rdt.conf'))
    system = ['etc', 'var', 'var/lib', 'run']       # a node has those
    for name in system:
        (root / name).mkdir(exist_ok=True)

    def tree() -> list[str]:
        """What the package's scripts left."""
        return sorted(path for path in (
            os.path.relpath(os.path.join(d, n), root)
            for d, dirs, files in os.walk(root) for n in dirs + files)
            if path not in system and not path.startswith('usr'))

    # Installed on a node without it: made, and purged.
    _script(tmp_path, 'postinst', 'configure', '')
    assert conf.read_text() == template.read_text()
    _script(tmp_path, 'postrm', 'purge')
    assert tree() == []
    # The administrator's, there before the package: kept, purged or not.
    conf.parent.mkdir()
    conf.write_text('[allocation]\npools = hp\n')
    _script(tmp_path, 'postinst', 'configure', '')
    _script(tmp_path, 'postrm', 'purge')
    assert conf.read_text() == '[allocation]\npools = hp\n'
    # An upgrade from 0.3.0, which made it and kept no record: the
    # template untouched is the package's; once edited, the administrator's.
    conf.write_text(template.read_text())
    _script(tmp_path, 'postinst', 'configure', '0.3.0-1')
    _script(tmp_path, 'postrm', 'purge')
    assert tree() == []
    conf.parent.mkdir()
    conf.write_text(template.read_text() + '[allocation]\npools = hp\n')
    _script(tmp_path, 'postinst', 'configure', '0.3.0-1')
    _script(tmp_path, 'postrm', 'purge')
    assert tree() == ['etc/ovs-rdt', 'etc/ovs-rdt/ovs-rdt.conf']
