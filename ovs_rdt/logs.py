"""The one logging seam: what the core logs through, ``log(level, text)``.

``level`` is ``debug``, ``info``, ``warning`` or ``error``.  The libvirt
hook passes its own (:class:`libvirt_hooks.hook.Log`: its log file and
syslog, no :mod:`logging`); every other process passes, or gets by
default, one that writes to :mod:`logging` (:func:`to_logger`).
"""
from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Callable

    Log = Callable[[str, str], None]

#: ``logging``'s numbers (logging itself is not imported for them).
LEVELS = {'debug': 10, 'info': 20, 'warning': 30, 'error': 40}


def to_logger(name: str, prefix: str = '') -> Log:
    """A log that writes to ``logging.getLogger(name)``, each text after
    ``prefix``.
    """
    def log(level: str, text: str) -> None:
        # (Imported here: the hook imports this module, passes its own
        # log, and would pay ~12 ms per event for logging: bench_hook.)
        import logging
        logging.getLogger(name).log(LEVELS[level], '%s%s', prefix, text)
    return log
