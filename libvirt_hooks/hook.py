"""``ovs-rdt-hook``: what libvirt runs on every QEMU domain event.

libvirt runs ``qemu.d/50-ovs-rdt <domain> <op> <subop> <extra>`` with the
domain XML on standard input (the wrapper written by ``ovs-rdt install-hook``
adds the ``--config-file F`` and ``--config-dir D`` it was given first).  The
configuration is read by the rule of every command
(:func:`ovs_rdt.conf.config_paths`): a named file or directory that is
missing is an error, never the defaults.  The events handled:

``prepare begin``
    validate what the VM asks for and reserve it: a dedicated
    ``ovsrdt-vm-<uuid>`` group with its ways on the cache domains its vCPUs
    may use, or the shared pool's group.  A refusal (exit 1, one line on
    standard error, which ``virsh start`` shows) stops the start, unless
    ``[libvirt] on_failure = warn``.
``started begin``
    move the QEMU's vCPU threads (and, per ``[libvirt]
    include_emulator_threads``, its other threads) into that group.
``release end``
    remove the VM's dedicated group and give its ways back (idempotent).
    libvirt runs it right after ``stopped end``, in the same call
    (``qemuProcessStop``), whichever way the QEMU ended: ``stopped end``
    does nothing here, and the wrapper ends it without starting Python.
    libvirt ignores its status ("we can't stop the operation even if the
    script raised an error"): served, it is answered once the group is
    locked (:meth:`Hook.release`), and done after.
``reconnect begin``
    libvirtd restarted: make sure the group exists and holds the threads.
    Never fails: libvirt would kill the guest.
``migrate begin`` / ``restore begin``
    capacity check only: refuse an incoming guest this host cannot serve.

Nothing is ever written to standard output (for ``migrate`` and ``restore``
it would replace the domain XML), libvirt is never called back (it holds the
domain's lock while the hook runs), and concurrent hooks serialise on the
resctrl ``flock``.  Imports are per event and minimal: this runs several
times on every VM start.
"""
from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False   # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any, BinaryIO

    from libvirt_hooks.domain import Domain
    from libvirt_hooks.server import Served
    from ovs_rdt.core.allocator import Plan
    from ovs_rdt.core.model import Request
    from ovs_rdt.inputs.request import CacheRequest
    from ovs_rdt.manager import CacheManager
    from ovs_rdt.resctrl import Resctrl

# event -> (handler name, strict): strict events may refuse (exit 1).
EVENTS = {
    ('prepare', 'begin'): ('prepare', True),
    ('started', 'begin'): ('started', True),
    ('release', 'end'): ('release', False),
    ('reconnect', 'begin'): ('reconnect', False),
    ('migrate', 'begin'): ('check', True),
    ('restore', 'begin'): ('check', True),
}

MAX_STDIN = 4 * 1024 * 1024
_USAGE = ('usage: ovs-rdt-hook [--config-file FILE]... [--config-dir DIR]... '
          'DOMAIN OPERATION SUB-OPERATION [EXTRA] < domain.xml\n'
          '(run by libvirt from /etc/libvirt/hooks/qemu.d/; install it with '
          '"ovs-rdt install-hook")\n')

_LEVELS = {'debug': 7, 'info': 6, 'warning': 4, 'error': 3}


class Refusal(Exception):
    """Raised by a handler to fail the event with this exact message."""


