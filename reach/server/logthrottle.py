"""One line per kind per second: a logging filter for the storms a hostile peer can cause.

At the open-file limit asyncio logs ``socket.accept() out of system resource`` with a
traceback up to a hundred times a second per listening socket, and every malformed request
can make aiohttp or websockets log a traceback: 2.5 MB of log a second in the attack trial.
``LogThrottle`` passes the first record of a kind with its traceback, then at most one record
of that kind per ``every`` seconds, as one line (the exception's type and message instead of
its traceback) saying how many like it were suppressed since the last one. Records of other
kinds, and every record below ``level``, pass untouched.

A *kind* is the logger's name, the level, the first line of the message template and the
exception's type: a thousand EMFILE accept errors are one kind, a bad header and an EMFILE
are two.

No global state: each coordinator makes its own throttle and ``attach``es it to the loggers
those libraries use when it starts, and ``detach``es it when it stops (logging's loggers are
process-wide; a filter on them is the only hook they offer). Two coordinators in one process
each add their own filter: a record passes when both let it, so neither breaks the other, and
one stopping leaves the other's in place.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

# The loggers a flood of bad connections makes talk: asyncio's accept errors (EMFILE), the
# websocket port's handshake failures, the REST door's malformed requests.
LOGGERS = ("asyncio", "websockets.server", "aiohttp.server", "aiohttp.access",
           "aiohttp.internal", "aiohttp.web")
MAX_KINDS = 256  # distinct kinds remembered; past it the oldest are forgotten


class LogThrottle(logging.Filter):
    """A ``logging.Filter`` letting each kind of record through at most once per ``every``
    seconds (``clock`` gives the time; tests pass their own)."""

    def __init__(self, every: float = 1.0, *, clock: Callable[[], float] = time.monotonic,
                 level: int = logging.WARNING) -> None:
        super().__init__()
        self.every = every
        self.clock = clock
        self.level = level
        self._last: dict[tuple[str, int, str, str], float] = {}  # kind → when it last passed
        self._quiet: dict[tuple[str, int, str, str], int] = {}  # kind → suppressed since
        self._shown: dict[tuple[str, int, str, str], str] = {}  # kind → its last line shown
        self._loggers: list[logging.Logger] = []
        self.suppressed = 0  # records held back in all, since the start

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return True
        kind = _kind(record)
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.every:
            self._quiet[kind] = self._quiet.get(kind, 0) + 1
            self.suppressed += 1
            return False
        if last is None and len(self._last) >= MAX_KINDS:
            oldest = next(iter(self._last))
            del self._last[oldest]
            self._quiet.pop(oldest, None)
            self._shown.pop(oldest, None)
        self._last.pop(kind, None)  # re-inserted: the dict stays in order of last use
        self._last[kind] = now
        self._shown[kind] = _head(record)
        if last is not None:  # a repeat: one line, the count, no traceback
            quiet = self._quiet.pop(kind, 0)
            _one_line(record, f" [{quiet} more like this suppressed in the last "
                              f"{now - last:.1f} s]" if quiet else " [repeated]")
        return True

    def attach(self, names: Iterable[str] = LOGGERS) -> None:
        """Add this filter to the named loggers (``detach`` takes it off again)."""
        for name in names:
            logger = logging.getLogger(name)
            logger.addFilter(self)
            self._loggers.append(logger)

    def detach(self) -> None:
        """Take the filter off every logger it was attached to, saying once per kind how many
        records were suppressed since the last one that passed."""
        loggers, self._loggers = self._loggers, []
        for logger in loggers:
            logger.removeFilter(self)
        for kind, quiet in self._quiet.items():
            name, level, head, _ = kind
            logging.getLogger(name).log(level, "%s [%d more like this suppressed]",
                                        self._shown.get(kind, head), quiet)
        self._quiet.clear()
        self._last.clear()
        self._shown.clear()


def _kind(record: logging.LogRecord) -> tuple[str, int, str, str]:
    template = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
    head = template.split("\n", 1)[0][:200]
    exc = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else ""
    return record.name, record.levelno, head, exc


def _head(record: logging.LogRecord) -> str:
    """The record's message's first line, and its exception's type and text (one line)."""
    try:
        head = record.getMessage().split("\n", 1)[0][:500]
    except (TypeError, ValueError):  # pragma: no cover - a bad format (logging reports it)
        head = str(record.msg).split("\n", 1)[0][:500]
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        head += f" ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"
    return head


def _one_line(record: logging.LogRecord, note: str) -> None:
    """Make ``record`` one line: its message's first line, the exception's type and text in
    place of the traceback, and ``note``."""
    record.msg, record.args = _head(record) + note, None
    record.exc_info = record.exc_text = None
    record.stack_info = None
