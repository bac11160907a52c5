"""Rate-limited error logs.

A failure that repeats with every request -- a full disk, a close the safeguards refuse --
would log a traceback per request, which buries the first (useful) one and fills the disk
further. :class:`RateLimit` is a :mod:`logging` filter
that lets the first record of each kind through, then at most one per ``interval`` seconds,
and tells in that one how many like it were held back. A kind is the logger, the message
template and the exception type, so different failures are never hidden behind each other.
Records below ``WARNING`` pass untouched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class RateLimit(logging.Filter):
    """At most one ``WARNING``-or-worse record of a kind per ``interval`` seconds.

    Args:
        interval: seconds between two records of one kind (> 0).
        clock: the time source (``time.monotonic``; a test passes its own).
    """

    def __init__(self, interval: float = 10.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        if not interval > 0:
            raise ValueError(f"the interval must be > 0 seconds, got {interval}")
        self.interval = interval
        self.clock = clock
        self._lock = threading.Lock()  # the writer thread and the event loop both log
        self._kinds: dict[tuple[str, str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        error = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
        kind = (record.name, str(record.msg), error)
        now = self.clock()
        with self._lock:
            if len(self._kinds) > 10_000:  # kinds are code's templates: this never fills up
                self._kinds.clear()
            last, held = self._kinds.get(kind, (-float("inf"), 0))
            if now - last < self.interval:
                self._kinds[kind] = (last, held + 1)
                return False
            self._kinds[kind] = (now, 0)
        if held:
            record.msg = f"{record.msg} [{held} more like this in the last {now - last:.0f} s]"
        return True