class Log:
    """One line per record to ``[DEFAULT] log_file`` and syslog.

    Standard error is kept for the one line libvirt shows on a refusal; the
    ``logging`` module is not imported for this (it is slow to import).
    """

    #: Also send info and above to syslog (ident ovs-rdt-hook).
    use_syslog = True

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.path: str | None = None
        self.debug_on = False

    def configure(self, path: str | None, debug: bool) -> None:
        self.path = path
        self.debug_on = debug

    def __call__(self, level: str, msg: str) -> None:
        if level == 'debug' and not self.debug_on:
            return
        line = '%s: %s' % (self.prefix, ' | '.join(
            part for part in msg.strip().splitlines() if part))
        if self.path:
            import time
            stamp = time.strftime('%Y-%m-%d %H:%M:%S')
            text = '%s ovs-rdt-hook[%d] %s %s\n' % (
                stamp, os.getpid(), level.upper(), line)
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                             | os.O_CLOEXEC, 0o640)
                try:
                    os.write(fd, text.encode('utf-8', 'replace'))
                finally:
                    os.close(fd)
            except OSError:
                pass
        if self.use_syslog and level != 'debug':
            try:
                import syslog
                syslog.openlog('ovs-rdt-hook', syslog.LOG_PID,
                               syslog.LOG_DAEMON)
                syslog.syslog(_LEVELS[level], line)
            except (ImportError, OSError):
                pass


