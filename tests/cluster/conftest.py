"""The ``nodes`` fixture: coordinators, agents and clients of one test (peering.Nodes); the
``stack`` fixture: what a test enters, exited in reverse order at its end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest
from peering import Nodes


@pytest.fixture
async def nodes() -> AsyncIterator[Nodes]:
    async with AsyncExitStack() as stack:
        yield Nodes(stack)




@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s
