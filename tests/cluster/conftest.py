"""The ``nodes`` fixture: coordinators, agents and clients of one test (peering.Nodes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest
from peering import Nodes


@pytest.fixture
async def nodes() -> AsyncIterator[Nodes]:
    async with AsyncExitStack() as stack:
        yield Nodes(stack)