class Hook:
    """One hook invocation: a domain, an event, the XML."""

    def __init__(self, config_files: list[str], config_dirs: list[str],
                 name: str, op: str, subop: str,
                 served: Served | None = None) -> None:
        from ovs_rdt.exceptions import show

        #: What the wrapper names (``--config-file``, ``--config-dir``).
        self.config_files = config_files
        self.config_dirs = config_dirs
        self.op = op
        self.subop = subop
        self.log = Log("domain '%s' %s %s" % (show(name), op, subop))
        #: Run by the hook server (:class:`libvirt_hooks.server.Served`):
        #: it takes the line for libvirt, this event's log (for the core's
        #: records: a process with logging of its own), lends the platforms
        #: it read at earlier events and may answer early.
        self.served = served
        #: Where the one line libvirt shows goes.
        self.err = sys.stderr if served is None else served.err
        if served is not None:
            served.attach(self.log)
        self._settings: Any = None
        self._manager: CacheManager | None = None
        self._rc: Resctrl | None = None
        #: The parsed domain, once it parsed.
        self.dom: Domain | None = None

    @classmethod
    def embedded(cls, settings: Any, manager: CacheManager, name: str,
                 log: Any) -> Hook:
        """The hook's rules driven by ovs-rdt-agent (placing a domain that
        started without the hook): its settings, manager and ``log(level,
        message)``, no configuration file read.
        """
        hook = cls([], [], name, 'agent', '-')
        hook._settings, hook._manager = settings, manager
        hook._rc = manager.resctrl
        hook.log = log
        return hook

    # -- lazily built context ---------------------------------------------
    @property
    def settings(self) -> Any:
        """The configuration (a conf.Settings), read on first use."""
        if self._settings is None:
            from ovs_rdt import conf
            self._settings = conf.load_files(conf.config_paths(
                self.config_files, self.config_dirs))
            self.log.configure(self._settings.default.log_file,
                               self._settings.default.debug)
        return self._settings

    @property
    def manager(self) -> CacheManager:
        if self._manager is None:
            from ovs_rdt import manager
            self._manager = manager.CacheManager(self.rc, self.settings)
            if self.served is None:     # (else the server forwards them)
                _bridge_logging(self.log)
                manager.LOG.on_import = lambda: _bridge_logging(self.log)
        return self._manager

    @property
    def rc(self) -> Resctrl:
        """The resctrl layer (without the manager, which imports more)."""
        if self._rc is None:
            self._rc = self.make_resctrl()
        return self._rc

    def make_resctrl(self) -> Resctrl:
        from ovs_rdt.resctrl import Resctrl
        return Resctrl.from_settings(
            self.settings, None if self.served is None else self.served.platforms)

    def group_exists(self, group: str) -> bool:
        return os.path.isdir(os.path.join(self.settings.resctrl.root, group))

    # -- what the VM asks for -----------------------------------------------
    def resolve(self, dom: Domain) -> CacheRequest | None:
        """The validated request, or None when the VM asks for nothing."""
        from libvirt_hooks import domain
        from ovs_rdt.exceptions import ConfigError, show

        if not dom.wants_something or dom.annotation == {}:
            return None       # (an empty <rdt:rdt/> is an explicit "nothing")
        explicit = dom.annotation is not None or bool(
            dom.extra_specs and any(k.startswith('rdt:')
                                    for k in dom.extra_specs))
        try:
            settings = self.settings
        except ConfigError as exc:
            if not explicit:
                # Only a flavor name to look up in [flavors]: a broken
                # config must not stop VMs that asked for nothing.
                self.log('warning', 'not looking up flavor %s in [flavors]: '
                         '%s' % (show(dom.flavor_name or ''), exc))
                return None
            raise
        return domain.resolve(dom, settings)

    def request(self, dom: Domain, spec: CacheRequest) -> Request:
        """The allocator request of a dedicated-CLOS VM."""
        from ovs_rdt.core.model import Request, mb_terms, vm_group
        from ovs_rdt.inputs.request import check_host, l3_ways_on

        platform = self.rc.platform()
        check_host(spec, None, platform.cbm_len, *mb_terms(platform.mb))
        # Unpinned, or pinned to a CPU of unknown cache domain: every domain.
        domains = platform.domains_of_cpus(dom.vcpu_cpus())
        # By size (l3_kib): the ways of this node's size that hold it.
        return Request(vm_group(dom.uuid),
                       ways={d: l3_ways_on(spec, platform.cbm_len,
                                           platform.way_bytes(d))
                             for d in sorted(domains)},
                       exclusive=True, mb_percent=spec.mb_percent,
                       mb_mbps=spec.mb_mbps)

    def group_of(self, dom: Domain, spec: CacheRequest) -> str:
        from ovs_rdt.core.model import pool_group, vm_group
        return pool_group(spec.pool) if spec.pool else vm_group(dom.uuid)

    def ensure_group(self, dom: Domain, spec: CacheRequest) -> Plan | None:
        """Reserve what the VM asks for; returns the plan, None if no change.

        A dedicated group is created or resized; for a pool VM, the pool's
        group is created if missing (and a dedicated group left over from
        an earlier definition of the VM removed).
        """
        from ovs_rdt.core.model import vm_group

        if spec.pool is None:
            # The platform is read under the lock the plan is made under:
            # then nothing checks that it is still current (one read).
            with self.rc.lock():
                return self.manager.allocate(self.request(dom, spec))
        stale = self.group_exists(vm_group(dom.uuid))
        if stale or not self.group_exists(self.group_of(dom, spec)):
            # Every mutation plans the whole desired state, configured
            # pools included: releasing the VM's dedicated group (left over
            # if the VM used to have one) also creates the pool's group.
            plan = self.manager.release(vm_group(dom.uuid))
            if not self.group_exists(self.group_of(dom, spec)):
                raise Refusal('the group %s of pool %s was not created%s'
                              % (self.group_of(dom, spec), spec.pool,
                                 ': ' + plan.unplaced if plan.unplaced
                                 else ''))
            return plan
        return None

    # -- events ---------------------------------------------------------------
    def prepare(self, dom: Domain) -> int:
        spec = self.resolve(dom)
        if spec is None:
            return 0
        plan = self.ensure_group(dom, spec)
        group = self.group_of(dom, spec)
        masks = plan.masks_of(group) if plan is not None else {}
        if masks:       # planned: core.plan is loaded already
            from ovs_rdt.core.plan import domain_text
            masks_text = ' L3:' + domain_text(masks)
        else:
            masks_text = ''
        self.log('info', 'reserved %s: group %s%s' % (
            spec.describe(), group, masks_text))
        return 0

    def started(self, dom: Domain) -> int:
        from ovs_rdt.exceptions import show
        from ovs_rdt import procfs

        spec = self.resolve(dom)
        if spec is None:
            return 0
        group = self.group_of(dom, spec)
        if not self.group_exists(group):
            self.log('warning', 'group %s is missing; creating it' % group)
            self.ensure_group(dom, spec)
        run_dir = self.settings.libvirt.qemu_run_dir
        pid = None
        for candidate in pidfiles(run_dir, dom.name):
            pid = procfs.read_pidfile(candidate)
            if pid is not None:
                break
        pidfile = candidate if pid is not None else pidfiles(run_dir,
                                                             dom.name)[0]
        if pid is None:
            raise Refusal('no running QEMU for the domain: %s is missing or '
                          'names no live process' % pidfile)
        guest = procfs.qemu_guest(pid)
        if guest is None or guest[1] != dom.uuid:
            raise Refusal('process %d (from %s) is not the QEMU of domain '
                          'uuid %s (it runs %s)'
                          % (pid, pidfile, dom.uuid,
                             show(' '.join(procfs.cmdline(pid)[:1]) or '?')))
        self.place(group, pid)
        return 0

    def place(self, group: str, pid: int,
              placed: frozenset[int] = frozenset()) -> list[int]:
        """Move QEMU ``pid``'s threads into ``group`` (vCPUs, and the others
        per ``[libvirt] include_emulator_threads``) but those ``placed``
        already; returns the TIDs moved.
        """
        from ovs_rdt import procfs

        vcpus, others = procfs.qemu_threads(
            pid, self.settings.libvirt.include_emulator_threads)
        if not vcpus:
            raise Refusal('QEMU process %d has no vCPU threads (named "CPU '
                          'n/KVM")' % pid)
        tids = [t for t in vcpus + others if t not in placed]
        if not tids:
            return []
        with self.rc.lock():
            gone = set(self.rc.add_tasks(group, tids))
        moved = [t for t in tids if t not in gone]
        self.log('info', 'moved vCPU threads %s and %d other threads of QEMU '
                 '%d into %s%s' % (
                     ','.join(str(t) for t in vcpus if t in moved) or '-',
                     len([t for t in others if t in moved]), pid, group,
                     ' (%d exited meanwhile)' % len(gone) if gone else ''))
        return moved

    def reconnect(self, dom: Domain) -> int:
        """Like ``started`` (libvirtd restarted); its failures only log."""
        return self.started(dom)

    def release(self, dom: Domain) -> int:
        from ovs_rdt.exceptions import RDTError
        from ovs_rdt import VM_GROUP_PREFIX

        # By UUID, whatever the XML says now: libvirt passes the live XML,
        # and `virsh metadata --live` may have dropped the annotation of a
        # VM that holds a group.  (A VM that asks for nothing still never
        # depends on a readable configuration.)  What model.vm_group()
        # gives, without importing the model for every VM that stops.
        group = VM_GROUP_PREFIX + dom.uuid
        try:
            exists = self.group_exists(group)
        except RDTError:
            if dom.wants_something:
                raise
            return 0
        if not exists:
            return 0
        with self.rc.lock():
            # libvirt ignores this event's status: a hook server answers
            # now, the group locked, so that whatever comes next (the VM
            # started again, by the server or by a hook process) waits for
            # the removal on the lock.  Never refused for want of room (the
            # manager logs what it kept).
            if self.served is not None:
                self.served.answer()
            self.manager.release(group)
        self.log('info', 'removed group %s' % group)
        return 0

    def check(self, dom: Domain) -> int:
        from ovs_rdt.core.model import vm_group

        spec = self.resolve(dom)
        if spec is None:
            return 0
        if spec.pool is None:
            # (Read under the lock the plan is made under, as ensure_group.)
            with self.rc.lock(exclusive=False):
                plan = self.manager.preview(change=self.request(dom, spec))
        elif not self.group_exists(self.group_of(dom, spec)):
            plan = self.manager.preview(remove=vm_group(dom.uuid))
        else:
            plan = None
        self.log('info', 'capacity check passed for %s%s' % (
            spec.describe(), '' if plan is None else ' (free ways after: %s)'
            % ', '.join('domain %d: %d' % i for i in sorted(plan.free.items()))))
        return 0

    # -- failures -------------------------------------------------------------
    def unreserve(self) -> None:
        """Give back what ``prepare`` reserved for a VM that runs unmanaged.

        (Else its ways stay held, unused, until it stops.)
        """
        from ovs_rdt.core.model import vm_group

        if self.dom is None:
            return
        group = 'the VM\'s group'
        try:
            group = vm_group(self.dom.uuid)
            if self.group_exists(group):
                self.manager.release(group)
                self.log('info', 'removed group %s: the VM runs unmanaged'
                         % group)
        except Exception as exc:  # noqa: BLE001 - best effort, logged
            self.log('error', 'could not remove %s: %s' % (group, exc))

    def fail(self, strict: bool, dom_name: str, message: str) -> int:
        from ovs_rdt.exceptions import show

        policy = 'refuse'
        try:
            policy = self.settings.libvirt.on_failure   # (and the log file)
        except Exception:  # noqa: BLE001 - a broken config means refuse
            pass
        if not strict:
            self.log('error', message)
            return 0
        what = {'prepare': 'refusing to start',
                'started': 'stopping',
                'migrate': 'refusing the incoming migration of',
                'restore': 'refusing to restore'}.get(self.op, self.op)
        if policy == 'warn':
            self.log('warning', 'starting it without a cache allocation '
                     '([libvirt] on_failure = warn): %s' % message)
            if self.op == 'started':
                self.unreserve()
            self.err.write('ovs-rdt: warning: domain \'%s\' runs without a '
                           'cache allocation: %s\n' % (show(dom_name),
                                                       message))
            return 0
        self.log('error', message)
        self.err.write('ovs-rdt: %s domain \'%s\': %s\n'
                       % (what, show(dom_name), message))
        return 1


