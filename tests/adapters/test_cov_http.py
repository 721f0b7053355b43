"""HttpAgent on its edges, against real loopback servers: the REST service of http_service.py,
and a raw socket server that answers each request with exactly the bytes a test gives (a
Content-Length over the bound, a body cut short, JSON that is not, an unknown charset, a
hang-up). Calls go through ``invoke`` itself, so each test says what one answer becomes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from reach.adapters import AdapterAnswer, AdapterFault, Undelivered
from reach.adapters.http import HttpAgent
from reach.ports import Work

from .http_service import Service, serving
from .test_cov_base import Recorded

CAP = "orders.lookup"


def work(params: dict[str, Any] | None = None, capability: str = CAP, *,
         trace_id: str = "b" * 32, deadline_ms: float | None = None) -> Work:
    return Work("a" * 32, 1, capability, params or {}, "planner/k1", trace_id, "planner",
                deadline_ms=deadline_ms)


class Raw:
    """A loopback server whose answer to each request is ``answer(head)``: raw bytes, written
    as they are, then the connection is closed (None: closed without a word)."""

    def __init__(self, answer: Callable[[bytes], bytes | None]) -> None:
        self.answer = answer
        self.heads: list[bytes] = []
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    await reader.readexactly(int(line.split(b":")[1]))
            self.heads.append(head)
            out = self.answer(head)
            if out is not None:
                writer.write(out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def raw(answer: Callable[[bytes], bytes | None]) -> AsyncIterator[Raw]:
    server = Raw(answer)
    listener = await asyncio.start_server(server._handle, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()
        await listener.wait_closed()


def response(status: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items()),
             "Connection: close", "", ""]
    return "\r\n".join(lines).encode() + body


@contextlib.asynccontextmanager
async def opened(url: str, caps: dict[str, Any] | None = None,
                 **kw: Any) -> AsyncIterator[HttpAgent]:
    agent = HttpAgent("legacy", url, caps or {CAP: {"path": "/lookup"}}, **kw)
    await agent.open()
    try:
        yield agent
    finally:
        await agent.close()


async def invoke(agent: HttpAgent, w: Work | None = None) -> Any:
    return await agent.invoke(w or work(), {}, Recorded())


# ---------------------------------------------------------------- declaring and lifecycle


def test_more_declaration_mistakes_are_named() -> None:
    caps = {CAP: {"path": "/a"}}
    with pytest.raises(ValueError, match="url must be an http"):
        HttpAgent("x", "http://[::1", caps)
    with pytest.raises(ValueError, match="max_response_bytes must be a positive integer"):
        HttpAgent("x", "http://h", caps, max_response_bytes=0)
    with pytest.raises(ValueError, match="connect_timeout must be a positive number"):
        HttpAgent("x", "http://h", caps, connect_timeout=0)
    with pytest.raises(ValueError, match="query must be a list of param names, got 'dry'"):
        HttpAgent("x", "http://h", {CAP: {"path": "/a", "query": "dry"}})
    with pytest.raises(ValueError, match="openapi_url must be a path or a URL"):
        HttpAgent("x", "http://h", openapi_url="")


async def test_before_open_calls_are_undelivered_and_checks_fail_and_open_is_once() -> None:
    agent = HttpAgent("legacy", "http://127.0.0.1:9", {CAP: {"path": "/lookup"}})
    reply = Recorded()
    assert agent.deliver(work(), reply)
    await reply.resolved.wait()
    assert reply.outcome is not None and reply.outcome[0] == "undelivered"
    assert "is not open (attach it with reach.attach)" in reply.outcome[1]
    assert await agent.check() is False
    await agent.shut()  # nothing to release yet
    await agent.open()
    session = agent._session
    await agent.open()
    assert agent._session is session  # one client for the agent's life
    await agent.close()
    assert agent._session is None


@pytest.mark.parametrize("path,route,message", [
    ("/nope.json", None, "answered 404 Not Found"),
    ("/doc.json", (200, {"content-type": "application/json"}, b"{not json"), "Expecting"),
])
async def test_an_openapi_document_that_cannot_be_read_refuses_the_open(
        path: str, route: Any, message: str) -> None:
    async with serving() as svc:
        if route is not None:
            async def doc(req: Any) -> Any:
                return route
            svc.routes[path] = doc
        agent = HttpAgent("orders", svc.url, openapi_url=path)
        with pytest.raises(ValueError, match=f"could not read its OpenAPI document at "
                                             f"{svc.url}{path}: .*{message}"):
            await agent.open()
        assert agent._session is None  # released


async def test_an_openapi_document_on_a_service_that_is_down_refuses_the_open() -> None:
    svc = Service()
    await svc.start()
    await svc.stop()
    agent = HttpAgent("orders", svc.url, openapi_url="/openapi.json")
    with pytest.raises(ValueError, match="could not read its OpenAPI document.*Cannot connect"):
        await agent.open()


# ---------------------------------------------------------------- what is sent


async def test_a_trace_id_that_is_not_w3c_shaped_sends_no_traceparent() -> None:
    async with serving() as svc, opened(svc.url, {CAP: {"path": "/echo"}}) as agent:
        assert await invoke(agent, work({"a": 1}, trace_id="my-own-trace")) == {
            "got": {"a": 1}, "query": []}
        [seen] = svc.calls("/echo")
        assert "traceparent" not in seen.headers
        assert seen.headers["x-reach-task-id"] == "a" * 32


async def test_a_path_param_the_call_lacks_is_an_answer_and_nothing_is_sent() -> None:
    async with serving() as svc, opened(svc.url, {CAP: {"path": "/orders/{order_id}"}}) as agent:
        with pytest.raises(AdapterAnswer, match="the params have no 'order_id'") as err:
            await invoke(agent, work({"id": 1}))
        assert err.value.details == {"missing": "order_id"} and svc.seen == []


# ---------------------------------------------------------------- how a request fails


async def test_no_free_connection_within_connect_timeout_is_undelivered() -> None:
    """The pool holds max_concurrency + 2 connections; a request that finds none free within
    connect_timeout was never sent."""
    async with serving() as svc, opened(svc.url, {CAP: {"path": "/hang"}}, max_concurrency=1,
                                        connect_timeout=0.05) as agent:
        hung = [asyncio.ensure_future(invoke(agent)) for _ in range(3)]
        try:
            while len(svc.calls("/hang")) < 3:
                await asyncio.sleep(0.005)
            with pytest.raises(Undelivered, match="no connection within 0.05 s"):
                await invoke(agent)
            assert agent._reached is False and len(svc.calls("/hang")) == 3
        finally:
            for call in hung:
                call.cancel()
            await asyncio.gather(*hung, return_exceptions=True)


async def test_no_answer_within_the_callers_deadline_is_a_fault() -> None:
    async with serving() as svc, opened(svc.url, {CAP: {"path": "/hang"}}) as agent:
        with pytest.raises(AdapterFault, match="POST /hang: no answer within the caller's "
                                               "deadline of 20 ms"):
            await invoke(agent, work(deadline_ms=20))
        assert svc.calls("/hang")[0].headers["x-reach-deadline-ms"] == "20"


async def test_a_service_that_hangs_up_without_answering_is_a_fault() -> None:
    async with raw(lambda head: None) as server, opened(server.url) as agent:
        with pytest.raises(AdapterFault, match="POST /lookup: the service closed the connection"):
            await invoke(agent)
        assert len(server.heads) == 1  # it was sent: a fault, not undelivered


# ---------------------------------------------------------------- what an answer means


async def test_a_redirect_is_a_fault_saying_where_and_is_not_followed() -> None:
    answer = response("302 Found", {"Location": "/v2/lookup", "Content-Length": "0"}, b"")
    async with raw(lambda head: answer) as server, opened(server.url) as agent:
        with pytest.raises(AdapterFault, match=r"answered 302 Found \(to '/v2/lookup'; "
                                               r"redirects are not followed") as err:
            await invoke(agent)
        assert err.value.details["status"] == 302
        assert len(server.heads) == 1  # /v2/lookup was never asked for


async def test_a_declared_length_over_the_bound_is_refused_before_reading() -> None:
    body = b'{"x": "' + b"y" * 5000 + b'"}'
    answer = response("200 OK", {"Content-Type": "application/json",
                                 "Content-Length": str(len(body))}, body)
    async with raw(lambda head: answer) as server:
        async with opened(server.url, max_response_bytes=1000) as agent:
            with pytest.raises(AdapterFault, match=f"the response is {len(body)} bytes, over "
                                                   f"the limit of 1000") as err:
                await invoke(agent)
            assert err.value.details == {"status": 200}
        async with opened(server.url) as agent:  # within the bound: read as declared
            assert await invoke(agent) == {"x": "y" * 5000}


async def test_an_error_whose_body_cannot_be_read_is_still_the_fault_it_says() -> None:
    # it promises 100 bytes and hangs up before the first
    answer = response("503 Service Unavailable", {"Content-Length": "100",
                                                  "Retry-After": "2"}, b"")
    async with raw(lambda head: answer) as server, opened(server.url) as agent:
        with pytest.raises(AdapterFault, match="answered 503 Service Unavailable") as err:
            await invoke(agent)
        assert err.value.details == {"status": 503, "body": "", "retry_after": 2.0}


async def test_a_body_that_is_not_the_json_its_type_says_is_a_fault() -> None:
    answer = response("200 OK", {"Content-Type": "application/problem+json",
                                 "Content-Length": "9"}, b"not json!")
    async with raw(lambda head: answer) as server, opened(server.url) as agent:
        with pytest.raises(AdapterFault, match="the body is not the JSON its Content-Type "
                                               "says") as err:
            await invoke(agent)
        assert err.value.details == {"status": 200}


async def test_text_in_a_charset_python_does_not_know_is_read_as_utf8() -> None:
    body = "héllo".encode()
    answer = response("200 OK", {"Content-Type": "text/plain; charset=x-martian",
                                 "Content-Length": str(len(body))}, body)
    async with raw(lambda head: answer) as server, opened(server.url) as agent:
        assert await invoke(agent) == {"text": "héllo"}
