"""``/openapi.json`` against the server it describes: schemathesis generates requests from
the document (valid ones, and invalid ones that must be refused with a 4xx) for every
operation and checks each response against it: documented status, content type, headers
and body schema, and never a 5xx. Bounded: a fixed number of examples per operation, one
coordinator on loopback, well under 20 s. Also: why the front door has a port of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from reach import Agent, Reach

EXAMPLES = 60  # per operation (~1 s an operation on these machines)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance, negative_data_rejection]


async def coordinator() -> AsyncIterator[tuple[Reach, Agent]]:
    # No websocket keepalive: websockets draws each ping's payload from the process-wide
    # ``random`` (``random.getrandbits``). Under coverage the fuzz runs past the default 20 s
    # interval, and a ping sent from this loop while Hypothesis draws a case in the fuzz
    # thread looks to it like a strategy using ``random``: a HypothesisDeprecationWarning,
    # made an error by the suite's filterwarnings, then a FlakyFailure (a clean-clone CI).
    async with Reach.start(heartbeat_interval=0.05, ping_interval=None) as reach:
        agent = Agent("worker", reconnect_base=0.02)

        # No intents and no description: nothing a generated intent could route to, so a
        # generated timeout of a microsecond cannot make a real call time out (a 504).
        @agent.capability("echo.run", idempotent=True, latency_ms=200, description="")
        async def echo(**params: Any) -> dict[str, Any]:
            return params

        await agent.connect(reach.url)
        try:
            yield reach, agent
        finally:
            await agent.close(drain=0.5)


def fuzz(url: str) -> dict[str, int]:
    """Every operation of the served document, ``EXAMPLES`` cases each (in a thread: the
    coordinator runs on the test's loop)."""
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    seen: dict[str, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        seen[operation.label] = 0
        run(operation, url, seen)
    return seen


def run(operation: Any, url: str, seen: dict[str, int]) -> None:
    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), derandomize=True)
    def check(case: Any) -> None:
        seen[operation.label] += 1
        case.call_and_validate(base_url=url, checks=CHECKS, timeout=10)

    check()


async def test_every_response_conforms_to_the_openapi_document() -> None:
    async for reach, _agent in coordinator():
        assert reach.http_url is not None
        seen = await asyncio.to_thread(fuzz, reach.http_url)  # bounded by EXAMPLES, not time
        api = {"POST /v1/call/{capability}", "POST /v1/intent", "POST /v1/tasks",
               "GET /v1/tasks/{task_id}", "GET /v1/tasks/{task_id}/stream",
               "GET /v1/capabilities", "GET /healthz"}
        assert api <= set(seen) and all(seen[op] > 0 for op in api), seen
        # The coordinator is unharmed: a real call still answers at once.
        async with aiohttp.ClientSession() as http, http.post(
                reach.http_url + "/v1/call/echo.run", json={"a": 1}) as r:
            assert r.status == 200 and (await r.json())["result"] == {"a": 1}


async def test_the_websocket_port_reads_no_request_bodies() -> None:
    """Why the front door has its own port: on the websocket port, the websockets library
    refuses any request that has a body (http11.Request.parse: 'unsupported request body'),
    before process_request could see it. A REST API needs bodies."""
    async with Reach.start(heartbeat_interval=0.05) as reach:
        http = reach.url.replace("ws://", "http://")
        async with aiohttp.ClientSession() as session:
            try:
                async with session.post(http + "/v1/call/echo.run", json={"a": 1}) as r:
                    status = r.status
            except aiohttp.ClientError:
                status = None  # the connection was dropped without an answer
            assert status != 200
            assert reach.http_url is not None
            async with session.get(reach.http_url + "/healthz") as r:
                assert r.status == 200
