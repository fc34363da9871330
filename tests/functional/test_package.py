"""The release artifacts, as an operator gets them from tools/build.py.

* the sdist holds what the Debian build and a reader need; the wheel
  installs into a new virtualenv with the ``[emulator]`` extra;
* the .debs (the node's ovs-rdt, python3-ovs-rdt, python3-ovs-rdt-nova,
  ovs-rdt-emulator and python3-mfusepy) put every file at Debian's paths,
  have no conffile, and lintian has nothing to say (info tags aside, each
  explained in debian/*lintian-overrides);
* installed with ``dpkg -i`` on this machine (in a throw-away overlay of
  its root filesystem: nothing reaches the host), the installed files alone
  run ``ovs-rdt apply``/``status``, the agent as its systemd unit starts it
  (OvS PMD threads placed, metrics over TLS with basic auth) and the libvirt
  hook as libvirtd runs it; ``dpkg --purge`` then leaves nothing behind
  but another agent's files in /run/ovs-rdt;
* the upgrade from 0.2.0's package and back, guests running, unattended.

test_package_host.py installs, removes, reinstalls, upgrades and purges
them on the host itself.
"""
from __future__ import annotations

import base64
import configparser
import glob
import http.client
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import tarfile
import tempfile
import uuid as uuidlib
import zipfile
from typing import Any, Iterator

import pytest

from ovs_rdt.core.model import PMD_GROUP
from ovs_rdt.resctrl import Resctrl
from tests.functional.fixtures.artifacts import Artifacts, NODE_PACKAGES
from tests.functional.fixtures.emulator import EmulatorFixture
from tests.functional.fixtures import host
from tests.functional.fixtures.overlay import OverlayRoot
from tests.functional.fixtures.ovs import OvsTestbed, wait_for
from tests import tls

CONF = '/etc/ovs-rdt/ovs-rdt.conf'
HOOK = '/etc/libvirt/hooks/qemu.d/50-ovs-rdt'
PROGRAM = '/usr/libexec/ovs-rdt/qemu-hook'
MAN_DB_SWITCH = '/var/lib/man-db/auto-update'
#: What differs after the purge and is not the package's: the man-db switch
#: this test turns off, and libuuid's clock, which OvS's Python IDL (in the
#: agent) moves with every uuid1() (and creates on a machine where nothing
#: has called it yet).
OTHERS = ['-' + MAN_DB_SWITCH, '~/var/lib/libuuid/clock.txt',
          '+/var/lib/libuuid/clock.txt']
#: Where Debian wants each part, per binary package (dpkg -c must list
#: them all).
DEBIAN_PATHS = {
    'ovs-rdt': (
        '/usr/bin/ovs-rdt', '/usr/bin/ovs-rdt-agent', '/usr/bin/ovs-rdt-hook',
        HOOK, PROGRAM, '/usr/share/ovs-rdt/ovs-rdt.conf',
        '/usr/share/ovs-rdt/grafana/ovs-rdt-dashboard.json',
        '/usr/share/doc/ovs-rdt/examples/ovs-rdt.conf.sample',
        '/usr/share/doc/ovs-rdt/README.md.gz',
        '/usr/share/doc/ovs-rdt/README.Debian',
        '/usr/share/doc/ovs-rdt/RELEASENOTES.md.gz',  # over 4 KiB: dh_compress
        '/usr/share/doc/ovs-rdt/metrics.md.gz',
        '/usr/share/doc/ovs-rdt/try-it.md.gz',
        '/usr/share/doc/ovs-rdt/copyright',
        '/usr/share/man/man1/ovs-rdt.1.gz',
        '/usr/share/man/man1/ovs-rdt-agent.1.gz',
        '/usr/share/man/man1/ovs-rdt-hook.1.gz'),
    'python3-ovs-rdt': (
        '/usr/lib/python3/dist-packages/ovs_rdt/__init__.py',
        '/usr/lib/python3/dist-packages/ovs_rdt/agent/service.py',
        '/usr/lib/python3/dist-packages/libvirt_hooks/hook.py',
        '/usr/share/doc/python3-ovs-rdt/copyright'),
    'python3-ovs-rdt-nova': (
        '/usr/lib/python3/dist-packages/nova_plugin/filters.py',
        '/usr/lib/python3/dist-packages/nova_plugin/validators.py'),
    'ovs-rdt-emulator': (
        '/usr/lib/python3/dist-packages/ovs_rdt/emulator/fs.py',),
    'python3-mfusepy': ('/usr/lib/python3/dist-packages/mfusepy.py',
                        '/usr/share/doc/python3-mfusepy/copyright'),
}
#: Each package's modules that no other package has.
NOT_IN = {'python3-ovs-rdt': ('nova_plugin/', 'ovs_rdt/emulator/'),
          'ovs-rdt': ('dist-packages/',)}


