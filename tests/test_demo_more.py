"""``reach demo``'s summary when the library logged nothing (reach/demo.py).

The demo keeps the library's warnings off the terminal while its live table runs and lists the
latest after the summary. An application that has turned the ``reach`` loggers down (here to
CRITICAL; the dead-letter story's failing handler logs an ERROR) sees no such section: nothing
was logged, so nothing is announced."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from rich.console import Console

from reach.demo import run_demo


@pytest.fixture
def reach_logs_errors_only() -> Iterator[None]:
    logger = logging.getLogger("reach")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


async def test_the_summary_has_no_log_section_when_nothing_was_logged(
        reach_logs_errors_only: None) -> None:
    out = io.StringIO()
    assert await run_demo(seconds=0, live=False, console=Console(file=out, width=120)) == 0
    lines = out.getvalue().splitlines()
    assert lines[:3] == ["", "outcomes: ", "dead letters: 1"]  # the story (issue 29)
    assert lines[5:] == [
        "dead letters after the replay: 0",
        "Next: `reach serve` for a standalone coordinator; see README.md."]
    assert logging.getLogger("reach").propagate  # the demo gave logging back as it was
