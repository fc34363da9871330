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
import re
import sys
from typing import TYPE_CHECKING
import uuid

from libvirt_hooks.hook import Hook, Log, MAX_STDIN, read_stdin, remedy
from ovs_rdt.conf import Settings
from ovs_rdt.core.model import ROOT, held
from ovs_rdt import domain_xml
from ovs_rdt.exceptions import count, RDTError, ResctrlError
from ovs_rdt.exceptions import ResctrlUnavailable, show
from ovs_rdt.guest import GuestCache, guest_group
from ovs_rdt import vm_group

if TYPE_CHECKING:
    from ovs_rdt.core.plan import Plan
    from ovs_rdt.domain_xml import GuestDomain
    from ovs_rdt.inputs.request import CacheRequest

EXIT_REFUSED = 3
EPILOG = '''exit status:
  0  the hook would start the VM: with the group shown, or in the default
     group when it asks ovs-rdt for nothing
  1  an error: FILE cannot be read or is empty, resctrl cannot be read, ...
  2  a bad command line or configuration file
  %d  the hook would refuse it (with [libvirt] on_failure = warn: start it
     without a cache allocation); the reason is printed

Use the configuration the hook is installed with ("ovs-rdt install-hook
--config-file ..."): the default is /etc/ovs-rdt/ovs-rdt.conf.
''' % EXIT_REFUSED
#: What keeps check-domain from telling what the hook would do (exit 1),
#: though the hook would refuse the VM for it too.
_CANNOT_TELL = (ResctrlError, ResctrlUnavailable)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument('file', metavar='FILE',
                        help='a libvirt domain XML; "-" reads standard '
                             'input (virsh dumpxml NAME | ovs-rdt '
                             'check-domain -)')


def read(path: str) -> bytes:
    """The XML of ``path`` (``-``: standard input); RDTError when it
    cannot be read, is empty or is larger than any domain XML.
    """
    where = 'standard input' if path == '-' else path
    try:
        if path == '-':
            data = read_stdin(sys.stdin.buffer)
        else:
            with open(path, 'rb') as fh:
                data = read_stdin(fh)
    except OSError as exc:
        raise RDTError('cannot read %s: %s' % (where, exc.strerror or exc)
                       ) from None
    if data is None:
        raise RDTError('%s is larger than %d MiB: no domain XML is'
                       % (where, MAX_STDIN >> 20))
    if not data.strip():
        raise RDTError('%s is empty' % where)
    return data


class _Said(Log):
    """The hook's log lines, kept (its warnings are printed)."""

    def __init__(self) -> None:
        super().__init__('check-domain')
        self.lines: list[tuple[str, str]] = []

    def __call__(self, level: str, msg: str) -> None:
        self.lines.append((level, msg))


def run(settings: Settings, args: argparse.Namespace) -> int:
    data = read(args.file)
    said = _Said()
    # The rules given: the hook's logging is not set up in this process.
    hook = Hook([], [], '-', 'prepare', 'begin', settings=settings,
                guests=GuestCache(settings, said))
    hook.log = said
    dom = None
    made_up = None
    try:
        dom = domain_xml.parse(data)
        if not dom.uuid_raw:
            # A file for "virsh define" may have none: libvirt gives it
            # one then, which the hook gets (and names the group after).
            made_up = dom.uuid_raw = str(uuid.uuid4())
        spec, plan = hook.preview(dom)
        lines = describe(hook.guests, dom, spec, plan)
        code = 0
    except _CANNOT_TELL:
        raise
    except RDTError as exc:
        lines = refused(settings, dom.name if dom is not None else
                        _name_in(data), '%s: %s' % (remedy(exc, dom), exc))
        code = EXIT_REFUSED
    for level, msg in said.lines:
        if level in ('warning', 'error'):
            lines.append('the hook would log: %s: %s' % (level, msg))
    if made_up:
        lines = [line.replace('(uuid %s)' % made_up, '(no <uuid> in the XML: '
                              'libvirt gives it one when it is defined)')
                 .replace(made_up, '<its uuid>') for line in lines]
    print('\n'.join(lines))
    return code


