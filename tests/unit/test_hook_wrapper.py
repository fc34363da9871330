"""The installed wrapper (``libvirt_hooks/wrapper.sh``) as libvirt runs it:
interpreters, sys.path, shellcheck, and failing safe when the packages or
the interpreter are gone.

libvirt kills a running guest whose ``reconnect`` hook fails and refuses a
start whose ``prepare`` hook fails, so a wrapper left behind by an
uninstall (or a removed virtualenv) must never turn into "exit 1 for every
event": only a strict event of a VM that asks for ovs-rdt is refused (the
hook's default, ``[libvirt] on_failure = refuse``: the configuration cannot
be read without the hook).
"""
import os
import shutil
import subprocess
import sys

import pytest

from libvirt_hooks.hook import REFUSING
from ovs_rdt.cmd import install_hook as install
from tests.unit.test_domain import nova, rdt, xml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
# What libvirt passes a hook (virCommandAddEnvPassCommon).
LIBVIRT_ENV = {'LC_ALL': 'C', 'PATH': '/bin:/usr/bin'}
DEBIAN_PYTHON = '/usr/bin/python3'

PLAIN = xml()
ANNOTATED = xml(rdt('<rdt:l3 ways="3"/>'))
ZERO = xml(rdt('<rdt:l3 ways="0"/>'))
NOVA_SPEC = xml(nova({'rdt:l3_ways': '2'}))
#: A mistyped namespace: the hook refuses it, so the fallback must too.
TYPO_NS = xml('<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt"><rdt:l3 ways="3"/>'
              '</rdt:rdt>')


def wrapper(tmp_path, config='', **kwargs):
    conf = tmp_path / 'ovs-rdt.conf'
    conf.write_text(config)
    path = str(tmp_path / 'qemu.d' / '50-ovs-rdt')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    text = install.wrapper_text(str(conf), **kwargs)
    with open(path, 'w') as fh:
        fh.write(text)
    os.chmod(path, 0o755)
    return path


def settings_of(text):
    """The wrapper's python, packages and config words, as sh reads them."""
    block = text[text.index('# -- settings'):text.index('# -- end of settings')]
    res = subprocess.run(['sh', '-c', block + '\nprintf "%s\\n" "$python" '
                          '"$packages"; eval "set -- $config"; '
                          'printf "%s\\n" "$@"'],
                         capture_output=True, text=True, check=True)
    return res.stdout.splitlines()


def run(path, data, op='prepare', subop='begin', name='vm1'):
    return subprocess.run([path, name, op, subop, '-'], input=data,
                          capture_output=True, env=LIBVIRT_ENV, timeout=60)


def test_wrapper_is_the_shipped_file_with_its_settings(tmp_path):
    path = wrapper(tmp_path)
    text = open(path).read()
    assert text.startswith('#!/bin/sh\n' + install.MARKER)
    shipped = install.shipped_wrapper()
    # The settings as the shell reads them, wherever the tree is (a Debian
    # build runs this in ovs-rdt-0.3.1~dev11/, a path shlex quotes).
    assert settings_of(text) == [
        os.path.abspath(sys.executable), REPO,
        '--config-file', str(tmp_path / 'ovs-rdt.conf')]
    assert settings_of(shipped) != settings_of(text)
    # Outside the settings block, the installed file is the shipped one.

    def outside(t):
        return (t[:t.index('# -- settings')],
                t[t.index('# -- end of settings'):])
    assert outside(text) == outside(shipped)
    assert install.is_ours(path)
    res = run(path, ZERO)
    assert res.returncode == 1 and res.stdout == b''
    assert res.stderr.decode() == ("ovs-rdt: refusing to start domain 'vm1': "
                                   'fix the domain XML: '
                                   "<rdt:l3 ways>: '0' must be from 1 to 64"
                                   '\n')


def test_events_the_hook_ignores_end_in_the_shell(tmp_path):
    # An "interpreter" that records each start: only the events of
    # hook.EVENTS start it; the others exit 0 at once, their input unread.
    from libvirt_hooks.hook import EVENTS

    starts = tmp_path / 'starts'
    fake = tmp_path / 'python'
    # (-I -S -c CODE WRAPPER PACKAGES --config-file F DOMAIN OP SUBOP EXTRA)
    fake.write_text('#!/bin/sh\nshift 8\necho "$@" >> %s\ncat >/dev/null\n'
                    % starts)
    fake.chmod(0o755)
    path = wrapper(tmp_path, python=str(fake))
    ignored = [('start', 'begin'), ('stopped', 'end'), ('attach', 'begin'),
               ('prepare', 'end'), ('started', 'end'), ('release', 'begin')]
    for op, subop in ignored:
        res = run(path, ANNOTATED, op, subop)
        assert (res.returncode, res.stdout, res.stderr) == (0, b'', b'')
    assert not starts.exists(), starts.read_text()
    assert ('stopped', 'end') not in EVENTS and len(EVENTS) == 6
    for op, subop in sorted(EVENTS):
        assert run(path, ANNOTATED, op, subop).returncode == 0
    lines = starts.read_text().splitlines()
    assert lines == ['vm1 %s %s -' % event for event in sorted(EVENTS)]


