"""The conformance suite's coordinator: a real ``Reach`` on loopback with millisecond timing.

Every test in this folder speaks to it through raw websockets (rawpeer.py), as a client in
another language would, from docs/protocol.md alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from reach import Reach

BEAT = 0.1  # the coordinator's heartbeat_interval in these tests (10 s in the field)


@pytest.fixture
async def reach() -> AsyncIterator[Reach]:
    async with Reach.start(heartbeat_interval=BEAT) as coordinator:
        yield coordinator
