"""Shared test settings and the ``spawn`` fixture (tests/subprocs.py); ``reach_cluster`` comes
from the reach pytest plugin."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from subprocs import Proc, spawner

# Subprocesses started by tests import the package from this checkout.
os.environ.setdefault("PYTHONUNBUFFERED", "1")


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """``spawn(name, *argv)`` runs ``python *argv``; every process is SIGKILLed at teardown."""
    yield from spawner(tmp_path)
