"""Fixtures the NATS adapter's test modules share (test_nats.py, test_cov_nats.py)."""

from __future__ import annotations

import os
import shutil
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


def need_nats_server() -> None:
    """For tests that start a nats-server of their own: skip where the binary is absent, but
    fail under CI (REACH_REQUIRE_SERVICES), which must run them."""
    if shutil.which("nats-server") is None:
        if os.environ.get("REACH_REQUIRE_SERVICES"):
            pytest.fail("nats-server is not on PATH; CI (REACH_REQUIRE_SERVICES) needs it")
        pytest.skip("nats-server not on PATH")