@pytest.mark.skipif(not os.path.exists(DEBIAN_PYTHON),
                    reason='no %s' % DEBIAN_PYTHON)
def test_system_python_with_isolated_mode(tmp_path):
    # A system-wide pip install: Debian's python3 -I -S has no dist-packages
    # on sys.path; the wrapper adds the packages' directory.
    path = wrapper(tmp_path, python=DEBIAN_PYTHON, packages=REPO)
    res = run(path, PLAIN)
    assert (res.returncode, res.stdout, res.stderr) == (0, b'', b'')
    res = run(path, ZERO)
    assert res.returncode == 1
    assert b"<rdt:l3 ways>: '0' must be from 1 to 64" in res.stderr


def test_package_paths_do_not_shadow_the_stdlib(tmp_path):
    # A dist-packages directory holding ovs-rdt and a stray "xml" (or enum,
    # logging...): site puts it after the stdlib, so must the wrapper.
    site = tmp_path / 'dist-packages'
    (site / 'xml').mkdir(parents=True)
    (site / 'xml' / '__init__.py').write_text(
        'raise ImportError("shadowed stdlib xml")\n')
    for pkg in ('libvirt_hooks', 'ovs_rdt'):
        os.symlink(os.path.join(REPO, pkg), str(site / pkg))
    path = wrapper(tmp_path, packages=str(site))
    res = run(path, PLAIN)
    assert (res.returncode, res.stderr) == (0, b''), res.stderr
    res = run(path, ZERO)
    assert b"<rdt:l3 ways>: '0' must be from 1 to 64" in res.stderr


FAIL_SAFE = [
    # (xml, op, subop, exit status)
    (PLAIN, 'prepare', 'begin', 0),
    (PLAIN, 'started', 'begin', 0),
    (ANNOTATED, 'prepare', 'begin', 1),
    (NOVA_SPEC, 'prepare', 'begin', 1),
    (TYPO_NS, 'prepare', 'begin', 1),
    (ANNOTATED, 'started', 'begin', 1),
    (ANNOTATED, 'migrate', 'begin', 1),
    (ANNOTATED, 'restore', 'begin', 1),
    (ANNOTATED, 'start', 'begin', 0),
    (ANNOTATED, 'reconnect', 'begin', 0),     # libvirt would kill the guest
    (ANNOTATED, 'stopped', 'end', 0),
    (ANNOTATED, 'release', 'end', 0),
    (b'', 'prepare', 'begin', 0),
]
IDS = ['plain-prepare', 'plain-started', 'l3-prepare', 'nova-prepare',
       'typo-ns-prepare', 'l3-started', 'l3-migrate', 'l3-restore', 'l3-start', 'l3-reconnect',
       'l3-stopped', 'l3-release', 'empty']


def _gone(tmp_path, what, config=''):
    if what == 'package':            # pip uninstall, wrapper left behind
        return wrapper(tmp_path, config, packages=str(tmp_path / 'gone'))
    if what == 'ovs_rdt':            # half an installation
        site = tmp_path / 'half'
        site.mkdir(exist_ok=True)
        if not (site / 'libvirt_hooks').exists():
            os.symlink(os.path.join(REPO, 'libvirt_hooks'),
                       str(site / 'libvirt_hooks'))
        return wrapper(tmp_path, config, packages=str(site))
    if what in ('broken', 'old hook'):
        # Every file the wrapper looks for is there, but the hook does not
        # import (an older hook.py beside a newer guest.py), or the core
        # does not (an installation half done): handed to the fallback.
        site = tmp_path / what.replace(' ', '-')
        (site / 'ovs_rdt').mkdir(parents=True, exist_ok=True)
        (site / 'ovs_rdt' / 'guest.py').write_text('')
        hooks = site / 'libvirt_hooks'
        if not hooks.exists():
            hooks.mkdir()
            (hooks / '__init__.py').write_text('')
            with open(os.path.join(REPO, 'libvirt_hooks', 'hook.py')) as fh:
                code = fh.read()
            if what == 'old hook':
                code = code.replace('def main_once(', 'def main_twice(')
            (hooks / 'hook.py').write_text(code)
        return wrapper(tmp_path, config, packages=str(site))
    # The virtualenv (interpreter and all) was removed.
    return wrapper(tmp_path, config, python=str(tmp_path / 'venv/bin/python'),
                   packages=REPO)


