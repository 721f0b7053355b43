"""The A2A door's idempotency key can be the ``Idempotency-Key`` header, as on the REST door:
it wins over the message id, so a client's retry that builds a new message (a new id) with
the same header runs once (test_a2a_send covers the message id alone)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from a2a.client import Client, ClientConfig, create_client
from a2a_door.conftest import FAST, call, send
from counting import counting

from reach import Reach


@asynccontextmanager
async def keyed(url: str, key: str) -> AsyncIterator[Client]:
    """The official client, sending ``Idempotency-Key: key`` with every request."""
    async with httpx.AsyncClient(headers={"Idempotency-Key": key}, timeout=10) as http:
        client = await create_client(url, ClientConfig(httpx_client=http, streaming=False))
        async with client:
            yield client


async def test_a_new_message_with_the_same_idempotency_key_header_runs_once() -> None:
    async with Reach.start(**FAST, a2a=True) as reach:
        assert reach.a2a_url is not None
        async with counting(reach.url) as runs:
            async with keyed(reach.a2a_url, "order-7") as client:
                [first] = await send(client, call("count.up", {}))
                [again] = await send(client, call("count.up", {}))  # another message id
                assert again.task.id == first.task.id and runs == [1]
            async with keyed(reach.a2a_url, "order-8") as client:
                [other] = await send(client, call("count.up", {}))
                assert other.task.id != first.task.id and runs == [1, 1]
