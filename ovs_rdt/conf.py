"""Configuration: every option declared once, read by one reader.

The options are declared here as plain data (``SPEC``).  :func:`load_files`
reads oslo.config-format files with a small stdlib parser (no
:mod:`configparser`, no oslo.config: the libvirt hook uses it several times
on every VM start) for every command; :mod:`ovs_rdt.opts` handles command
lines and turns ``SPEC`` into oslo.config options for oslo-config-generator
only.  The result is a :class:`Settings`, which is what the rest of the code
is given: nothing deeper reads a global.
"""
from __future__ import annotations

import os

from ovs_rdt.exceptions import ConfigError, InvalidValue, refuse
from ovs_rdt.inputs import integers, names, request
from ovs_rdt.inputs.request import MB_EVENTS
from ovs_rdt import MAX_WAYS, POOL_GROUP_PREFIX

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the hook ~9 ms per event (bench_hook)
    from typing import Any, Callable

DEFAULT_CONFIG_FILE = '/etc/ovs-rdt/ovs-rdt.conf'
#: Read after it when no file or directory is named (oslo.config's
#: default_config_dirs: ``/etc/<project>/<project>.conf.d``).
DEFAULT_CONFIG_DIR = '/etc/ovs-rdt/ovs-rdt.conf.d'


class Opt:
    """One option as declared: ``name``, ``type`` (a key of :data:`TYPES`),
    ``default``, ``help``, and the limits its type checks (``min``,
    ``max``: int and float; ``choices``: choice).
    """

    __slots__ = ('name', 'type', 'default', 'help', 'min', 'max', 'choices')

    def __init__(self, name: str, type_: str, default: Any, help_: str,
                 min: float | None = None, max: int | None = None,
                 choices: tuple[str, ...] | None = None) -> None:
        self.name, self.type, self.default = name, type_, default
        self.help, self.min, self.max = help_, min, max
        self.choices = choices

    def __repr__(self) -> str:
        return 'Opt(%r, %r)' % (self.name, self.type)


