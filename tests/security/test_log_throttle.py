"""Issue 25 item 5: repeated accept errors and malformed-request tracebacks (2.5 MB of log a
second in the trial) become at most one line per kind per second, with a count of the rest.

The throttle is checked with an injected clock on plain records, then on a coordinator: its
filter is on the libraries' loggers while it runs and off once it stops, and two coordinators
in one process each keep their own.
"""

from __future__ import annotations

import errno
import logging
import sys
from collections.abc import Iterator

import pytest

from reach import Reach
from reach.server.logthrottle import LOGGERS, LogThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Seen(logging.Handler):
    """Keeps what reaches the handler, formatted as a log file would hold it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def seen() -> Iterator[Seen]:
    handler = Seen()
    logger = logging.getLogger("throttle-test")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


def emfile(logger: logging.Logger) -> None:
    """What asyncio's default exception handler logs when accept() meets the file limit."""
    try:
        raise OSError(errno.EMFILE, "Too many open files")
    except OSError:
        logger.error("socket.accept() out of system resource\nsocket: <fd=12>",
                     exc_info=sys.exc_info())


def test_a_storm_of_one_kind_is_one_line_a_second_with_a_count(seen: Seen) -> None:
    clock = Clock()
    throttle = LogThrottle(clock=clock)
    throttle.attach(["throttle-test"])
    logger = logging.getLogger("throttle-test")
    try:
        for _ in range(1000):  # one second's storm, as the trial logged it
            emfile(logger)
            clock.now += 0.0009
        assert len(seen.lines) == 1  # the first of its kind, with its traceback
        assert "Traceback" in seen.lines[0] and "Too many open files" in seen.lines[0]
        clock.now += 0.2
        emfile(logger)
        assert len(seen.lines) == 2
        repeat = seen.lines[1]
        assert "\n" not in repeat  # one line: no traceback, no second message line
        assert "999 more like this suppressed" in repeat and "OSError" in repeat
        assert throttle.suppressed == 999
    finally:
        throttle.detach()


def test_kinds_are_apart_and_quiet_records_pass(seen: Seen) -> None:
    clock = Clock()
    throttle = LogThrottle(clock=clock)
    throttle.attach(["throttle-test"])
    logger = logging.getLogger("throttle-test")
    try:
        for _ in range(50):
            emfile(logger)
            logger.error("Error handling request from %s", "127.0.0.1")
            logger.info("connection open")  # below WARNING: never held back
        assert sum("out of system resource" in line for line in seen.lines) == 1
        assert sum("Error handling request" in line for line in seen.lines) == 1
        assert sum("connection open" in line for line in seen.lines) == 50
    finally:
        throttle.detach()
    # What was held back since the last line of each kind is said once, when it detaches.
    assert any("49 more like this suppressed" in line and "out of system resource" in line
               for line in seen.lines)
    assert any("49 more like this suppressed" in line and "127.0.0.1" in line
               for line in seen.lines)
    before = len(seen.lines)
    for _ in range(5):
        emfile(logger)
    assert len(seen.lines) == before + 5  # detached: nothing is filtered any more


def test_the_kinds_remembered_are_bounded(seen: Seen) -> None:
    clock = Clock()
    throttle = LogThrottle(clock=clock)
    throttle.attach(["throttle-test"])
    logger = logging.getLogger("throttle-test")
    try:
        for i in range(5000):  # a message template per record: each its own kind
            logger.error(f"bad header {i}")
        assert len(seen.lines) == 5000
        assert throttle.suppressed == 0
    finally:
        throttle.detach()


async def test_a_coordinator_throttles_while_it_runs_and_two_keep_their_own() -> None:
    asyncio_log = logging.getLogger("asyncio")
    # A throttle some earlier test's coordinator left attached (one never stopped) would
    # hold back the storm before b's saw it: in a clean-clone run b counted 0, not 19.
    foreign = [f for f in asyncio_log.filters if isinstance(f, LogThrottle)]
    for f in foreign:
        asyncio_log.removeFilter(f)
    a = await Reach.start(http_port=None)
    b = await Reach.start(http_port=None)
    try:
        for name in LOGGERS:
            filters = logging.getLogger(name).filters
            assert a.log_throttle in filters and b.log_throttle in filters
        await a.stop()  # one stopping leaves the other's filter where it was
        assert a.log_throttle not in asyncio_log.filters
        assert b.log_throttle in asyncio_log.filters
        for _ in range(20):
            emfile(asyncio_log)
        assert b.log_throttle.suppressed == 19
    finally:
        await a.stop()
        await b.stop()
    for name in LOGGERS:
        assert not [f for f in logging.getLogger(name).filters if isinstance(f, LogThrottle)]
    for f in foreign:
        asyncio_log.addFilter(f)


async def test_a_stop_that_fails_midway_still_takes_its_filter_off() -> None:
    """The filter is process-wide: a coordinator whose stop raised would leave it on asyncio's
    logger, holding back every later coordinator's records of the same kind."""
    reach = await Reach.start(http_port=None)

    async def broken() -> None:
        raise OSError("disk gone")

    close, reach.store.close = reach.store.close, broken  # type: ignore[method-assign]
    with pytest.raises(OSError, match="disk gone"):
        await reach.stop()
    await close()
    for name in LOGGERS:
        assert reach.log_throttle not in logging.getLogger(name).filters
