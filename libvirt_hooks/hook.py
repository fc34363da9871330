"""``ovs-rdt-hook``: what libvirt runs on every QEMU domain event.

libvirt runs ``qemu.d/50-ovs-rdt <domain> <op> <subop> <extra>`` with the
domain XML on standard input; the wrapper (``libvirt_hooks/wrapper.sh``,
installed by ``ovs-rdt install-hook``) starts this, one process per event,
with the ``--config-file F`` and ``--config-dir D`` it was installed with
before libvirt's four arguments, which are always the last four.  The
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
    script raised an error").
``reconnect begin``
    libvirtd restarted: make sure the group exists and holds the threads.
    Never fails: libvirt would kill the guest.
``migrate begin`` / ``restore begin``
    capacity check only: refuse an incoming guest this host cannot serve.
    (``prepare begin`` follows a moment later, still before any memory is
    copied, but libvirt runs it with the same arguments for a start and an
    incoming guest (``qemuProcessStartHook``: ``prepare begin -``), so
    only this event can name the incoming migration in its refusal.)

Nothing is ever written to standard output (for ``migrate`` and ``restore``
it would replace the domain XML), libvirt is never called back (it holds the
domain's lock while the hook runs), no daemon is asked (a hook's failure
touches its own domain only), and concurrent hooks serialise on the
resctrl ``flock``.  The rules are :mod:`ovs_rdt.guest`'s, which the agent
applies too.  Imports are per event and minimal: this runs several times on
every VM start.
"""
from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False   # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import BinaryIO

    from ovs_rdt.conf import Settings
    from ovs_rdt.core.plan import Plan
    from ovs_rdt.domain_xml import GuestDomain
    from ovs_rdt.guest import GuestCache
    from ovs_rdt.inputs.request import CacheRequest

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
          'DOMAIN OPERATION SUB-OPERATION EXTRA < domain.xml\n'
          '(run by libvirt from /etc/libvirt/hooks/qemu.d/; install it with '
          '"ovs-rdt install-hook")\n')