SPEC: dict[str, list[Opt]] = {
    'DEFAULT': [
        Opt('debug', 'bool', False,
            'Log at debug level.'),
        Opt('log_file', 'str', None,
            'Append log lines to this file as well as to standard error.'),
    ],
    'resctrl': [
        Opt('root', 'str', '/sys/fs/resctrl',
            'Where the resctrl filesystem is mounted. Every read and write of '
            'cache allocation state happens below it. Point it at the mountpoint '
            'of "ovs-rdt emulate" to run on an emulated platform.'),
        Opt('sysfs_cpu_root', 'str', '/sys/devices/system/cpu',
            'Where the CPU topology is read: cpuN/cache/index3/{id,level} map '
            'each CPU to its L3 cache domain. "ovs-rdt emulate" publishes a '
            'matching tree for its profile (see its --sysfs-dir).'),
        Opt('sysfs_node_root', 'str', None,
            'Where the NUMA nodes are read: nodeN/cpulist lists the CPUs of '
            'node N; with sysfs_cpu_root they map each NUMA node to its L3 '
            'cache domains, which group the L3 caches a Nova flavor\'s ways '
            'are counted and spread over ("ovs-rdt provider-config" prints '
            'the groups). Unset: the "node" directory inside sysfs_cpu_root '
            'if there is one (the tree of "ovs-rdt emulate --sysfs-dir"), else '
            'the "node" directory beside it (/sys/devices/system/node).'),
        Opt('lock_timeout', 'int', 30,
            'Seconds to wait for the flock on the resctrl root before giving '
            'up with an error.', min=0),
    ],
    'allocation': [
        Opt('pools', 'list', [],
            'Shared pools to create, each configured in a section [pool:NAME] '
            '(like Cinder\'s enabled_backends). Their groups are named '
            'ovsrdt-pool-NAME. A name is a letter or digit, then letters, '
            'digits, "_", "." or "-"; at most 64 characters.'),
        Opt('system_min_ways', 'int', 2,
            'Fewest L3 ways the default (root) group keeps on every cache '
            'domain. The default group holds every way no isolated group '
            'or pool holds, and is shrunk to make room for them, never below '
            'this.', min=1),
        Opt('system_l3_cbm', 'str', None,
            'An explicit capacity bitmask for the default (root) group instead '
            'of the largest run of the ways no pool, VM or other tool\'s group '
            'gets: one hex mask for every domain ("c") or per domain '
            '("0=c;1=c").'),
    ],
    'pool': [
        Opt('l3_ways', 'int', None,
            'Number of L3 ways the pool gets on every cache domain. Exclusive '
            'of l3_cbm.', min=1, max=MAX_WAYS),
        Opt('l3_cbm', 'str', None,
            'An explicit capacity bitmask instead of l3_ways: one hex mask for '
            'every domain ("7f0") or per domain ("0=7f0;1=3f").'),
        Opt('l3_code_cbm', 'str', None,
            'Where resctrl is mounted with "-o cdp": the pool\'s own mask for '
            'code (the L3CODE line), with l3_data_cbm for data (L3DATA), '
            'instead of l3_ways or l3_cbm, which give code and data the same '
            'ways. Written like l3_cbm ("300" or "0=300;1=300"). The two masks '
            'together must be one run of ways: the pool holds what either uses. '
            'Refused on mounts without CDP.'),
        Opt('l3_data_cbm', 'str', None,
            'Where resctrl is mounted with "-o cdp": the pool\'s own mask for '
            'data (the L3DATA line); see l3_code_cbm, which it goes with.'),
        Opt('isolated', 'bool', False,
            'Enforce the pool\'s ways in the kernel too (resctrl mode '
            '"exclusive"): no other group, ours or another tool\'s, may overlap '
            'them. Pools sized by l3_ways never overlap anything ovs-rdt '
            'places either way.'),
        Opt('mb_percent', 'int', None,
            'Memory-bandwidth cap for the pool, in percent (Intel MBA, resctrl '
            'mounted without mba_MBps). Refused where resctrl takes '
            'bandwidths (mba_MBps, AMD): use mb_mbps there; refused without '
            'memory bandwidth allocation and on a non-linear Intel MBA '
            '(info/MB/delay_linear 0), as a VM\'s cap is. Exclusive of '
            'mb_mbps.', min=1, max=100),
        Opt('mb_mbps', 'int', None,
            'Memory-bandwidth cap for the pool, in MiB/s, where resctrl takes '
            'bandwidths: mounted with "-o mba_MBps" (written as is), or AMD '
            '(written in its 1/8 GB/s units, rounded up). Refused where it '
            'takes percentages: use mb_percent there; refused without memory '
            'bandwidth allocation, as a VM\'s cap is. Exclusive of mb_percent. '
            'See doc/platforms.md.', min=1),
        Opt('mb_event', 'choice', None,
            'Where resctrl is mounted with "-o mba_MBps": the memory-bandwidth '
            'event the kernel\'s software controller holds the pool\'s mb_mbps '
            'to, written to its group\'s mba_MBps_event (Linux 6.14 and '
            'later). mbm_local_bytes counts the NUMA-local traffic, '
            'mbm_total_bytes all of it. Unset: the kernel\'s choice '
            '(mbm_local_bytes where counted) is left as it is. Refused on other '
            'mounts and where L3 monitoring does not count the event.', choices=MB_EVENTS),
    ],
    'libvirt': [
        Opt('include_emulator_threads', 'bool', True,
            'Also move the QEMU threads that are not vCPUs (emulator, I/O) '
            'into the VM\'s group.'),
        Opt('on_failure', 'choice', 'refuse',
            'What the hook does when a VM\'s request is invalid or cannot be '
            'met: "refuse" makes "virsh start" fail with the reason; "warn" '
            'starts the VM without a cache allocation and logs why.', choices=('refuse', 'warn')),
        Opt('qemu_run_dir', 'str', '/run/libvirt/qemu',
            'Where libvirt keeps <name>.pid for each running QEMU.'),
        Opt('uri', 'str', 'qemu:///system',
            'libvirt connection URI that ovs-rdt-agent, "ovs-rdt status" and '
            '"ovs-rdt top" open read-only (they never change anything through '
            'it). The agent follows its domain lifecycle events: the group of '
            'a domain that stopped without the release hook is removed at '
            'once, a domain that started without the hook is placed; status, '
            'top and the metrics name VMs as libvirt does. The hook never uses '
            'it. While it does not answer (libvirtd restarting), the agent '
            'reconnects with backoff and removes groups left behind only once '
            'no process has run with their domain\'s UUID for 10 minutes. '
            'E.g. qemu:///system, or qemu:///system?socket=PATH for a libvirtd '
            'listening elsewhere.'),
    ],
    'ovs': [
        Opt('connection', 'str', 'unix:/var/run/openvswitch/db.sock',
            'OVSDB connection of the local Open_vSwitch database.'),
        Opt('vswitchd_pidfile', 'str', '/var/run/openvswitch/ovs-vswitchd.pid',
            'Pidfile of ovs-vswitchd, to find its PMD threads.'),
        Opt('ovsdb_timeout', 'int', 10,
            'Seconds an OVSDB transaction may take.', min=1),
        Opt('rescan_interval', 'int', 10,
            'Seconds between safety re-scans of ovs-vswitchd\'s threads, on top '
            'of the scans triggered by OVSDB updates.', min=1),
    ],
    'agent': [
        Opt('reconcile_interval', 'int', 60,
            'Seconds between reconciliations of ovsrdt- groups against the '
            'processes that own them (e.g. a VM group left behind by a QEMU '
            'that died without the release hook).', min=1),
    ],
    'metrics': [
        Opt('listen', 'listen', None,
            'HOST:PORT where ovs-rdt-agent serves GET /metrics in the '
            'Prometheus text format (e.g. 127.0.0.1:9468; [::1]:9468 for IPv6); '
            'empty: no metrics endpoint. Occupancy, memory bandwidth, masks and '
            'task counts are read from resctrl at each scrape (see '
            'doc/metrics.md).'),
        Opt('web_config_file', 'str', None,
            'A web configuration file for the metrics endpoint in the format '
            'of the Prometheus exporters (exporter-toolkit): '
            'tls_server_config (cert_file, key_file, client_ca_file, '
            'client_auth_type, min_version, max_version) serves HTTPS, '
            'basic_auth_users (user: bcrypt hash) asks for a password. Read '
            'when ovs-rdt-agent starts (a bad file stops it, naming the '
            'field) and at SIGHUP. Empty: plain HTTP, no password (keep listen '
            'on loopback then). See doc/metrics.md.'),
    ],
    'policy': [
        Opt('enabled', 'bool', False,
            'Run the dynamic cache policy in ovs-rdt-agent: the '
            'high_priority and best_effort pools share a budget of '
            'hp_max_ways + be_min_ways ways on every cache domain, and the '
            'agent moves ways between them as the high-priority pool\'s demand '
            'changes (see doc/policy.md). Both pools must be in [allocation] '
            'pools and sized by l3_ways, which sum to the budget: those are the '
            'ways they return to when the policy is disabled. false: the pools '
            'keep their configured ways.'),
        Opt('interval', 'float', 1.0,
            'Seconds between two policy decisions (each reads the pools\' '
            'llc_occupancy and MBM counters and the OvS drop counters once).', min=0.05),
        Opt('high_priority', 'str', None,
            'The pool whose ways follow its demand (a name from [allocation] '
            'pools).'),
        Opt('best_effort', 'str', None,
            'The pool that gets every way of the budget the high-priority pool '
            'does not need (a name from [allocation] pools); with MBA, its '
            'memory bandwidth is capped while the high-priority pool is short '
            'at hp_max_ways.'),
        Opt('hp_min_ways', 'int', 1,
            'Fewest ways the high-priority pool keeps on every cache domain.', min=1),
        Opt('hp_max_ways', 'int', None,
            'Most ways the high-priority pool gets on every cache domain.', min=1),
        Opt('be_min_ways', 'int', 1,
            'Fewest ways the best-effort pool keeps on every cache domain.', min=1),
    ],
}

