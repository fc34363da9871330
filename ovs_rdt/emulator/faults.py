"""Injected faults: make chosen operations fail with a chosen errno.

``ovs-rdt emulate --faults FILE`` names a text file the daemon re-reads
whenever it changes (no remount), one rule a line::

    # OP      PATH (fnmatch, from the mount root)   ERRNO    [COUNT]
    write     /*/schemata                            ENOSPC
    mkdir     /ovsrdt-vm-*                           EBUSY    1
    any       *                                      EIO

OP is ``read``, ``write``, ``mkdir``, ``rmdir``, ``open``, ``readdir``,
``getattr`` or ``any``; ERRNO an errno name the kernel's resctrl can return
(``EIO``, ``ENOSPC``, ``EBUSY``, ``EINVAL``, ``ENODEV``, ``ENOENT``,
``EAGAIN``, ``ENOMEM``, ``EPERM``, ``EACCES``), or ``KILL``: the calling
process gets SIGKILL instead of an answer, as a ``kill -9`` at exactly that
step would (the stress suite kills the hook and the agent at each write of a
plan this way); or ``TERM``, ``HUP``, ``INT``: it gets that signal and the
operation goes through (it handles the signal when the call returns);
COUNT how many times the rule fires before it stops (default: every
time).  The first matching rule wins.
The operation fails before the model sees it, so nothing is half-done, as
when the kernel refuses a write.  A missing or empty file: no faults; a bad
line is logged and ignored (the daemon must keep serving).

A line ``diverge NAME`` turns on a kernel divergence
(:data:`~ovs_rdt.emulator.divergences.DIVERGENCES`) while it is in the file,
as ``ovs-rdt emulate --diverge NAME`` does for the life of the mount: the
emulator then behaves unlike the kernel in one way its ``info/`` files do
not explain, as a kernel with a bug or a different version might.
"""
from __future__ import annotations

import errno
import fnmatch
import logging
import signal
from typing import Optional

from ovs_rdt.emulator.divergences import DIVERGENCES
from ovs_rdt.emulator.monitor import file_stamp

LOG = logging.getLogger(__name__)

OPS = ('read', 'write', 'mkdir', 'rmdir', 'open', 'readdir', 'getattr', 'any')
ERRNOS = ('EIO', 'ENOSPC', 'EBUSY', 'EINVAL', 'ENODEV', 'ENOENT', 'EAGAIN',
          'ENOMEM', 'EPERM', 'EACCES')
#: Rules that signal the caller: name -> the pseudo-errno (minus the
#: signal's number).
SIGNALS = {name: -getattr(signal, 'SIG' + name)
           for name in ('KILL', 'TERM', 'HUP', 'INT')}
#: The pseudo-errno of a rule that kills the caller.
KILL = SIGNALS['KILL']


class Rule:
    __slots__ = ('op', 'pattern', 'errno', 'left')

    def __init__(self, op: str, pattern: str, err: int,
                 left: Optional[int]) -> None:
        self.op = op
        self.pattern = pattern
        self.errno = err
        self.left = left


def parse_rules(text: str) -> tuple[list[Rule], frozenset[str]]:
    """The rules of a faults file and its ``diverge NAME`` lines;
    ValueError names the line at fault.
    """
    rules, diverge = [], set()
    for lineno, line in enumerate(text.splitlines(), 1):
        words = line.split('#', 1)[0].split()
        if not words:
            continue
        if words[0] == 'diverge':
            if len(words) != 2 or words[1] not in DIVERGENCES:
                raise ValueError('line %d: %r is not "diverge NAME" (NAME: %s)'
                                 % (lineno, line, ', '.join(sorted(DIVERGENCES))))
            diverge.add(words[1])
            continue
        if len(words) not in (3, 4) or words[0] not in OPS \
                or words[2] not in ERRNOS + tuple(SIGNALS) or \
                (len(words) == 4 and not words[3].isdigit()):
            raise ValueError('line %d: %r is not "OP PATH ERRNO [COUNT]" '
                             '(OP: %s; ERRNO: %s)' % (lineno, line,
                                                      ', '.join(OPS),
                                                      ', '.join(ERRNOS)))
        rules.append(Rule(words[0], words[1], SIGNALS.get(words[2]) or
                          getattr(errno, words[2]),
                          int(words[3]) if len(words) == 4 else None))
    return rules, frozenset(diverge)


class Faults:
    """The rules of ``path``, re-read when the file changes; ``diverge``:
    the divergences of ``--diverge`` and of the file's ``diverge`` lines.
    """

    def __init__(self, path: Optional[str] = None,
                 diverge: frozenset[str] = frozenset()) -> None:
        self.path = path
        self.rules: list[Rule] = []
        self.fixed = diverge
        self.diverge = diverge
        self._stamp: Optional[tuple[int, int]] = None

    def refresh(self) -> None:
        if not self.path:
            return
        stamp = file_stamp(self.path)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        rules: list[Rule] = []
        diverge: frozenset[str] = frozenset()
        if stamp is not None:
            try:
                with open(self.path, encoding='utf-8') as fh:
                    rules, diverge = parse_rules(fh.read())
            except (OSError, ValueError) as exc:
                LOG.warning('Ignoring faults file %s: %s', self.path, exc)
                return
        self.rules = rules
        if diverge != self.diverge - self.fixed:
            LOG.warning('Diverging from the kernel: %s',
                        ', '.join(sorted(self.fixed | diverge)) or 'no more')
        self.diverge = self.fixed | diverge
        if rules:
            LOG.info('%d fault rule(s) from %s', len(rules), self.path)

    def check(self, op: str, path: str) -> Optional[int]:
        """The errno ``op`` on ``path`` must fail with, or None.

        Negative (:data:`SIGNALS`): signal the caller.
        """
        self.refresh()
        for rule in self.rules:
            if rule.op not in (op, 'any') or rule.left == 0 or \
                    not fnmatch.fnmatchcase(path, rule.pattern):
                continue
            if rule.left is not None:
                rule.left -= 1
            LOG.info('Injected fault: %s %s -> %s', op, path,
                     errno.errorcode.get(rule.errno) or
                     signal.Signals(-rule.errno).name)
            return rule.errno
        return None
