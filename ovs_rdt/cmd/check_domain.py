"""``ovs-rdt check-domain FILE``: what the libvirt hook would do with a
domain XML on this node, without doing it.

``virsh dumpxml NAME | ovs-rdt check-domain -`` reads standard input.  The
XML goes through the hook's own code (:class:`libvirt_hooks.hook.Hook`):
the same parser and rules (a bad annotation gets the message the hook
refuses the VM with), the same resolution of what the VM asks for (the
annotation, then the flavor's extra specs, then ``[flavors]``) and the
plan its ``prepare`` event would make, through the hook's no-write path
(:meth:`~libvirt_hooks.hook.Hook.preview`, what it runs for an incoming
migration).  Nothing is written; resctrl is read under the shared lock.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from libvirt_hooks.hook import Log
from ovs_rdt.conf import Settings
from ovs_rdt.core.model import ROOT, held
from ovs_rdt.exceptions import RDTError, show

EXIT_REFUSED = 3
EPILOG = '''exit status:
  0  the hook would start the VM: with the group shown, or in the default
     group when it asks ovs-rdt for nothing
  1  an error: FILE or resctrl cannot be read, ...
  2  a bad command line or configuration file
  %d  the hook would refuse it (with [libvirt] on_failure = warn: start it
     without a cache allocation); the reason is printed

Use the configuration the hook is installed with ("ovs-rdt install-hook
--config-file ..."): the default is /etc/ovs-rdt/ovs-rdt.conf.
''' % EXIT_REFUSED


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument('file', metavar='FILE',
                        help='a libvirt domain XML; "-" reads standard '
                             'input (virsh dumpxml NAME | ovs-rdt '
                             'check-domain -)')


def read(path: str) -> bytes | None:
    """The XML (None: larger than any domain XML, as the hook says)."""
    from libvirt_hooks.hook import read_stdin

    if path == '-':
        return read_stdin(sys.stdin.buffer)
    with open(path, 'rb') as fh:
        return read_stdin(fh)


class _Said(Log):
    """The hook's log lines, kept (its warnings are printed)."""

    def __init__(self) -> None:
        super().__init__('check-domain')
        self.lines: list[tuple[str, str]] = []

    def __call__(self, level: str, msg: str) -> None:
        self.lines.append((level, msg))


def run(settings: Settings, args: argparse.Namespace) -> int:
    from libvirt_hooks import domain
    from libvirt_hooks.hook import Hook, MAX_STDIN

    try:
        data = read(args.file)
    except OSError as exc:
        raise RDTError('cannot read %s: %s' % (args.file,
                                               exc.strerror or exc)) from None
    hook = Hook([], [], '-', 'prepare', 'begin', settings=settings)
    said = hook.log = _Said()
    dom = None
    try:
        if data is None:
            raise RDTError('the domain XML is larger than %d MiB'
                           % (MAX_STDIN >> 20))
        dom = domain.parse(data)
        spec, plan = hook.preview(dom)
        lines = describe(hook, dom, spec, plan)
        code = 0
    except RDTError as exc:
        lines = refused(settings, dom.name if dom is not None else
                        _name_in(data or b''), str(exc))
        code = EXIT_REFUSED
    for level, msg in said.lines:
        if level in ('warning', 'error'):
            lines.append('the hook would log: %s: %s' % (level, msg))
    print('\n'.join(lines))
    return code


def _name_in(data: bytes) -> str | None:
    """The ``<name>`` of an XML that did not parse (for the message only:
    libvirt gives the hook the name of the domain it refuses).
    """
    import re

    found = re.search(rb'<name>([^<]{1,1024})</name>', data)
    return found.group(1).decode('utf-8', 'replace') if found else None


def refused(settings: Settings, dom_name: str | None, why: str) -> list[str]:
    name = "domain '%s'" % show(dom_name) if dom_name is not None else \
        'the domain'
    if settings.libvirt.on_failure == 'warn':
        return ['%s: the hook would start it without a cache allocation, '
                'its threads in the default group ([libvirt] on_failure = '
                'warn): %s' % (name, why)]
    return ['%s: the hook would refuse to start it: %s' % (name, why)]


def describe(hook: Any, dom: Any, spec: Any, plan: Any) -> list[str]:
    """What the hook would do with ``dom``, which asks for ``spec`` (None:
    nothing), given the ``plan`` its ``prepare`` would make (None: no
    write).
    """
    from ovs_rdt.guest import group_of

    name = "domain '%s'" % show(dom.name)
    if spec is None:
        why = ('an empty <rdt:rdt/> annotation' if dom.annotation == {}
               else 'no ovs-rdt annotation, no rdt: flavor extra spec%s'
               % (', flavor %s not in [flavors]' % show(dom.flavor_name)
                  if dom.flavor_name is not None else ''))
        return ['%s asks ovs-rdt for nothing (%s): the hook leaves it alone, '
                'its threads run in the default group' % (name, why)]
    settings = hook.settings
    group = group_of(dom, spec)
    rc = hook.guests.rc
    platform = rc.platform()
    with rc.lock(exclusive=False):
        now = {g.name: g for g in rc.groups(with_tasks=True)}
    if plan is not None:
        masks, root = plan.masks_of(group), plan.masks_of(ROOT)
    else:
        masks = now[group].l3 if group in now else {}
        root = now[ROOT].l3 if ROOT in now else {}
    threads = '%d vCPU thread%s' % (dom.vcpu_count(),
                                    '' if dom.vcpu_count() == 1 else 's')
    if settings.libvirt.include_emulator_threads:
        threads += (' and its other QEMU threads ([libvirt] '
                    'include_emulator_threads = true)')
    lines = ['%s (uuid %s) asks for %s' % (name, dom.uuid, spec.describe())]
    if spec.pool is not None:
        lines.append('the hook would put its %s in %s, the group of pool %s%s'
                     % (threads, group, spec.pool, '' if group in now else
                        ' (created with the configured pools)'))
    else:
        lines.append('the hook would %s %s and put its %s in it'
                     % ('resize' if group in now else 'create', group,
                        threads))
    for dom_id in sorted(masks):
        mask = masks[dom_id]
        if held(mask, root.get(dom_id)):
            lines.append('  cache domain %d: %s (%d ways, %d KiB)'
                         % (dom_id, mask, mask.count,
                            mask.count * platform.way_bytes(dom_id) // 1024))
        else:
            lines.append('  cache domain %d: no ways of its own (its vCPUs '
                         'do not run there: it follows the default group)'
                         % dom_id)
    if plan is not None:
        lines.extend('  and it %s' % move for move in plan.moves)
        if plan.free:
            lines.append('free ways after it: %s' % ', '.join(
                'cache domain %d: %d' % kv for kv in sorted(plan.free.items())))
    return lines