#: Prefix of a pool's configuration section (``[pool:<name>]``); its resctrl
#: group is ``ovs_rdt.POOL_GROUP_PREFIX + name``.
POOL_SECTION_PREFIX = 'pool:'
#: Sections whose keys are free-form (flavor names).
FREE_SECTIONS = ('flavors',)


class Section:
    """Attribute access to one section's values; each section's class
    below names its options' types for the type checker
    (``tests/unit/test_conf.py`` keeps them equal to :data:`SPEC`).
    """

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)

    if not TYPE_CHECKING:   # (the checker then refuses unknown options)
        def __getattr__(self, name: str) -> Any:
            raise AttributeError('no option %r in this section' % name)

    def __repr__(self) -> str:
        return 'Section(%r)' % (vars(self),)


class DefaultSection(Section):
    debug: bool
    log_file: str | None


class ResctrlSection(Section):
    root: str
    sysfs_cpu_root: str
    sysfs_node_root: str | None
    lock_timeout: int


class AllocationSection(Section):
    pools: list[str]
    system_min_ways: int
    system_l3_cbm: str | None


class PoolSection(Section):
    l3_ways: int | None
    l3_cbm: str | None
    l3_code_cbm: str | None
    l3_data_cbm: str | None
    isolated: bool
    mb_percent: int | None
    mb_mbps: int | None
    mb_event: str | None


class LibvirtSection(Section):
    include_emulator_threads: bool
    on_failure: str
    qemu_run_dir: str
    uri: str