# libvirt's virPidFileBuildPath names the pidfile after the domain name
# escaped for XML (virBufferEscapeString: control characters dropped), so
# "a'b" has "a&apos;b.pid"; older releases used the name as it is.
_PIDFILE_ESCAPES: dict[int, str | None] = {
    ord('&'): '&amp;', ord('<'): '&lt;', ord('>'): '&gt;', ord('"'): '&quot;',
    ord("'"): '&apos;'}
_PIDFILE_ESCAPES.update((c, None) for c in range(1, 0x1a)
                        if c not in (9, 10, 13))


def pidfiles(run_dir: str, name: str) -> list[str]:
    """Where libvirt keeps the domain's QEMU pid, most likely first."""
    escaped = name.translate(_PIDFILE_ESCAPES)
    return [os.path.join(run_dir, n + '.pid')
            for n in ((escaped, name) if escaped != name else (name,))]


def log_record(log: Log, record: Any) -> None:
    """One of the core's ``logging`` records as a line of ``log``
    (levels by number: ``logging`` is not imported for this).
    """
    n = record.levelno
    level = ('error' if n >= 40 else 'warning' if n >= 30 else
             'info' if n >= 20 else 'debug')
    try:
        log(level, record.getMessage())
    except Exception:  # noqa: BLE001 - logging must never raise
        pass


