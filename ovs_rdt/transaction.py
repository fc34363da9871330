"""Applies a plan's steps to resctrl in order, and undoes them if one fails.

ovsdbapp's shape: each op of :mod:`ovs_rdt.core.plan` is a command
(:data:`COMMANDS`: the :class:`~ovs_rdt.resctrl.Resctrl` method that does
it, and how what it replaced is written back), and a :class:`Transaction`
commits a list of steps as one: anything that stops the sequence (a
refused write, but also a signal) undoes what was applied, newest first,
so nothing is left half-done.  The caller holds the lock.
"""
from __future__ import annotations

from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.model import MODE_EXCLUSIVE, MODE_SHAREABLE, Group
from ovs_rdt.core.plan import EVENT, MKDIR, MODE, RMDIR, SCHEMATA, Step
from ovs_rdt.exceptions import RDTError

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Callable

    from ovs_rdt.logs import Log
    from ovs_rdt.resctrl import Resctrl


class Prior:
    """A group as it was before a write (what its undo writes back);
    ``code`` and ``data`` are its CDP masks (else its ``l3``).  A plain
    class: the hook imports this module, and typing costs it.
    """

    __slots__ = ('l3', 'mb', 'mode', 'code', 'data')

    def __init__(self, l3: dict[int, CBM], mb: dict[int, int], mode: str,
                 code: dict[int, CBM], data: dict[int, CBM]) -> None:
        self.l3, self.mb, self.mode = l3, mb, mode
        self.code, self.data = code, data

    @classmethod
    def of(cls, group: Group) -> 'Prior':
        return cls(dict(group.l3), dict(group.mb), group.mode,
                   dict(group.l3code or group.l3),
                   dict(group.l3data or group.l3))

    def after(self, step: Step) -> 'Prior':
        """This state once ``step`` (a schemata or mode write) is done."""
        if step.op == MODE:
            return Prior(self.l3, self.mb, step.value, self.code, self.data)
        return Prior({**self.l3, **step.l3}, {**self.mb, **step.mb},
                     self.mode, {**self.code, **step.code},
                     {**self.data, **step.data})


def _wrote(was: dict, new: dict) -> dict:
    """What ``was`` held on the domains a step wrote (``new``)."""
    return {d: was[d] for d in new if d in was}


class Transaction:
    """Steps applied in order to ``resctrl``, whose groups were ``groups``
    before the first; undone if one fails.  ``log(level, text)`` takes
    the undo's messages.
    """

    def __init__(self, resctrl: Resctrl, groups: list[Group],
                 log: Log) -> None:
        self.resctrl = resctrl
        self.old = {g.name: g for g in groups}
        self.log = log

    def commit(self, steps: list[Step]) -> None:
        """Apply ``steps``; undo the applied ones if one fails."""
        done: list[Step] = []
        try:
            for step in steps:
                apply_step(self.resctrl, step, self.log)
                done.append(step)
        except BaseException as exc:
            self.log('warning', 'undoing %d applied steps after: %s'
                     % (len(done), exc))
            self.undo(done)
            raise

    def undo(self, done: list[Step]) -> None:
        """Write back, newest first, what each applied step replaced.

        The kernel accepted every state on the way, so it accepts them
        again in reverse: each write restores exactly the masks, MB values
        or mode the step overwrote.  A removed group cannot come back (its
        tasks went to the default group); the allocator removes groups as
        late as the CLOSIDs allow.
        """
        state: dict[str, Prior | None]
        state = {name: Prior.of(g) for name, g in self.old.items()}
        before = []
        for step in done:
            prev = state.get(step.group)
            before.append(prev)
            if step.op == MKDIR:
                state[step.group] = None     # the kernel's default: unknown
            elif step.op == RMDIR:
                state.pop(step.group, None)
            elif prev is not None and step.op in (SCHEMATA, MODE):
                state[step.group] = prev.after(step)
        for step, prev in zip(reversed(done), reversed(before)):
            try:
                COMMANDS[step.op][1](self, step, prev)
            except RDTError as exc:
                self.log('error', 'could not undo %s of %s: %s'
                         % (step.op, step.group or '/', exc))

    # -- what each op's undo writes back ----------------------------------
    def _undo_mkdir(self, step: Step, prev: Prior | None) -> None:
        self.resctrl.rmdir(step.group)

    def _undo_rmdir(self, step: Step, prev: Prior | None) -> None:
        self.log('warning', 'cannot undo the removal of %s' % step.group)

    def _undo_mode(self, step: Step, prev: Prior | None) -> None:
        # Only real changes are planned: before it, the other mode.
        back = prev.mode if prev is not None else (
            MODE_SHAREABLE if step.value == MODE_EXCLUSIVE
            else MODE_EXCLUSIVE)
        self.resctrl.write_mode(step.group, back)

    def _undo_schemata(self, step: Step, prev: Prior | None) -> None:
        # What the step overwrote, on the domains it wrote; under CDP
        # code and data each get back its own mask.
        if prev is None:
            return
        cdp = self.resctrl.platform().cdp
        undo = Step.schemata(
            step.group, _wrote(prev.l3, step.l3), _wrote(prev.mb, step.mb),
            cdp, (_wrote(prev.code, step.code), _wrote(prev.data, step.data))
            if cdp else None)
        if undo.value:
            self.resctrl.write_schemata(step.group, undo.value)

    def _undo_event(self, step: Step, prev: Prior | None) -> None:
        was = self.old.get(step.group)
        if was is not None and was.mb_event:
            self.resctrl.write_mb_event(step.group, was.mb_event)


def apply_step(resctrl: Resctrl, step: Step, log: Log) -> None:
    """One step, by its op's command (:data:`COMMANDS`)."""
    log('debug', 'resctrl %s' % step)
    COMMANDS[step.op][0](resctrl, step)


#: op -> (the Resctrl write that does it, the undo of what it replaced).
COMMANDS: dict[str, tuple[Callable[[Resctrl, Step], None],
                          Callable[[Transaction, Step, Prior | None], None]]]
COMMANDS = {
    MKDIR: (lambda resctrl, s: resctrl.mkdir(s.group),
            Transaction._undo_mkdir),
    RMDIR: (lambda resctrl, s: resctrl.rmdir(s.group),
            Transaction._undo_rmdir),
    SCHEMATA: (lambda resctrl, s: resctrl.write_schemata(s.group, s.value),
               Transaction._undo_schemata),
    MODE: (lambda resctrl, s: resctrl.write_mode(s.group, s.value),
           Transaction._undo_mode),
    EVENT: (lambda resctrl, s: resctrl.write_mb_event(s.group, s.value),
            Transaction._undo_event),
}