@pytest.mark.parametrize('what', ['package', 'ovs_rdt', 'interpreter',
                                  'broken', 'old hook'])
@pytest.mark.parametrize('data, op, subop, status', FAIL_SAFE, ids=IDS)
def test_fails_safe_when_gone(tmp_path, what, data, op, subop, status):
    path = _gone(tmp_path, what)
    res = run(path, data, op, subop, name="vm '1'")
    assert res.returncode == status, res.stderr
    assert res.stdout == b''
    if status:
        line = res.stderr.decode()
        assert line.count('\n') == 1 and line.endswith('\n')
        # As the hook words it, what to fix first.
        assert line.startswith(
            "ovs-rdt: %s domain 'vm '1'': reinstall ovs-rdt and re-run "
            '"ovs-rdt install-hook", or remove %s: the ovs-rdt hook cannot '
            'run (' % (REFUSING[op], path)), line
        assert {'broken': "(ModuleNotFoundError: No module named "
                          "'ovs_rdt.exceptions')",
                'old hook': '(cannot import it: ImportError: cannot import '
                            "name 'main_once'"}.get(what, '') in line, line
    else:
        assert res.stderr == b''


@pytest.mark.parametrize('what', ['package', 'interpreter'])
def test_gone_applies_the_default_not_a_config_it_cannot_read(tmp_path, what):
    # The documented default (on_failure = refuse): no grep of the files.
    path = _gone(tmp_path, what, '[libvirt]\non_failure = warn\n')
    for op in ('prepare', 'migrate'):
        assert run(path, ANNOTATED, op).returncode == 1
        assert run(path, PLAIN, op).returncode == 0


def test_gone_reads_stdin_bounded(tmp_path):
    # libvirt writes the XML while the hook runs: it ignores the EPIPE of a
    # hook that stopped reading (virCommandProcessIO).
    big = xml('<a:x xmlns:a="urn:a">%s</a:x>' % ('y' * 1000000))
    for what in ('package', 'interpreter'):
        res = subprocess.run([_gone(tmp_path, what), 'vm1', 'prepare',
                              'begin', '-'], input=big, env=LIBVIRT_ENV,
                             capture_output=True, timeout=60)
        assert res.returncode == 0, res.stderr


@pytest.mark.skipif(shutil.which('shellcheck') is None and
                    os.environ.get('OVS_RDT_ALLOW_SKIP') == '1',
                    reason='no shellcheck')