_LEVELS = {'debug': 7, 'info': 6, 'warning': 4, 'error': 3}


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
                 settings: Settings | None = None,
                 guests: GuestCache | None = None) -> None:
        from ovs_rdt.exceptions import show

        #: What the wrapper names (``--config-file``, ``--config-dir``).
        self.config_files = config_files
        self.config_dirs = config_dirs
        self.op = op
        self.subop = subop
        self.log = Log("domain '%s' %s %s" % (show(name), op, subop))
        #: The configuration and the rules, if given (``ovs-rdt
        #: check-domain``, a process whose logging stays its own), else
        #: read from the files named and made on first use.
        self._settings = settings
        self._guests = guests
        #: What still reads of a configuration that does not
        #: (:func:`ovs_rdt.conf.salvage`), once :attr:`settings` failed.
        self.salvaged: Settings | None = None
        #: The parsed domain, once it parsed.
        self.dom: GuestDomain | None = None

    @property
    def settings(self) -> Settings:
        """The configuration, read on first use."""
        if self._settings is None:
            from ovs_rdt import conf
            try:
                self._settings = conf.load_files(conf.config_paths(
                    self.config_files, self.config_dirs))
            except conf.ConfigError:
                # What still reads of it: all a release needs, and the log
                # file the refusal this causes goes to (without syslog,
                # that is all an operator has).
                self.salvaged = conf.salvage(self.config_files,
                                             self.config_dirs)
                self.log.configure(self.salvaged.default.log_file,
                                   self.salvaged.default.debug)
                raise
            self.log.configure(self._settings.default.log_file,
                               self._settings.default.debug)
        return self._settings

    @property
    def guests(self) -> GuestCache:
        """The rules (:class:`ovs_rdt.guest.GuestCache`), on first use,
        logging to this hook's log (:mod:`ovs_rdt.logs`).
        """
        if self._guests is None:
            from ovs_rdt.guest import GuestCache
            self._guests = GuestCache(self.settings, self.log)
        return self._guests

    def resolve(self, dom: GuestDomain) -> CacheRequest | None:
        """The validated request, or None when the VM asks for nothing."""
        from ovs_rdt import domain_xml
        from ovs_rdt.exceptions import ConfigError, show

        if not dom.wants_something or dom.annotation == {}:
            return None       # (an empty <rdt:rdt/> is an explicit "nothing")
        explicit = dom.annotation is not None or dom.flavor_asks
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
        return domain_xml.resolve(dom, settings)

    # -- events ---------------------------------------------------------------
    def unannotated(self, dom: GuestDomain) -> None:
        """A VM that asks for nothing: warn when its metadata looks like an
        annotation meant for ovs-rdt in another namespace.
        """
        why = dom.lookalike_warning()
        if why:
            try:
                self.settings       # (where the log goes; never needed)
            except Exception:  # noqa: BLE001 - a VM asking nothing starts
                pass
            self.log('warning', why)

    def prepare(self, dom: GuestDomain) -> int:
        from ovs_rdt.guest import guest_group

        spec = self.resolve(dom)
        if spec is None:
            self.unannotated(dom)
            return 0
        plan = self.guests.ensure(dom, spec)
        group = guest_group(dom, spec)
        masks = plan.masks_of(group) if plan is not None else {}
        if masks:       # planned: core.plan is loaded already
            from ovs_rdt.core.plan import domain_text
            masks_text = ' L3:' + domain_text(masks)
        else:
            masks_text = ''
        # (Each group moved for it has a line of its own, the manager's.)
        self.log('info', 'reserved %s: group %s%s' % (
            spec.describe(), group, masks_text))
        for kept in plan.kept if plan is not None else []:
            self.log('warning', kept)
        return 0

    def started(self, dom: GuestDomain) -> int:
        from ovs_rdt.guest import guest_group

        spec = self.resolve(dom)
        if spec is None:
            return 0
        group = guest_group(dom, spec)
        if not self.guests.group_exists(group):
            self.log('warning', 'group %s is missing; creating it' % group)
            self.guests.ensure(dom, spec)
        self.guests.place(group, self.guests.qemu_pid(dom))
        return 0

    def reconnect(self, dom: GuestDomain) -> int:
        """Like ``started`` (libvirtd restarted); its failures only log."""
        return self.started(dom)

    def release(self, dom: GuestDomain) -> int:
        from ovs_rdt.exceptions import ConfigError
        from ovs_rdt import vm_group

        # By UUID, whatever the XML says now: libvirt passes the live XML,
        # and `virsh metadata --live` may have dropped the annotation of a
        # VM that holds a group.  Never on the configuration: the group is
        # the UUID under the root it was made in, read from whatever of
        # the configuration still reads (conf.salvage).
        group = vm_group(dom.uuid)
        try:
            settings, why = self.settings, ''
        except ConfigError as exc:
            assert self.salvaged is not None    # (read as settings failed)
            settings = self._settings = self.salvaged
            why = str(exc)
        if not os.path.isdir(os.path.join(settings.resctrl.root, group)):
            return 0        # (looked at once: a release would look again)
        if not why:
            self.guests.manager.release(group)
            self.log('info', 'removed group %s' % group)
            return 0
        self.guests.manager.release_alone(group, why)
        self.log('warning', 'removed group %s alone, every other group as it '
                 'is: the configuration does not read (%s), and releasing '
                 'needs none: the group is the domain\'s UUID under [resctrl] '
                 'root %s; its ways go back to the default group at the next '
                 '"ovs-rdt apply" or VM start' % (group, why,
                                                  settings.resctrl.root))
        return 0

    def preview(self, dom: GuestDomain) -> tuple[CacheRequest | None,
                                                 Plan | None]:
        """What ``prepare`` would do, nothing written: the request (None:
        the VM asks for nothing) and the plan (None: no change); raises
        what ``prepare`` would refuse the VM with.
        """
        spec = self.resolve(dom)
        if spec is None:
            self.unannotated(dom)
            return None, None
        return spec, self.guests.check(dom, spec)

    def check(self, dom: GuestDomain) -> int:
        spec, _plan = self.preview(dom)
        if spec is None:
            return 0
        self.log('info', 'capacity check passed for %s' % spec.describe())
        return 0

    # -- failures -------------------------------------------------------------
    def unreserve(self) -> None:
        """Give back what ``prepare`` reserved for a VM that runs unmanaged.

        (Else its ways stay held, unused, until it stops.)
        """
        from ovs_rdt import vm_group

        if self.dom is None:
            return
        try:
            if self.guests.release(self.dom.uuid):
                self.log('info', 'removed group %s: the VM runs unmanaged'
                         % vm_group(self.dom.uuid))
        except Exception as exc:  # noqa: BLE001 - best effort, logged
            self.log('error', 'could not remove the VM\'s group: %s' % exc)

    def fail(self, strict: bool, dom_name: str, fix: str,
             message: str) -> int:
        """Fail the event: ``fix`` (what to do, :func:`remedy`) leads the
        one line libvirt shows, after its long ``PATH=...`` prefix.
        """
        from ovs_rdt.exceptions import show

        policy = 'refuse'
        try:
            policy = self.settings.libvirt.on_failure   # (and the log file)
        except Exception:  # noqa: BLE001 - a broken config means refuse
            pass
        text = '%s: %s' % (fix, message)
        if not strict:
            self.log('error', text)
            return 0
        if policy == 'warn':
            self.log('warning', 'starting it without a cache allocation '
                     '([libvirt] on_failure = warn): %s' % text)
            if self.op == 'started':
                self.unreserve()
            sys.stderr.write('ovs-rdt: warning: domain \'%s\' runs without a '
                             'cache allocation: %s\n' % (show(dom_name), text))
            return 0
        self.log('error', text)
        sys.stderr.write('ovs-rdt: %s domain \'%s\': %s\n'
                         % (REFUSING.get(self.op, self.op), show(dom_name),
                            text))
        return 1