def entry_points(deb: str) -> dict[str, dict[str, str]]:
    """The entry points of every egg-info in ``deb``: distribution ->
    {group name: module}.
    """
    out: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(['dpkg-deb', '-x', deb, tmp], check=True)
        for path in glob.glob(os.path.join(
                tmp, 'usr/lib/python3/dist-packages/*.egg-info')):
            points = configparser.ConfigParser(delimiters=('=',))
            points.optionxform = str          # type: ignore[assignment]
            points.read(os.path.join(path, 'entry_points.txt'))
            out[os.path.basename(path).split('-')[0]] = {
                '%s %s' % (group, name): value.split(':')[0]
                for group in points.sections()
                for name, value in points.items(group)}
    return out


def deb_paths(deb: str) -> set[str]:
    listing = subprocess.run(['dpkg-deb', '-c', deb], capture_output=True,
                             text=True, check=True).stdout
    return {line.split()[5].lstrip('.') for line in listing.splitlines()}


#: What the package's postinst says on a first install without systemd.
NO_SYSTEMD = [
    'ovs-rdt: systemd is not running, so two steps are left to do by hand:',
    'ovs-rdt:  - the libvirt hook is installed (%s),' % HOOK,
    'ovs-rdt:    but libvirtd runs it only once reloaded or restarted:',
    'ovs-rdt:    kill -HUP $(cat /run/libvirtd.pid)    (guests keep running)',
    'ovs-rdt:  - ovs-rdt-agent is not running; start it:',
    'ovs-rdt:    ovs-rdt-agent --config-file %s' % CONF,
    'ovs-rdt: (/usr/share/doc/ovs-rdt/try-it.md.gz, "Without systemd")']


#: Run by the installed python3: every entry point of an installed ovs-rdt
#: distribution whose module is there; exit 1 naming those that are not.
ENTRY_POINTS_CHECK = '''
import importlib.metadata as md, importlib.util as iu, sys
found = []
for dist in md.distributions():
    if dist.metadata['Name'].startswith('ovs-rdt'):
        for point in dist.entry_points:
            try:
                ok = iu.find_spec(point.module) is not None
            except ImportError:
                ok = False
            found.append((ok, point.group, point.name, point.module))
print(found)
sys.exit(0 if found and all(f[0] for f in found) else 1)
'''


def test_sdist_and_wheel(artifacts: Artifacts) -> None:
    with tarfile.open(artifacts.sdist) as tar:
        names = {n.split('/', 1)[1] for n in tar.getnames() if '/' in n}
    for needed in ('setup.py', 'setup.cfg', 'releases.txt', 'RELEASENOTES.md',
                   'requirements.txt', 'debian/rules', 'debian/control',
                   'etc/systemd/ovs-rdt-agent.service', 'doc/metrics.md',
                   'etc/grafana/ovs-rdt-dashboard.json', 'PKG-INFO',
                   'pyproject.toml', 'packaging/mfusepy/debian/control',
                   'packaging/mfusepy/sdist.txt', 'tests/unit/test_conf.py'):
        assert needed in names, needed
    with zipfile.ZipFile(artifacts.wheel) as whl:
        names = set(whl.namelist())
        meta = whl.read('ovs_rdt-%s.dist-info/METADATA'
                        % artifacts.version).decode()
    assert 'Version: %s\n' % artifacts.version in meta
    assert "Provides-Extra: emulator" in meta
    for needed in ('ovs_rdt/agent/webconfig.py', 'libvirt_hooks/hook.py',
                   'nova_plugin/filters.py', 'ovs_rdt/emulator/cli.py',
                   'ovs_rdt-%s.data/data/share/ovs-rdt/grafana/'
                   'ovs-rdt-dashboard.json' % artifacts.version):
        assert needed in names, needed


