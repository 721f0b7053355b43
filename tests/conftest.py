"""Shared test settings, the ``spawn`` fixture (tests/subprocs.py) and the PostgreSQL fixtures
(tests/pg.py: ``pg_database``, ``pg_url``, ``store_url``); ``reach_cluster`` comes from the
reach pytest plugin."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pg import pg_database, pg_url, store_url  # noqa: F401 (fixtures, used by name)
from subprocs import Proc, spawner

# Subprocesses started by tests import the package from this checkout.
os.environ.setdefault("PYTHONUNBUFFERED", "1")


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """``spawn(name, *argv)`` runs ``python *argv``; every process is SIGKILLed at teardown."""
    yield from spawner(tmp_path)