def _name_in(data: bytes) -> str | None:
    """The ``<name>`` of an XML that did not parse (for the message only:
    libvirt gives the hook the name of the domain it refuses).
    """
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


def describe(guests: GuestCache, dom: GuestDomain, spec: CacheRequest | None,
             plan: Plan | None) -> list[str]:
    """What the hook would do with ``dom``, which asks for ``spec`` (None:
    nothing), given the ``plan`` its ``prepare`` would make (None: no
    write).
    """
    name = "domain '%s'" % show(dom.name)
    if spec is None:
        why = ('an empty <rdt:rdt/> annotation' if dom.annotation == {}
               else 'no ovs-rdt annotation, no rdt: flavor extra spec%s'
               % (', flavor %s not in [flavors]' % show(dom.flavor_name)
                  if dom.flavor_name is not None else ''))
        return ['%s asks ovs-rdt for nothing (%s): the hook leaves it alone, '
                'its threads run in the default group' % (name, why)]
    group = guest_group(dom, spec)
    exists = guests.group_exists(group)
    resctrl = guests.resctrl
    if plan is not None:
        masks, root = plan.masks_of(group), plan.masks_of(ROOT)
    else:       # (a pool's group that exists, as it is)
        with resctrl.lock(exclusive=False):
            masks = resctrl.group(group, with_tasks=False).l3
            root = resctrl.group(ROOT, with_tasks=False).l3
    threads = count(dom.vcpu_count(), 'vCPU thread')
    if guests.settings.libvirt.include_emulator_threads:
        threads += (' and its other QEMU threads ([libvirt] '
                    'include_emulator_threads = true)')
    lines = ['%s (uuid %s) asks for %s' % (name, dom.uuid, spec.describe())]
    if spec.pool is not None:
        lines.append('the hook would put its %s in %s, the group of pool %s%s'
                     % (threads, group, spec.pool, '' if exists else
                        ' (created with the configured pools)'))
    else:
        lines.append('the hook would %s %s and put its %s in it'
                     % ('resize' if exists else 'create', group, threads))
    way_bytes = resctrl.platform().way_bytes
    for dom_id in sorted(masks):
        mask = masks[dom_id]
        if held(mask, root.get(dom_id)):
            lines.append('  cache domain %d: %s (%s, %d KiB)'
                         % (dom_id, mask, count(mask.count, 'way'),
                            mask.count * way_bytes(dom_id) // 1024))
        else:
            lines.append('  cache domain %d: no ways of its own (its vCPUs '
                         'do not run there: it follows the default group)'
                         % dom_id)
    written = plan.mb.get(group) if plan is not None else None
    if written and (spec.mb_percent or spec.mb_mbps) and spec.pool is None:
        lines.append('  memory bandwidth: MB:%s written (what it asks, '
                     'rounded up to the hardware\'s granularity)'
                     % ';'.join('%d=%d' % kv for kv in sorted(written.items())))
    if plan is not None:
        lines.extend('  and it removes %s, the dedicated group of an earlier '
                     'definition of the VM' % stale for stale in plan.remove
                     if stale == vm_group(dom.uuid))
        lines.extend('  and it %s' % move for move in plan.moves)
        lines.extend('  (%s)' % kept for kept in plan.kept)
        lines.append('free ways after it: %s' % ', '.join(
            'cache domain %d: %d' % kv for kv in sorted(free_after(
                guests, plan).items())))
    return lines


def free_after(guests: GuestCache, plan: Plan) -> dict[int, int]:
    """What one more VM would get once ``plan`` is made: the one free
    count (:meth:`ovs_rdt.manager.CacheManager.room`, as ``status`` and
    ``provider-config`` count it).
    """
    from ovs_rdt.cmd.provider_config import layout_groups

    platform, groups = guests.manager.read()
    return guests.manager.room((platform, layout_groups(plan, groups)))