#: How the refusal line names what a failed strict event does to the VM
#: (the wrapper's fallback words it the same: libvirt_hooks/wrapper.sh).
REFUSING = {'prepare': 'refusing to start',
            'started': 'stopping',
            'migrate': 'refusing the incoming migration of',
            'restore': 'refusing to restore'}


def remedy(exc: BaseException, dom: GuestDomain | None) -> str:
    """What to fix for ``exc``, ``dom`` the parsed domain (None: the XML
    did not parse): the words that lead a refusal line.
    """
    from ovs_rdt import exceptions as e
    from ovs_rdt.exceptions import quote

    if isinstance(exc, e.InvalidValue):
        if dom is not None and dom.annotation is None and dom.flavor_asks:
            return 'fix the extra specs of flavor %s' % quote(
                dom.flavor_name or '?')
        return 'fix the domain XML'
    if isinstance(exc, e.ConfigError):
        return 'fix the ovs-rdt configuration'
    if isinstance(exc, e.OutOfClosids):
        return 'free a CLOSID on this host (stop a VM), or use a pool'
    if isinstance(exc, e.AllocationError):
        return 'free cache ways on this host (stop a VM), or ask for fewer'
    if isinstance(exc, (e.ResctrlUnavailable, e.ResctrlError)):
        return 'check resctrl on this host'
    if isinstance(exc, e.RDTError):
        return 'check libvirt and resctrl on this host'
    return 'report this bug'


def read_stdin(stream: BinaryIO) -> bytes | None:
    """All of standard input, drained (libvirt never sees EPIPE); None when
    it is larger than :data:`MAX_STDIN` (no domain XML is).
    """
    chunks = []
    size = 0
    while True:
        chunk = stream.read(65536)
        if not chunk:
            break
        size += len(chunk)
        if size <= MAX_STDIN:
            chunks.append(chunk)
    return b''.join(chunks) if size <= MAX_STDIN else None


def parse_args(argv: list[str]
               ) -> tuple[list[str], list[str], list[str]] | None:
    """``[--config-file F]... [--config-dir D]... DOMAIN OP SUBOP EXTRA``:
    (files, dirs, libvirt's four arguments), None for a usage error.

    libvirt's arguments are the last four, whatever they look like (a
    domain may be named ``-db`` or ``--config-file=/x``); what comes before
    them is what the wrapper adds, options only.
    """
    if len(argv) < 4:
        return None
    found: dict[str, list[str]] = {'--config-file': [], '--config-dir': []}
    opts = argv[:-4]
    while opts:
        opt, eq, value = opts.pop(0).partition('=')
        if opt not in found or (not eq and not opts):
            return None
        found[opt].append(value if eq else opts.pop(0))
    return found['--config-file'], found['--config-dir'], argv[-4:]


