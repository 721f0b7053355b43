"""Fixtures the NATS adapter's test modules share (test_nats.py, test_cov_nats.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

NATS_URL = "nats://127.0.0.1:4222"


@pytest.fixture
def prefix() -> str:
    """A subject prefix of the test's own, so tests on one server never see each other."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def workers() -> AsyncIterator[Callable[[], Awaitable[Any]]]:
    """Connections of worker processes (one per worker), closed after the test."""
    import nats  # the [nats] extra: only tests that ask for workers need it

    opened: list[Any] = []

    async def connect() -> Any:
        nc = await nats.connect(NATS_URL)
        opened.append(nc)
        return nc

    yield connect
    for nc in opened:
        if not nc.is_closed:
            await nc.close()