class OvsSection(Section):
    connection: str
    vswitchd_pidfile: str
    ovsdb_timeout: int
    rescan_interval: int


class AgentSection(Section):
    reconcile_interval: int


class MetricsSection(Section):
    listen: str | None
    web_config_file: str | None


class PolicySection(Section):
    enabled: bool
    interval: float
    high_priority: str | None
    best_effort: str | None
    hp_min_ways: int
    hp_max_ways: int | None
    be_min_ways: int


#: Each section of :data:`SPEC` -> its class (``pool``: each ``[pool:X]``).
SECTIONS: dict[str, type[Section]] = {
    'DEFAULT': DefaultSection, 'resctrl': ResctrlSection,
    'allocation': AllocationSection, 'pool': PoolSection,
    'libvirt': LibvirtSection, 'ovs': OvsSection, 'agent': AgentSection,
    'metrics': MetricsSection, 'policy': PolicySection}


class Source:
    """Where an option was set: file, line, and the value written there."""

    __slots__ = ('path', 'line', 'value')

    def __init__(self, path: str, line: int, value: str) -> None:
        self.path, self.line, self.value = path, line, value

    def __repr__(self) -> str:
        return '%s line %d: %r' % (self.path, self.line, self.value)


class Settings:
    """The whole configuration, as plain values.

    ``settings.resctrl.root``, ``settings.allocation.pools``,
    ``settings.pools['hp'].l3_ways`` and so on; ``settings.flavors`` maps a
    flavor name to its extra-spec dict ([flavors] section).
    ``settings.warnings``: what the files hold that is not an error but is
    probably not meant (each surface shows them: the agent's log, the
    CLI's standard error).
    """

    default: DefaultSection
    resctrl: ResctrlSection
    allocation: AllocationSection
    libvirt: LibvirtSection
    ovs: OvsSection
    agent: AgentSection
    metrics: MetricsSection
    policy: PolicySection

    def __init__(self, sections: dict[str, dict[str, Any]],
                 pools: dict[str, dict[str, Any]],
                 flavors: dict[str, str] | None = None,
                 config_file: str | None = None,
                 warnings: list[str] | None = None) -> None:
        for name, values in sections.items():
            setattr(self, 'default' if name == 'DEFAULT' else name,
                    SECTIONS[name](values))
        self.pools = {name: PoolSection(v) for name, v in pools.items()}
        self.flavors = dict(flavors or {})
        self.config_file = config_file
        self.warnings = list(warnings or [])
        #: The files read, in order (:func:`load_files`).
        self.paths: list[str] = []
        #: (section, option) -> where it was set, in the order read: one
        #: :class:`Source` per file and line; the last one is in force.
        self.sources: dict[tuple[str, str], list[Source]] = {}
        #: (path, text) of each file as read: :attr:`digests`.
        self.contents: list[tuple[str, str | None]] = []

    if not TYPE_CHECKING:   # (the checker then refuses unknown sections)
        def __getattr__(self, name: str) -> Any:
            raise AttributeError('no section %r in the configuration' % name)

    @property
    def digests(self) -> dict[str, str | None]:
        """Each file as read, as a digest (:func:`fingerprint` of the same
        files now differs where one changed); computed on first use (the
        hook never needs it: no hashlib at every VM start).
        """
        return {path: _sha256(data) for path, data in self.contents}

    @classmethod
    def defaults(cls, **overrides: dict[str, Any]) -> 'Settings':
        """Defaults, with ``section={option: value}`` overrides (for tests)."""
        sections = {s: {o.name: o.default for o in opts}
                    for s, opts in SPEC.items() if s != 'pool'}
        pools = overrides.pop('pools', {})
        for sec, values in overrides.items():
            sections[sec].update(values)
        pool_values = {}
        for name, values in pools.items():
            merged = {o.name: o.default for o in SPEC['pool']}
            merged.update(values)
            check_pool(name, PoolSection(merged))
            pool_values[name] = merged
        sections['allocation']['pools'] = list(pools) or \
            sections['allocation']['pools']
        return cls(sections, pool_values)


def convert(section: str, opt: Opt, raw: str | None) -> Any:
    """Convert a raw string the way oslo.config does; errors name the option."""
    if raw is None:
        return opt.default
    return TYPES[opt.type].convert(opt, raw, '[%s] %s' % (section, opt.name))


def _as_str(opt: Opt, raw: str, where: str) -> str:
    return raw