def _bridge_logging(log: Log) -> None:
    """Route the core's ``logging`` records (if it imported logging) to us."""
    if 'logging' not in sys.modules:
        return
    import logging

    class _Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            log_record(log, record)

    core = logging.getLogger('ovs_rdt')
    core.handlers[:] = [_Handler()]
    core.setLevel(logging.DEBUG if log.debug_on else logging.INFO)
    core.propagate = False


def read_stdin(stream: BinaryIO) -> bytes:
    """All of standard input (drained, so libvirt never sees EPIPE), bounded."""
    chunks = []
    size = 0
    while True:
        chunk = stream.read(65536)
        if not chunk:
            break
        if size <= MAX_STDIN:
            chunks.append(chunk)
        size += len(chunk)
    return b''.join(chunks)


def parse_args(argv: list[str]
               ) -> tuple[list[str], list[str], list[str]] | None:
    """``[--config-file F]... [--config-dir D]... DOMAIN OP SUBOP [EXTRA]``
    without argparse: (files, dirs, the rest), None for a usage error.
    """
    found: dict[str, list[str]] = {'--config-file': [], '--config-dir': []}
    args = list(argv)
    while args and args[0].startswith('--config-'):
        opt, eq, value = args.pop(0).partition('=')
        if opt not in found or (not eq and not args):
            return None
        found[opt].append(value if eq else args.pop(0))
    if len(args) < 2 or args[0].startswith('-'):
        return None
    return found['--config-file'], found['--config-dir'], args