def test_shellcheck_clean(tmp_path):
    """The shipped file and an installed one (odd paths quoted)."""
    shellcheck = shutil.which('shellcheck')
    assert shellcheck, 'shellcheck is missing: apt-get install shellcheck'
    odd = tmp_path / "it's \"odd\" $x"
    odd.mkdir()
    (odd / 'c.conf').write_text('')
    path = wrapper(odd, python=str(odd / 'py'))
    import libvirt_hooks
    shipped = os.path.join(os.path.dirname(libvirt_hooks.__file__),
                           'wrapper.sh')
    for script in (shipped, path):
        res = subprocess.run([shellcheck, '--shell=sh', '--severity=style',
                              script], capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr


# -- which configuration the wrapper binds -------------------------------------
WARN = '[libvirt]\non_failure = warn\n'
REFUSE = '[libvirt]\non_failure = refuse\n'


def bound_wrapper(tmp_path, files, dirs=()):
    path = str(tmp_path / 'qemu.d' / '50-ovs-rdt')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    install.install(path, [str(f) for f in files], [str(d) for d in dirs])
    return path


def test_every_config_file_and_dir_is_bound_in_order(tmp_path):
    # ZERO is refused by the input rule: on_failure decides the exit code,
    # which shows which of the files the hook read, and which won.
    first, second = tmp_path / 'a.conf', tmp_path / 'b.conf'
    first.write_text(WARN)
    second.write_text('[DEFAULT]\ndebug = false\n')
    path = bound_wrapper(tmp_path, [first, second])
    res = run(path, ZERO)
    assert res.returncode == 0, res.stderr      # a.conf was read
    assert b'runs without a cache allocation' in res.stderr
    second.write_text(REFUSE)                   # the later file wins
    assert run(path, ZERO).returncode == 1
    confd = tmp_path / 'conf.d'
    confd.mkdir()
    (confd / '10-x.conf').write_text(REFUSE)
    (confd / '20-y.conf').write_text(WARN)      # sorted: this one last
    (confd / 'ignored.txt').write_text('not ini at all')
    path = bound_wrapper(tmp_path, [first, second], [confd])
    assert run(path, ZERO).returncode == 0
    (confd / '30-z.conf').write_text(REFUSE)    # the directory is re-read
    assert run(path, ZERO).returncode == 1


MISSING = [
    # (xml, op, subop, exit status): refused where the VM asks for ovs-rdt
    # and the event may refuse; never for a VM that asks for nothing, never
    # where libvirt would kill or block a running guest.
    (ANNOTATED, 'prepare', 'begin', 1),
    (NOVA_SPEC, 'prepare', 'begin', 1),
    (ANNOTATED, 'migrate', 'begin', 1),
    (PLAIN, 'prepare', 'begin', 0),
    (PLAIN, 'started', 'begin', 0),
    (ANNOTATED, 'reconnect', 'begin', 0),
    (ANNOTATED, 'stopped', 'end', 0),
    (ANNOTATED, 'release', 'end', 0),
]


@pytest.mark.parametrize('missing', ['file', 'dir'])
@pytest.mark.parametrize('data, op, subop, status', MISSING)
def test_a_missing_config_is_refused_not_defaulted(tmp_path, missing, data,
                                                   op, subop, status):
    # Before: the hook ran on the defaults when its file was gone, even
    # with on_failure = warn in it (which then refused nothing).
    conf = tmp_path / 'ovs-rdt.conf'
    conf.write_text(WARN)
    confd = tmp_path / 'conf.d'
    confd.mkdir()
    path = bound_wrapper(tmp_path, [conf], [confd])
    gone = conf if missing == 'file' else confd
    os.rename(str(gone), str(gone) + '.moved')
    res = run(path, data, op, subop)
    assert (res.returncode, res.stdout) == (status, b''), res.stderr
    if status:
        what = {'prepare': 'refusing to start',
                'migrate': 'refusing the incoming migration of'}[op]
        assert res.stderr.decode() == (
            "ovs-rdt: %s domain 'vm1': fix the ovs-rdt configuration: config "
            '%s %s does not exist\n'
            % (what, missing if missing == 'file' else 'directory', gone))
    else:
        assert res.stderr == b''


def test_install_hook_binds_what_the_cli_read(tmp_path, capsys):
    from ovs_rdt.cmd import main

    first, second = tmp_path / 'a.conf', tmp_path / 'b.conf'
    first.write_text(WARN)
    second.write_text('[DEFAULT]\n')
    confd = tmp_path / 'conf.d'
    confd.mkdir()
    hooks = tmp_path / 'hooks'
    assert main.main(['--config-file', str(first), 'install-hook',
                      '--hooks-dir', str(hooks), '--config-file', str(second),
                      '--config-dir', str(confd)]) == 0
    path = str(hooks / 'qemu.d' / '50-ovs-rdt')
    options = ['--config-file', str(first), '--config-file', str(second),
               '--config-dir', str(confd)]
    assert '# config: %s\n' % ' '.join(options) in open(path).read()
    assert 'installed %s (config %s' % (path, ' '.join(options)) in \
        capsys.readouterr().out
    assert run(path, ZERO).returncode == 0     # a.conf's on_failure = warn
    (confd / 'x.conf').write_text(REFUSE)
    assert run(path, ZERO).returncode == 1
    # A missing one is refused by install-hook itself, nothing written.
    os.unlink(path)
    assert main.main(['install-hook', '--hooks-dir', str(hooks),
                      '--config-file', str(tmp_path / 'nope.conf')]) == 2
    assert 'config file %s does not exist' % (tmp_path / 'nope.conf') in \
        capsys.readouterr().err
    assert not os.path.exists(path)


def test_a_config_path_with_a_newline_is_bound_as_it_is(tmp_path):
    odd = tmp_path / 'a\nb'
    odd.mkdir()
    conf = odd / 'ovs-rdt.conf'
    conf.write_text(WARN)
    path = bound_wrapper(tmp_path, [conf])
    res = run(path, ZERO)
    assert res.returncode == 0, res.stderr      # its on_failure = warn
    assert b'runs without a cache allocation' in res.stderr