def _as_bool(opt: Opt, raw: str, where: str) -> bool:
    low = raw.strip().lower()
    if low in ('true', '1', 'on', 'yes'):
        return True
    if low in ('false', '0', 'off', 'no'):
        return False
    raise refuse(where, raw, 'is not a boolean', ConfigError)


def _as_list(opt: Opt, raw: str, where: str) -> list[str]:
    return [v.strip() for v in raw.split(',') if v.strip()]


def _as_choice(opt: Opt, raw: str, where: str) -> str:
    assert opt.choices is not None
    if raw not in opt.choices:
        raise refuse(where, raw, 'is not one of %s' % ', '.join(opt.choices),
                     ConfigError)
    return raw


def _as_listen(opt: Opt, raw: str, where: str) -> str | None:
    if not raw.strip():
        return None
    # (Here: the hook, which never reads [metrics], imports one module less.)
    from ovs_rdt.inputs.listen import parse_listen
    parse_listen(raw, where)
    return raw.strip()


def _as_float(opt: Opt, raw: str, where: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError('%s = %r is not a number' % (where, raw)) from None
    if value != value or value in (float('inf'), float('-inf')):
        raise ConfigError('%s = %r is not a finite number' % (where, raw))
    if opt.min is not None and value < opt.min:
        raise ConfigError('%s = %s is below the minimum %s'
                          % (where, raw.strip(), opt.min))
    return value


def _as_int(opt: Opt, raw: str, where: str) -> int:
    try:
        return integers.parse(raw, where,
                              0 if opt.min is None else int(opt.min),
                              integers.MAX if opt.max is None else opt.max)
    except InvalidValue as exc:
        raise ConfigError(str(exc)) from None


class Type:
    """An option type: how its raw string converts, and the oslo.config
    option class that declares it for oslo-config-generator
    (:func:`ovs_rdt.opts.list_opts`) with the limits it passes on.
    """

    __slots__ = ('convert', 'oslo', 'limits')

    def __init__(self, convert: Callable[[Opt, str, str], Any], oslo: str,
                 limits: tuple[str, ...] = ()) -> None:
        self.convert, self.oslo, self.limits = convert, oslo, limits


#: Every option type (:attr:`Opt.type`): the one table both readers use.
TYPES = {
    'str': Type(_as_str, 'StrOpt'),
    'bool': Type(_as_bool, 'BoolOpt'),
    'int': Type(_as_int, 'IntOpt', ('min', 'max')),
    'float': Type(_as_float, 'FloatOpt', ('min', 'max')),
    'list': Type(_as_list, 'ListOpt'),
    'choice': Type(_as_choice, 'StrOpt', ('choices',)),
    'listen': Type(_as_listen, 'StrOpt'),    # HOST:PORT or empty
}


def from_lookup(get: Any, has_section: Any,
                flavors: dict[str, str] | None = None,
                config_file: str | None = None,
                origins: dict[str, list[str]] | None = None) -> Settings:
    """Build Settings from ``get(section, name) -> raw str | None``;
    ``origins``: every section read -> the file it is in.
    """
    sections: dict[str, dict[str, Any]] = {}
    for sec, opts in SPEC.items():
        if sec == 'pool':
            continue
        sections[sec] = {o.name: convert(sec, o, get(sec, o.name))
                         for o in opts}
    pools: dict[str, dict[str, Any]] = {}
    for pool in sections['allocation']['pools']:
        try:
            names.pool_name(pool, '[allocation] pools')
        except InvalidValue as exc:
            raise ConfigError(str(exc)) from None
        section = POOL_SECTION_PREFIX + pool
        if not has_section(section):
            raise ConfigError('[allocation] pools names %r but there is no '
                              '[%s] section' % (pool, section))
        pools[pool] = {o.name: convert(section, o, get(section, o.name))
                       for o in SPEC['pool']}
        check_pool(pool, PoolSection(pools[pool]))
    return Settings(sections, pools, flavors, config_file,
                    unlisted_pools(origins or {}, list(pools)))


def check_pool(name: str, pool: PoolSection) -> None:
    """A ``[pool:NAME]``'s options together, where the platform does not
    matter: one size (``l3_ways``, ``l3_cbm``, or ``l3_code_cbm`` with
    ``l3_data_cbm``), one kind of memory-bandwidth cap.  The rest is
    checked against the platform (:func:`ovs_rdt.desired.pool_requests`).
    """
    section = '[pool:%s]' % name
    sizes = [f for f in ('l3_ways', 'l3_cbm', 'l3_code_cbm')
             if getattr(pool, f) not in (None, '')]
    if len(sizes) > 1:
        raise ConfigError('%s sets both %s and %s; choose one'
                          % (section, sizes[0], sizes[1]))
    split = [f for f in ('l3_code_cbm', 'l3_data_cbm') if getattr(pool, f)]
    if len(split) == 1:
        missing = ({'l3_code_cbm', 'l3_data_cbm'} - set(split)).pop()
        raise ConfigError('%s %s needs %s too: a code and a data mask'
                          % (section, split[0], missing))
    if not split and not pool.l3_cbm and pool.l3_ways is None:
        raise ConfigError('%s needs l3_ways, l3_cbm or (under CDP) '
                          'l3_code_cbm and l3_data_cbm' % section)
    try:
        request.check_one_cap(pool.mb_percent, pool.mb_mbps,
                              '%s %s' % (section, request.MB_PERCENT),
                              '%s %s' % (section, request.MB_MBPS))
    except InvalidValue as exc:
        raise ConfigError(str(exc)) from None


def unlisted_pools(origins: dict[str, list[str]],
                   pools: list[str]) -> list[str]:
    """A warning for each ``[pool:NAME]`` section that ``[allocation]
    pools`` does not list (naming every file it is in): it is ignored (not
    an error: a pool may be kept there disabled on purpose), and "ovs-rdt
    apply" removes its group.
    """
    out = []
    for section, paths in origins.items():
        name = section[len(POOL_SECTION_PREFIX):]
        if section.startswith(POOL_SECTION_PREFIX) and name not in pools:
            path = ', '.join(paths)
            out.append('config %s %s: [%s] is ignored: %s is not in '
                       '[allocation] pools (%s), so there is no group '
                       '%s%s (one left from before is removed, its tasks '
                       'moved to the default group); add %s to pools to use '
                       'the pool, or remove or comment out the section'
                       % ('files' if len(paths) > 1 else 'file', path,
                          section, name, ', '.join(pools) or 'empty',
                          POOL_GROUP_PREFIX, name, name))
    return out


def parse_ini(text: str, path: str,
              lines: dict[tuple[str, str], int] | None = None
              ) -> dict[str, dict[str, str]]:
    """Parse an ini file the way oslo.config's iniparser does.

    ``[section]`` headers, ``key = value`` or ``key: value``, full-line
    ``#``/``;`` comments, indented continuation lines, matching quotes
    stripped, the last of repeated keys wins, no DEFAULT inheritance.

    Why not a library: the libvirt hook reads the configuration in a new
    process at several events of every VM start, and keeps its imports to
    the standard library's lightest (an import-list test guards it).
    oslo.config (``oslo_config.cfg``) would add ~70 ms of imports per
    event, its own ``oslo_config.iniparser`` ~11 ms (it imports
    ``typing``; ``python -X importtime`` on the test machine).  :mod:`configparser` is lighter but
    reads the same file differently from oslo.config (it refuses a
    repeated key, expands ``%``, lowercases keys, copies ``[DEFAULT]``
    into every section), and the agent and the CLI read with this parser
    too, so one file means one thing to every reader.

    ``lines``, if given, gets the line each option was set on (the last
    time, as its value), keyed by (section, option), and the line of each
    section's first header, keyed by (section, '').
    """
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    key = None
    name = ''
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line or line.lstrip()[:1] in ('#', ';'):
            continue
        if line[0] in ' \t' and key is not None and current is not None:
            current[key] = (current[key] + '\n' + line.strip()).strip()
            continue
        if line.startswith('['):
            if not line.endswith(']') or len(line) <= 2:
                raise ConfigError('config file %s line %d: bad section header '
                                  '%r' % (path, lineno, line))
            name = line[1:-1].strip()
            current = sections.setdefault(name, {})
            if lines is not None:
                lines.setdefault((name, ''), lineno)
            key = None
            continue
        if current is None:
            raise ConfigError('config file %s line %d: %r is outside any '
                              '[section]' % (path, lineno, line))
        cut = min([i for i in (line.find('='), line.find(':')) if i >= 0],
                  default=-1)
        if cut <= 0:
            raise ConfigError('config file %s line %d: %r is not "option = '
                              'value"' % (path, lineno, line))
        key = line[:cut].strip()
        value = line[cut + 1:].strip()
        if len(value) > 1 and value[0] == value[-1] and value[0] in '"\'':
            value = value[1:-1]
        current[key] = value
        if lines is not None:
            lines[(name, key)] = lineno
    return sections


def check_names(sections: dict[str, dict[str, str]], path: str,
                lines: dict[tuple[str, str], int] | None = None) -> None:
    """Refuse unknown sections and options: a typo must not silently fall
    back to a default (a misspelt [allocation] would make "apply" remove
    every pool).  Unknown [DEFAULT] options are ignored, as oslo.config
    ignores them (other OpenStack services share such files).  ``lines``:
    :func:`parse_ini`'s, for the line of each.
    """
    def where(section: str, key: str) -> str:
        line = (lines or {}).get((section, key))
        return path if line is None else '%s line %d' % (path, line)

    for section, values in sections.items():
        if section in FREE_SECTIONS:
            continue
        spec_name = 'pool' if section.startswith(POOL_SECTION_PREFIX) and \
            len(section) > len(POOL_SECTION_PREFIX) else section
        if spec_name not in SPEC:
            known = sorted(s for s in SPEC if s not in ('DEFAULT', 'pool'))
            raise ConfigError('config file %s: unknown section [%s] (known: '
                              '%s, pool:NAME, flavors)'
                              % (where(section, ''), section,
                                 ', '.join(known)))
        if section == 'DEFAULT':
            continue
        known = [o.name for o in SPEC[spec_name]]
        for key in values:
            if key not in known:
                raise ConfigError('config file %s: unknown option %r in [%s] '
                                  '(known: %s)' % (where(section, key), key,
                                                   section, ', '.join(known)))


def located(exc: ConfigError,
            sources: dict[tuple[str, str], list[Source]]) -> ConfigError:
    """``exc``, which names an option first (``[section] option ...``, the
    house form), with the file and line that set it in front, as a
    syntax error has them; ``exc`` itself when no file set it.
    """
    text = str(exc)
    end = text.find('] ')
    if not text.startswith('[') or end < 0:
        return exc
    option = text[end + 2:].split(' ', 1)[0].rstrip(':')
    where = sources.get((text[1:end], option))
    if not where:
        return exc
    return ConfigError('config file %s line %d: %s'
                       % (where[-1].path, where[-1].line, text))


def config_paths(files: list[str] | tuple[str, ...] = (),
                 dirs: list[str] | tuple[str, ...] = (),
                 strict: bool = True) -> list[str]:
    """The files to read, in order: the one rule of every command.

    That is oslo.config's: every ``--config-file`` given, in order, then
    the ``*.conf`` files of every ``--config-dir``, each directory's
    sorted; when neither is given, :data:`DEFAULT_CONFIG_FILE` and the
    ``*.conf`` files of :data:`DEFAULT_CONFIG_DIR`, those that exist (else
    the defaults).  A file or directory that was named and is missing is
    refused (ConfigError): a moved file must not turn into the defaults
    without a word.  (No :mod:`glob`: the hook reads this at every event.)
    Not ``strict`` (:func:`salvage`): what is missing is left out.
    """
    if not files and not dirs:
        files = [p for p in (DEFAULT_CONFIG_FILE,) if os.path.exists(p)]
        dirs = [p for p in (DEFAULT_CONFIG_DIR,) if os.path.isdir(p)]
    out = [p for p in files if strict or os.path.isfile(p)]
    for path in out:
        if not os.path.isfile(path):
            raise ConfigError('config file %s does not exist' % path)
    for path in dirs:
        if not os.path.isdir(path):
            if not strict:
                continue
            raise ConfigError('config directory %s does not exist' % path)
        try:
            names = os.listdir(path)
        except OSError as exc:
            if not strict:
                continue
            raise ConfigError('config directory %s: %s'
                              % (path, exc.strerror)) from None
        out += [os.path.join(path, n) for n in sorted(names)
                if n.endswith('.conf') and not n.startswith('.')]
    return out


def given(section: str, raw: str | None) -> str | None:
    """An option's raw value as read; None when unset, or blank outside
    ``[DEFAULT]`` (``root =`` keeps the default).
    """
    if raw is not None and raw.strip() == '' and section != 'DEFAULT':
        return None
    return raw


def read_text(path: str) -> str:
    """A config file's text; ConfigError naming it unless it is a regular
    file in UTF-8 (a FIFO would block every reader: the hook at each event).
    """
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ConfigError('config file %s is not a regular file'
                                  % path)
            chunks = []
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(fd)
        return b''.join(chunks).decode('utf-8')
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError('config file %s: %s' % (path, exc)) from None


def salvage(files: list[str], dirs: list[str]) -> Settings:
    """What can still be read of a configuration that does not load: the
    ``[DEFAULT]`` and ``[resctrl]`` options of each file that parses, each
    that converts; the defaults for everything else.  For releasing only
    (the hook's ``release end``), which never needs the configuration: a
    VM's group is its UUID under the root it was made in.
    """
    raw: dict[str, dict[str, str]] = {'DEFAULT': {}, 'resctrl': {}}
    for path in config_paths(files, dirs, strict=False):
        try:
            parsed = parse_ini(read_text(path), path)
        except ConfigError:
            continue
        for section, values in raw.items():
            values.update(parsed.get(section, {}))
    found: dict[str, dict[str, Any]] = {}
    for section, values in raw.items():
        found[section] = {}
        for opt in SPEC[section]:
            try:
                found[section][opt.name] = convert(
                    section, opt, given(section, values.get(opt.name)))
            except ConfigError:
                found[section][opt.name] = opt.default
    return Settings.defaults(**found)


def load(path: str | None = None) -> Settings:
    """Read one config file (None: the default one, if it exists).

    A named file that is missing is refused, as by :func:`config_paths`.
    """
    return load_files(config_paths([path] if path else []))


def load_files(paths: list[str]) -> Settings:
    """Read config files in order.

    A later file's values win, option by option, as with oslo.config's
    repeated ``--config-file``.
    """
    sections: dict[str, dict[str, str]] = {}
    origins: dict[str, list[str]] = {}
    sources: dict[tuple[str, str], list[Source]] = {}
    contents: list[tuple[str, str | None]] = []
    for path in paths:
        lines: dict[tuple[str, str], int] = {}
        text = read_text(path)
        parsed = parse_ini(text, path, lines)
        contents.append((path, text))
        check_names(parsed, path, lines)
        for name, values in parsed.items():
            sections.setdefault(name, {}).update(values)
            origins.setdefault(name, []).append(path)
            for key, value in values.items():
                sources.setdefault((name, key), []).append(
                    Source(path, lines[(name, key)], value))

    def get(section: str, name: str) -> str | None:
        return given(section, sections.get(section, {}).get(name))

    try:
        settings = from_lookup(get, sections.__contains__,
                               dict(sections.get('flavors', {})),
                               paths[-1] if paths else None, origins)
        check_policy(settings)
    except ConfigError as exc:
        raise located(exc, sources) from None
    settings.paths, settings.sources = list(paths), sources
    settings.contents = contents
    settings.warnings += overridden(sources, list(settings.pools))
    return settings


def check_policy(settings: Settings) -> None:
    """``[policy]`` against the pools (:func:`ovs_rdt.core.policy.bounds_from`)
    when enabled: at load, so that every reader (the agent, ``config``,
    ``apply``, ``status``, the hook) refuses the same files the same way.
    """
    if settings.policy.enabled:
        from ovs_rdt.core.policy import bounds_from
        bounds_from(settings)


def overridden(sources: dict[tuple[str, str], list[Source]],
               pools: list[str]) -> list[str]:
    """A warning for each option of a ``[pool:NAME]`` section of ``pools``
    (those in use) that a later file sets to another value than an earlier
    one: one pool defined in several files is more likely a mistake than a
    plan (the last wins).
    """
    out = []
    used = {POOL_SECTION_PREFIX + name for name in pools}
    for (section, key), where in sources.items():
        last = where[-1]
        earlier = [w for w in where[:-1]
                   if w.path != last.path and w.value != last.value]
        if section in used and earlier:
            out.append('config file %s line %d: [%s] %s = %s overrides %s: '
                       'the last file read wins ("ovs-rdt config" shows '
                       'every value and where it comes from)'
                       % (last.path, last.line, section, key, last.value,
                          ', '.join('%s in %s line %d'
                                    % (w.value, w.path, w.line)
                                    for w in earlier)))
    return out


def _sha256(text: str | None) -> str | None:
    import hashlib
    return None if text is None else hashlib.sha256(
        text.encode('utf-8', 'surrogatepass')).hexdigest()


def fingerprint(paths: list[str]) -> dict[str, str | None]:
    """Each of ``paths`` as it is now, as a digest (None: it cannot be
    read), as :attr:`Settings.digests` has them as read.
    """
    out = {}
    for path in paths:
        try:
            out[path] = _sha256(read_text(path))
        except ConfigError:
            out[path] = None
    return out


def changes(read: dict[str, str | None], now: dict[str, str | None]
            ) -> list[str]:
    """How the files ``now`` (:func:`fingerprint`) differ from those
    ``read``, one phrase per file: ``F changed``, ``F is new``, ``F is
    gone``; empty when they are the same.
    """
    out = ['%s changed' % p for p in read if p in now and now[p] != read[p]]
    out += ['%s is new' % p for p in now if p not in read]
    out += ['%s is gone' % p for p in read if p not in now]
    return out