def run(argv: list[str], data: bytes, served: Served | None = None,
        spool: str | None = None) -> int:
    """Handle one event; ``data`` is the domain XML.  Returns the exit code.

    The line for libvirt goes to standard error, or when the hook server
    runs the event (``served``, see :class:`Hook`) to its reply.  ``spool``:
    the wrapper asked a hook server, which did not answer; with nothing
    left on standard input, the XML is in this spool file if the server
    took the event (:mod:`libvirt_hooks.protocol`), else it is lost.
    """
    parsed = parse_args(argv)
    if parsed is None:
        (sys.stderr if served is None else served.err).write(_USAGE)
        return 2
    files, dirs, args = parsed
    name, op = args[0], args[1]
    subop = args[2] if len(args) > 2 else '-'
    event = EVENTS.get((op, subop))
    if event is None:
        return 0
    method, strict = event
    asked = False
    if spool is not None and not data.strip():
        # netcat took standard input to a server that did not answer:
        # what the server kept of it.  (A standard input that still holds
        # anything is libvirt's XML: no server read it.)
        from libvirt_hooks.protocol import take_spool
        kept = take_spool(spool, argv)
        if kept is None:
            asked = True
        else:
            data = kept
    hook = Hook(files, dirs, name, op, subop, served)
    started = time.monotonic()
    try:
        rc = _handle(hook, method, strict, name, data, asked)
    finally:
        # The stress suite's p50/p95/p99 hook time per event reads this.
        hook.log('debug', 'handled in %.1f ms'
                 % ((time.monotonic() - started) * 1000))
    return rc


def _handle(hook: Hook, method: str, strict: bool, name: str,
            data: bytes, asked: bool = False) -> int:
    from libvirt_hooks import domain
    from ovs_rdt.exceptions import RDTError

    try:
        try:
            dom = hook.dom = domain.parse(data)
        except RDTError as exc:
            if not asked:
                raise
            # A hook server killed while it read the request took the XML
            # with it.  libvirt would stop a guest that has started: not
            # on our error (the agent's guest watch places its threads).
            return hook.fail(strict and method != 'started', name, (
                '%s (the hook server did not answer: killed while it read '
                'this event, it took the domain XML with it?)' % exc))
        return int(getattr(hook, method)(dom))
    except (RDTError, Refusal) as exc:
        return hook.fail(strict, name, str(exc))
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        import traceback
        try:
            hook.settings            # to know where the log goes
        except Exception:  # noqa: BLE001
            pass
        hook.log('error', 'internal error: %s' % ''.join(
            traceback.format_exception(type(exc), exc, exc.__traceback__)
        ).replace('\n', ' | '))
        return hook.fail(strict, name, 'internal error: %s: %s (details in '
                         'the ovs-rdt log)' % (type(exc).__name__, exc))


def main(argv: list[str] | None = None) -> int:
    """Entry point (``ovs-rdt-hook``); returns the exit status."""
    if argv is None:
        argv = sys.argv[1:]
    stdout = sys.stdout
    sys.stdout = sys.stderr   # nothing may reach libvirt's stdout pipe
    try:
        data = read_stdin(sys.stdin.buffer) if sys.stdin is not None else b''
        return run(argv, data)
    finally:
        sys.stdout = stdout


if __name__ == '__main__':
    sys.exit(main())