def test_wheel_installs_in_a_new_virtualenv(artifacts: Artifacts,
                                            tmp_path: Any,
                                            monkeypatch: Any) -> None:
    venv = str(tmp_path / 'venv')
    subprocess.run([sys.executable, '-m', 'venv', venv], check=True,
                   timeout=120)
    # The new virtualenv alone (a PYTHONPATH naming a checkout would have
    # pip find ovs-rdt "already installed" there).
    monkeypatch.delenv('PYTHONPATH', raising=False)
    pip = subprocess.run(
        [os.path.join(venv, 'bin', 'pip'), 'install', '-q',
         '--disable-pip-version-check', artifacts.wheel + '[emulator]'],
        capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stderr[-2000:]
    out = subprocess.run([os.path.join(venv, 'bin', 'ovs-rdt'), '--version'],
                         capture_output=True, text=True, check=True).stdout
    assert out == 'ovs-rdt %s\n' % artifacts.version
    # The extra: the emulator's command loads (mfusepy is there).
    help_ = subprocess.run([os.path.join(venv, 'bin', 'ovs-rdt'), 'emulate',
                            '--help'], capture_output=True, text=True)
    assert help_.returncode == 0 and '--profile' in help_.stdout, help_.stderr
    for cmd in ('ovs-rdt-agent', 'ovs-rdt-hook'):
        assert os.access(os.path.join(venv, 'bin', cmd), os.X_OK)
    assert os.path.exists(os.path.join(
        venv, 'share', 'ovs-rdt', 'systemd', 'ovs-rdt-agent.service'))


def test_deb_paths_and_lintian(artifacts: Artifacts) -> None:
    for name, wanted in DEBIAN_PATHS.items():
        deb = artifacts.package(name)
        paths = deb_paths(deb)
        missing = [p for p in wanted if p not in paths]
        assert not missing, (name, missing)
        assert not [p for p in paths if p.startswith('/usr/local')]
        assert not [p for p in paths if p.startswith('/etc/') and
                    p.rstrip('/') not in ('/etc', '/etc/libvirt',
                                          '/etc/libvirt/hooks',
                                          '/etc/libvirt/hooks/qemu.d', HOOK)
                    ], name
        assert not [p for p in paths for part in NOT_IN.get(name, ())
                    if part in p], name
        # No conffile: nothing an upgrade could stop to ask about.
        info = subprocess.run(['dpkg-deb', '-I', deb, 'conffiles'],
                              capture_output=True, text=True)
        assert info.returncode != 0 and 'no control component' in info.stderr, (
            name, info.stdout)
    # Each entry point in the package that ships its module: a node
    # without python3-ovs-rdt-nova lists none of the Nova plugin's.
    library = entry_points(artifacts.package('python3-ovs-rdt'))
    assert list(library) == ['ovs_rdt'], library
    assert library['ovs_rdt']['oslo.config.opts ovs_rdt'] == 'ovs_rdt.opts'
    assert not [m for m in library['ovs_rdt'].values()
                if not m.startswith(('ovs_rdt', 'libvirt_hooks'))], library
    nova = entry_points(artifacts.package('python3-ovs-rdt-nova'))
    assert list(nova) == ['ovs_rdt_nova'], nova
    assert nova['ovs_rdt_nova']['nova.api.extra_spec_validators rdt'] == \
        'nova_plugin.validators', nova
    assert all(m.startswith('nova_plugin')
               for m in nova['ovs_rdt_nova'].values()), nova
    version = subprocess.run(['dpkg-deb', '-f', artifacts.deb, 'Version'],
                             capture_output=True, text=True,
                             check=True).stdout.strip()
    assert version.rsplit('-', 1)[0].replace('~', '.') == artifacts.version
    assert version.endswith('-1')           # a Debian revision (quilt)
    assert len(artifacts.lintian_reports) == 2   # ovs-rdt's, mfusepy's
    # Built with the unit tests, in Debian's build directory.
    with open(os.path.join(artifacts.dir, 'build.log'),
              encoding='utf-8') as fh:
        log = fh.read()
    assert re.search(r'^\d+ passed', log, re.M), log[-2000:]
    for path in artifacts.lintian_reports:
        with open(path, encoding='utf-8') as fh:
            report = fh.read()
        assert not [line for line in report.splitlines()
                    if line[:2] in ('E:', 'W:')], report


# -- the package on this machine ------------------------------------------------
@pytest.fixture
def node() -> Iterator[dict[str, Any]]:
    """An emulator and a private OvS below /dev/shm (seen from the overlay)
    and the overlay root; all gone afterwards.
    """
    if os.geteuid() != 0 or not shutil.which('unshare') or \
            not shutil.which('nsenter'):
        pytest.fail('installing the package needs root, unshare and nsenter '
                    '(util-linux)', pytrace=False)
    workdir = tempfile.mkdtemp(prefix='ovsrdt-deb-', dir='/dev/shm')
    os.chmod(workdir, 0o755)
    emu = EmulatorFixture(rootdir=workdir)
    ovs = OvsTestbed(os.path.join(workdir, 'ovs'))
    root = OverlayRoot(os.path.join(workdir, 'overlay'))
    try:
        emu.setUp()
        os.makedirs(ovs.dir)
        ovs.start()
        pki = tls.Pki(os.path.join(workdir, 'pki'))
        root.start()
        yield {'dir': workdir, 'emu': emu, 'ovs': ovs, 'root': root,
               'pki': pki}
    finally:
        root.stop()
        ovs.stop()
        emu.cleanUp()
        shutil.rmtree(workdir, ignore_errors=True)


def configure(root: OverlayRoot, emu: EmulatorFixture, ovs: OvsTestbed,
              extra: str = '') -> None:
    """The one file an operator edits: the conffile, as shipped plus our
    lines (repeated sections merge, as with oslo.config).
    """
    text = root.read(CONF) + (
        '\n[resctrl]\nroot = %s\nsysfs_cpu_root = %s\n'
        '[allocation]\npools = hp\n[pool:hp]\nl3_ways = 3\n'
        '[ovs]\nconnection = %s\nvswitchd_pidfile = %s\nrescan_interval = 1\n'
        % (emu.root, emu.sysfs, ovs.connection, ovs.vswitchd_pidfile)) + extra
    root.write(CONF, text)


def unit_path(root: OverlayRoot) -> str:
    """Where dh_installsystemd put the unit (this Debian's place)."""
    found = [p for p in root.run('dpkg', '-L', 'ovs-rdt').stdout.split()
             if p.endswith('/ovs-rdt-agent.service')]
    assert len(found) == 1, found
    return found[0]


def exec_start(root: OverlayRoot) -> list[str]:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string(root.read(unit_path(root)))
    return shlex.split(unit['Service']['ExecStart'])


def scrape(port: int, pki: tls.Pki) -> str:
    ctx = ssl.create_default_context(cafile=pki.path('ca.crt'))
    ctx.load_cert_chain(pki.path('client.crt'), pki.path('client.key'))
    conn = http.client.HTTPSConnection('127.0.0.1', port, context=ctx,
                                       timeout=10)
    auth = base64.b64encode(('%s:%s' % (tls.USER, tls.PASSWORD)).encode())
    try:
        conn.request('GET', '/metrics',
                     headers={'Authorization': 'Basic ' + auth.decode()})
        resp = conn.getresponse()
        assert resp.status == 200, resp.status
        return resp.read().decode()
    finally:
        conn.close()


def domain_xml(name: str, uuid: str, ways: int) -> str:
    return ("<domain type='kvm'><name>%s</name><uuid>%s</uuid><metadata>"
            "<rdt:rdt xmlns:rdt='urn:ovs-rdt:libvirt:1'><rdt:l3 ways='%d'/>"
            "</rdt:rdt></metadata><vcpu>1</vcpu></domain>" % (name, uuid, ways))


def test_deb_installs_runs_and_purges_clean(artifacts: Artifacts,
                                            node: dict[str, Any]) -> None:
    from tests.functional.test_metrics import free_port

    root, emu, ovs, pki = node['root'], node['emu'], node['ovs'], node['pki']
    rc = Resctrl(emu.root, emu.sysfs)
    # man-db's trigger rebuilds every manual page index (10 s): off.
    root.run('rm', '-f', MAN_DB_SWITCH)
    installed = root.run('dpkg', '-i',
                         *[root.put(d) for d in artifacts.node_debs], input='')
    # PID 1 is not systemd (the overlay's /run has no /run/systemd/system):
    # nothing reloaded libvirtd or started the agent, and the package says
    # so, after deb-systemd-helper's "Created symlink ..." (only man-db's
    # trigger, run later by dpkg, may follow).
    said = installed.stderr.splitlines()
    assert NO_SYSTEMD[0] in said, installed.stdout + installed.stderr
    at = said.index(NO_SYSTEMD[0])
    assert said[at:at + len(NO_SYSTEMD)] == NO_SYSTEMD, installed.stderr
    assert [ln for ln in said[:at] if ln.startswith('Created symlink')]
    for name in NODE_PACKAGES:
        for path in DEBIAN_PATHS[name]:
            root.run('test', '-e', path)
    # The installed files only: Debian's python3 imports them from
    # dist-packages, and the commands say the package's version.
    where = root.run('python3', '-c', 'import ovs_rdt, libvirt_hooks; '
                     'print(ovs_rdt.__file__, libvirt_hooks.__file__)').stdout
    assert where.split() == [
        '/usr/lib/python3/dist-packages/%s/__init__.py' % p
        for p in ('ovs_rdt', 'libvirt_hooks')], where
    assert root.run('ovs-rdt', '--version').stdout == \
        'ovs-rdt %s\n' % artifacts.version
    # Every entry point installed names a module that is installed.
    listed = root.run('python3', '-c', ENTRY_POINTS_CHECK).stdout
    assert 'ovs_rdt.opts' in listed and 'nova_plugin' not in listed, listed
    assert root.run('ovs-rdt-agent', '--version').stdout == \
        'ovs-rdt-agent %s\n' % artifacts.version

    # Edit one file, then the commands.
    port = free_port()
    web = tls.web_config(pki, os.path.join(node['dir'], 'web.yml'))
    configure(root, emu, ovs, '[metrics]\nlisten = 127.0.0.1:%d\n'
              'web_config_file = %s\n' % (port, web))
    res = root.run('ovs-rdt', 'apply')
    assert 'ovsrdt-pool-hp' in rc.group_names(), res.stdout + res.stderr
    res = root.run('ovs-rdt', 'status', check=False)
    status = res.stdout
    assert 'ovsrdt-pool-hp' in status and 'default (root)' in status, status
    assert res.returncode == 5      # applied; the agent is not started yet

    # The agent, as the unit starts it.
    cmd = exec_start(root)
    assert cmd[:3] == ['/usr/bin/ovs-rdt-agent', '--config-file', CONF], cmd
    log = os.path.join(node['dir'], 'agent.log')
    agent = root.popen(*cmd, log=log)
    ovs.other_config(**{'rdt-pmd-l3-ways': '2'})
    wait_for(lambda: set(ovs.pmd_threads()) and
             set(ovs.pmd_threads()) <= set(_try(rc.tasks, PMD_GROUP) or ()),
             timeout=30, step=0.1, what='PMD threads in %s (agent log: %s)'
             % (PMD_GROUP, log))
    wait_for(lambda: (ovs.external_id('rdt-status') or '').startswith('ok'),
             timeout=30, step=0.1, what='rdt-status ok')
    text = wait_for(lambda: _try(scrape, port, pki), timeout=30, step=0.2,
                    what='metrics over TLS (agent log: %s)' % log)
    assert 'ovs_rdt_l3_ways{' in text and 'group="%s"' % PMD_GROUP in text

    # The hook, as libvirtd runs it: prepare makes the guest's group,
    # release removes it.
    uuid = str(uuidlib.uuid4())
    xml = domain_xml('deb-guest', uuid, 2)
    root.run(HOOK, 'deb-guest', 'prepare', 'begin', '-', input=xml)
    assert 'ovsrdt-vm-' + uuid in rc.group_names()
    root.run(HOOK, 'deb-guest', 'release', 'end', '-', input=xml)
    assert 'ovsrdt-vm-' + uuid not in rc.group_names()

    agent.terminate()
    assert agent.wait(15) == 0, open(log).read()[-2000:]

    # /run/ovs-rdt at the purge: what an agent of this package killed with
    # -9 left (its lock and policy state, no holder) goes; another running
    # agent's (its lock held) and anything else stays (issue 38 item 7).
    run = '/run/ovs-rdt/'
    root.run('sh', '-c', 'mkdir -p %s && cd %s && touch agent-0dead.lock '
             'policy-0dead.json agent-1live.lock policy-1live.json '
             'other.sock' % (run, run))
    # (One process: the lock's holder ends with it.)
    holder = root.popen('sh', '-c', 'exec 9>>%sagent-1live.lock && flock 9 '
                        '&& exec sleep 600' % run,
                        log=os.path.join(node['dir'], 'holder.log'))
    wait_for(lambda: root.run('flock', '-n', run + 'agent-1live.lock',
                              'true', check=False).returncode == 1,
             timeout=10, what='the other agent\'s lock held')
    root.run('dpkg', '--purge', *reversed(NODE_PACKAGES))
    assert root.run('ls', run).stdout.split() == [
        'agent-1live.lock', 'other.sock', 'policy-1live.json']
    holder.terminate()
    left = [c for c in root.changes() if c not in OTHERS]
    assert not left, 'left behind by the purge: %s' % left


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except (OSError, AssertionError, http.client.HTTPException):
        return None


# -- upgrade through the package, guests running ----------------------------
GUEST = ("<domain type='%(virt)s'><name>%(name)s</name><uuid>%(uuid)s</uuid>"
         "<metadata><rdt:rdt xmlns:rdt='urn:ovs-rdt:libvirt:1'>%(rdt)s"
         "</rdt:rdt></metadata><memory unit='MiB'>32</memory><vcpu>1</vcpu>"
         "<os><type arch='x86_64' machine='pc'>hvm</type></os><devices>"
         "<emulator>/usr/bin/qemu-system-x86_64</emulator></devices></domain>")


class InsideLibvirtd:
    """libvirtd and virtlogd run from the overlay root: the package's hook
    in its /etc/libvirt/hooks/qemu.d, guests' state in its /run and /var.
    """

    def __init__(self, root: OverlayRoot, workdir: str) -> None:
        self.root = root
        self.log = os.path.join(workdir, 'libvirtd.log')
        self.proc: subprocess.Popen | None = None
        self.names: list[str] = []

    def start(self) -> None:
        if not self.names:
            # Not the host's networks (a default one would add a bridge to
            # the host's network namespace) or guests; a fresh /run.
            self.root.run('rm', '-rf', '/etc/libvirt/qemu')
            self.root.run('mkdir', '-p', '/etc/libvirt/qemu')
            # QEMU's private /dev copies device nodes from a devtmpfs; the
            # overlay root has the host's /dev bound, not mounted.
            self.root.write('/etc/libvirt/qemu.conf', self.root.read(
                '/etc/libvirt/qemu.conf') + '\nnamespaces = []\n')
            self.root.popen('virtlogd', log=self.log)
        self.proc = self.root.popen('libvirtd', log=self.log)
        wait_for(lambda: self.virsh('version', check=False).returncode == 0,
                 timeout=180, step=0.3, what='libvirtd in the overlay root '
                 '(log: %s)' % self.log)

    def restart(self) -> None:
        """libvirtd alone: guests keep running, "reconnect" hooks run."""
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(30)
        self.root.started.remove(self.proc)
        self.start()

    def virsh(self, *args: str, check: bool = True,
              input: str | None = None) -> subprocess.CompletedProcess:
        return self.root.run('virsh', '-q', '-c', 'qemu:///system', *args,
                             check=check, input=input, timeout=120)

    def guest(self, rdt: str) -> tuple[str, str]:
        name = 'ovsrdt-deb-%d' % len(self.names)
        uuid = str(uuidlib.uuid4())
        virt = 'qemu' if os.environ.get('OVS_RDT_TCG') == '1' else 'kvm'
        path = '/tmp/%s.xml' % name
        self.root.write(path, GUEST % {'virt': virt, 'name': name,
                                       'uuid': uuid, 'rdt': rdt})
        self.virsh('define', path)
        self.names.append(name)
        self.virsh('start', name)
        return name, uuid

    def vcpus(self, name: str) -> set[int]:
        return host.vcpu_tids(int(self.root.read(
            '/run/libvirt/qemu/%s.pid' % name)))

    def destroy_all(self) -> None:
        for name in self.names:
            self.virsh('destroy', name, check=False)


def test_upgrade_through_the_package_with_guests_running(
        artifacts: Artifacts, previous_release: Artifacts,
        node: dict[str, Any]) -> None:
    from tests.functional.fixtures.libvirt import libvirt_missing
    from tests.functional.test_upgrade import same, snapshot

    why = libvirt_missing()
    if why:
        pytest.fail('real libvirt/KVM unavailable: %s' % why, pytrace=False)
    root, emu, ovs = node['root'], node['emu'], node['ovs']
    rc = Resctrl(emu.root, emu.sysfs)
    root.run('rm', '-f', MAN_DB_SWITCH)
    root.run('dpkg', '-i', root.put(previous_release.deb), input='')
    configure(root, emu, ovs, '[pool:noisy]\nl3_ways = 2\n')
    root.write(CONF, root.read(CONF).replace('pools = hp', 'pools = noisy'))
    mine = root.read(CONF)
    log = os.path.join(node['dir'], 'agent.log')
    agents = [root.popen(*exec_start(root), log=log)]
    ovs.other_config(**{'rdt-pmd-l3-ways': '2'})

    def settled() -> None:
        wait_for(lambda: set(ovs.pmd_threads()) and set(ovs.pmd_threads())
                 <= set(_try(rc.tasks, PMD_GROUP) or ()) and
                 (ovs.external_id('rdt-status') or '').startswith('ok'),
                 timeout=60, step=0.1, what='PMD threads placed (agent '
                 'log: %s)' % log)

    settled()
    lv = InsideLibvirtd(root, node['dir'])
    try:
        lv.start()
        guests = [lv.guest("<rdt:l3 ways='%d'/>" % ways) for ways in (1, 3)]
        guests.append(lv.guest("<rdt:pool name='noisy'/>"))
        groups = ['ovsrdt-vm-' + uuid for _name, uuid in guests[:2]] + \
            ['ovsrdt-pool-noisy']
        for (name, _uuid), group in zip(guests, groups):
            assert lv.vcpus(name) <= set(rc.tasks(group)), name
        before = snapshot(rc)

        # apt, as README says: dpkg -i alone stops at python3-ovs-rdt's
        # Breaks on the 0.2.0 package it takes files over from.
        upgrade = ('apt-get', 'install', '-y', root.put(artifacts.package(
            'python3-ovs-rdt')), root.put(artifacts.deb))
        # Back to 0.2.0's one package: python3-ovs-rdt goes (it Breaks
        # the old ovs-rdt, whose files it took over).
        downgrade = ('apt-get', 'install', '-y', '--allow-downgrades',
                     root.put(previous_release.deb), 'python3-ovs-rdt-')
        for cmd, version in ((upgrade, artifacts.version),
                             (downgrade, previous_release.version)):
            # RELEASENOTES.md's steps, unattended (no --force-conf*, no
            # standard input): the packages (the configuration kept), the
            # agent restarted (systemd would), libvirtd restarted.
            res = root.run(*cmd, input='')
            if cmd is upgrade:      # no systemd: nothing restarted it
                said = res.stdout + res.stderr    # apt passes it on
                assert 'restart ovs-rdt-agent by hand' in said, said
            assert root.read(CONF) == mine, 'the configuration changed'
            installed = root.run('dpkg-query', '-W', '-f', '${Version}',
                                 'ovs-rdt').stdout
            assert installed.rsplit('-', 1)[0].replace('~', '.') == version
            agents[-1].terminate()
            assert agents[-1].wait(15) == 0
            agents.append(root.popen(*exec_start(root), log=log))
            root.run('ovs-rdt', 'apply')
            lv.restart()
            settled()
            for name, _uuid in guests:
                assert lv.virsh('domstate', name).stdout.strip() == \
                    'running', (name, res.stderr)
            same(before, snapshot(rc))
    finally:
        lv.destroy_all()