def run(argv: list[str], data: bytes | None,
        spool: object = None) -> int:
    """Handle one event; ``data`` is the domain XML (None: standard input
    was larger than any domain XML).  Returns the exit code; the line for
    libvirt goes to standard error.  (``spool`` is ignored: the wrappers of
    development snapshots between 0.2.0 and 0.3.0 pass it.)
    """
    parsed = parse_args(argv)
    if parsed is None:
        sys.stderr.write(_USAGE)
        return 2
    files, dirs, (name, op, subop, _extra) = parsed
    event = EVENTS.get((op, subop))
    if event is None:
        return 0
    method, strict = event
    hook = Hook(files, dirs, name, op, subop)
    started = time.monotonic()
    try:
        rc = _handle(hook, method, strict, name, data)
    finally:
        # The stress suite's p50/p95/p99 hook time per event reads this.
        hook.log('debug', 'handled in %.1f ms'
                 % ((time.monotonic() - started) * 1000))
    return rc


def _handle(hook: Hook, method: str, strict: bool, name: str,
            data: bytes | None) -> int:
    from ovs_rdt import domain_xml
    from ovs_rdt.exceptions import AnnotationError, RDTError

    try:
        if data is None:
            raise AnnotationError('the domain XML on standard input is larger '
                                  'than %d MiB' % (MAX_STDIN >> 20))
        dom = hook.dom = domain_xml.parse(data)
        return int(getattr(hook, method)(dom))
    except RDTError as exc:
        return hook.fail(strict, name, remedy(exc, hook.dom), str(exc))
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback
        import traceback
        try:
            hook.settings            # to know where the log goes
        except Exception:  # noqa: BLE001
            pass
        hook.log('error', 'internal error: %s' % ''.join(
            traceback.format_exception(type(exc), exc, exc.__traceback__)
        ).replace('\n', ' | '))
        return hook.fail(strict, name, remedy(exc, hook.dom),
                         'internal error: %s: %s (details in the ovs-rdt log)'
                         % (type(exc).__name__, exc))


def main(argv: list[str] | None = None) -> int:
    """Entry point (``ovs-rdt-hook``, and the wrapper's); the exit status.

    Standard input is read whole first, whatever the event.
    """
    if argv is None:
        argv = sys.argv[1:]
    data = read_stdin(sys.stdin.buffer) if sys.stdin is not None else b''
    stdout = sys.stdout
    sys.stdout = sys.stderr   # nothing may reach libvirt's stdout pipe
    try:
        return run(argv, data)
    finally:
        sys.stdout = stdout


#: Tells the wrapper's fallback why the hook could not run.
FAILED_ENV = 'OVS_RDT_HOOK_FAILED'


def main_once(wrapper: str, argv: list[str]) -> None:
    """What the wrapper runs: :func:`run` in a process that lives for this
    one event, standard input read whole first; never returns.

    It skips the work that only pays off in a long-lived process: the
    cyclic garbage collector (it walks every object the imports create,
    again and again) and the interpreter's teardown (every module and
    object freed one by one; the kernel frees the memory and closes the
    files, the resctrl ``flock`` included, at exit): 3.1-3.6 ms of CPU per
    event (``bench/bench_hook.py``'s ablation).  Only standard error is
    written, flushed first.  Whatever escapes :func:`run` (an installation
    half gone: a module that does not import) goes to the wrapper's
    fallback (:func:`fall_back`), never a traceback.
    """
    import gc
    gc.disable()
    data = read_stdin(sys.stdin.buffer)
    sys.stdout = sys.stderr   # nothing may reach libvirt's stdout pipe
    try:
        rc = run(argv, data)
    except BaseException as exc:  # noqa: BLE001 - the fallback decides
        fall_back(wrapper, argv[-4:], data or b'', exc)
    sys.stderr.flush()
    os._exit(rc)


def fall_back(wrapper: str, args: list[str], data: bytes,
              exc: BaseException) -> None:
    """Run the wrapper's fallback for libvirt's ``args`` (the one rule for
    a hook that cannot run: ``libvirt_hooks/wrapper.sh``), the XML on its
    standard input again and :data:`FAILED_ENV` saying why; never returns.
    """
    fd = os.memfd_create('domain-xml')
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)
    os.environ[FAILED_ENV] = ' '.join(
        ('%s: %s' % (type(exc).__name__, exc)).split())
    sys.stderr.flush()
    os.execv('/bin/sh', ['/bin/sh', wrapper] + args)


if __name__ == '__main__':
    sys.exit(main())
