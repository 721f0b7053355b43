"""Shared test settings, the ``spawn`` fixture (tests/subprocs.py) and the PostgreSQL fixtures
(tests/pg.py: ``pg_database``, ``pg_url``, ``store_url``); ``reach_cluster`` comes from the
reach pytest plugin."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pg import open_store, pg_database, pg_url, store_url  # noqa: F401 (fixtures, used by name)
from subprocs import Proc, spawner

# Subprocesses started by tests import the package from this checkout.
os.environ.setdefault("PYTHONUNBUFFERED", "1")


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """``spawn(name, *argv)`` runs ``python *argv``; every process is SIGKILLed at teardown."""
    yield from spawner(tmp_path)


# A coordinator a test leaves running keeps its log filter on asyncio's logger, and the next
# coordinators' log tests see it (test_log_throttle counted 0 once in a clean-clone run). Which
# tests leave one is said at the end of the run: a finding for whoever reads the report, not a
# failure of a test that passed.
_LEFT_RUNNING: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    before = _throttles()
    yield
    if _throttles() > before:
        _LEFT_RUNNING.append(item.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _LEFT_RUNNING:
        terminalreporter.section("coordinators left running")
        for nodeid in _LEFT_RUNNING:
            terminalreporter.write_line(f"{nodeid}: a Reach started and never stopped")


def _throttles() -> int:
    import logging

    from reach.server.logthrottle import LogThrottle
    return sum(isinstance(f, LogThrottle) for f in logging.getLogger("asyncio").filters)
