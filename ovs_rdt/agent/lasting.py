"""An error logged once while it lasts, and its recovery once.

The agent retries what fails (resctrl reads, the pools, the PMD placement,
the libvirt reconciliation, the metrics server, the OVSDB status) every
interval or re-scan.  Logging each attempt would flood the log with one
line per interval; logging nothing would hide the failure.  The rule, the
same everywhere: an error is logged when it starts and whenever its text
changes, its end is logged once, and a new failure after a recovery is
logged again.
"""
from __future__ import annotations

import logging
from typing import Any


class LastingError:
    """One thing that can fail again and again (one per source)."""

    def __init__(self, log: logging.Logger, level: int = logging.ERROR
                 ) -> None:
        self.log = log
        self.level = level
        #: The text of the failure in force, None while things work.
        self.text: str | None = None

    def fail(self, text: str, msg: str = '%s', *args: Any,
             exc_info: bool = False) -> bool:
        """It failed with ``text``; log ``msg % args`` (``text`` by
        default) unless the same text is logged already.  True if logged.
        """
        if text == self.text:
            return False
        self.text = text
        if not args and msg == '%s':
            args = (text,)
        self.log.log(self.level, msg, *args, exc_info=exc_info)
        return True

    def recover(self, msg: str | None = None, *args: Any) -> bool:
        """It works again; log ``msg % args`` at INFO if it had failed.

        True if it had failed.
        """
        if self.text is None:
            return False
        self.text = None
        if msg is not None:
            self.log.info(msg, *args)
        return True
