"""NatsAgent on its edges, against a real NATS server: replies that are empty, NaN or a micro
error with a non-numeric code; a worker that never answers; params over the server's
max_payload; a connection that drains under a call; opening against a URL no retry can fix,
and against a server that is down (then closed while still connecting); a server restart the
client reconnects through. Calls go through ``invoke`` itself."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg

from reach.adapters import AdapterFault, NatsAgent, Undelivered
from reach.adapters import nats as nats_adapter
from reach.ports import Work
from reach.testing import wait_until

from .conftest import need_nats_server
from .test_cov_base import Recorded
from .test_nats import URL, _reachable, free_port
from .test_nats import pytestmark as pytestmark  # needs the NATS server on 127.0.0.1:4222

CAP = "orders.lookup"


def work(params: dict[str, Any] | None = None, **kw: Any) -> Work:
    return Work("a" * 32, 1, CAP, params or {}, "planner/k1", "b" * 32, "planner", **kw)


def adapter(subject: str, url: str = URL, **kw: Any) -> NatsAgent:
    return NatsAgent("orders-workers", url, capabilities={
        CAP: {"subject": subject, "latency_ms": 200}}, **kw)


async def opened(subject: str, **kw: Any) -> NatsAgent:
    agent = adapter(subject, **kw)
    await agent.open()
    return agent


async def responder(nc: Nats, subject: str, data: bytes,
                    headers: dict[str, str] | None = None) -> None:
    async def handle(msg: Msg) -> None:
        await msg.respond(data) if headers is None else await nc.publish(
            msg.reply, data, headers=headers)

    await nc.subscribe(subject, cb=handle)
    await nc.flush()


# ---------------------------------------------------------------- replies


async def test_an_empty_reply_is_none_and_nan_is_text(prefix: str, workers: Any) -> None:
    nc = await workers()
    await responder(nc, f"{prefix}.empty", b"")
    await responder(nc, f"{prefix}.nan", b"NaN")
    agent = await opened(f"{prefix}.empty")
    try:
        assert await agent.invoke(work(), {"subject": f"{prefix}.empty"}, Recorded()) is None
        assert await agent.invoke(work(), {"subject": f"{prefix}.nan"}, Recorded()) == {
            "text": "NaN"}  # not a JSON number: Reach's JSON has no NaN
    finally:
        await agent.close()


async def test_micro_errors_with_a_service_code_only_a_code_or_only_text_are_faults(
        prefix: str, workers: Any) -> None:
    nc = await workers()
    await responder(nc, f"{prefix}.coded", b"", {"Nats-Service-Error-Code": "E_DB",
                                                "Nats-Service-Error": "database down"})
    await responder(nc, f"{prefix}.bare", b'{"retry": true}', {"Nats-Service-Error-Code": "503"})
    await responder(nc, f"{prefix}.text", b"", {"Nats-Service-Error": "out of stock"})
    agent = await opened(f"{prefix}.coded")
    try:
        with pytest.raises(AdapterFault, match="^database down$") as coded:
            await agent.invoke(work(), {"subject": f"{prefix}.coded"}, Recorded())
        assert coded.value.details == {"subject": f"{prefix}.coded", "service_code": "E_DB"}
        with pytest.raises(AdapterFault, match="^error 503$") as bare:
            await agent.invoke(work(), {"subject": f"{prefix}.bare"}, Recorded())
        assert bare.value.details == {"subject": f"{prefix}.bare", "status": 503,
                                      "body": {"retry": True}}
        with pytest.raises(AdapterFault, match="^out of stock$") as text:  # no code: a fault
            await agent.invoke(work(), {"subject": f"{prefix}.text"}, Recorded())
        assert text.value.details == {"subject": f"{prefix}.text"}
    finally:
        await agent.close()


def test_a_trace_id_that_is_not_w3c_shaped_travels_as_its_own_header() -> None:
    sent = nats_adapter.headers(Work("a" * 32, 2, CAP, {}, "c/k", "my-own-trace", "c"))
    assert sent["Reach-Trace-Id"] == "my-own-trace" and "traceparent" not in sent
    assert sent["Reach-Attempt"] == "2" and "Reach-Deadline-Ms" not in sent


# ---------------------------------------------------------------- how a request fails


async def test_no_reply_within_the_request_timeout_is_a_fault(prefix: str, workers: Any) -> None:
    nc = await workers()

    async def take(msg: Msg) -> None:  # takes the call, never answers
        pass

    await nc.subscribe(f"{prefix}.silent", cb=take)
    await nc.flush()
    agent = await opened(f"{prefix}.silent")
    try:
        with pytest.raises(AdapterFault, match=f"no reply on '{prefix}.silent' within") as err:
            await agent.invoke(work(deadline_ms=10), {"subject": f"{prefix}.silent"},
                               Recorded())
        assert err.value.details == {"subject": f"{prefix}.silent", "timeout": True}
    finally:
        await agent.close()


async def test_params_over_the_servers_max_payload_are_undelivered(prefix: str) -> None:
    agent = await opened(f"{prefix}.big")
    try:
        assert agent._nc is not None
        blob = "x" * (agent._nc.max_payload + 1)
        with pytest.raises(Undelivered, match=r"over the NATS server's max_payload \(\d+ bytes"):
            await agent.invoke(work({"blob": blob}), {"subject": f"{prefix}.big"}, Recorded())
    finally:
        await agent.close()


async def test_a_call_on_a_connection_that_stopped_taking_publishes_is_undelivered(
        prefix: str) -> None:
    """Connected when the call began, but the client no longer sends (here: it is draining,
    the last step before it closes): nothing reached a worker."""
    agent = await opened(f"{prefix}.drained")
    nc = agent._nc
    assert nc is not None
    draining = asyncio.ensure_future(nc.drain())
    try:
        while not nc.is_draining_pubs:
            await asyncio.sleep(0)
        assert nc.is_connected
        with pytest.raises(Undelivered, match="cannot send now: ConnectionDrainingError"):
            await agent.invoke(work(), {"subject": f"{prefix}.drained"}, Recorded())
    finally:
        await draining
        await agent.close()


# ---------------------------------------------------------------- connecting and closing


async def test_a_server_url_no_retry_can_fix_refuses_the_open(
        caplog: pytest.LogCaptureFixture) -> None:
    agent = adapter("orders.lookup", "nats://127.0.0.1:99999")
    with pytest.raises(ValueError, match="cannot connect to NATS at nats://127.0.0.1:99999: "):
        await agent.open()
    assert agent._nc is None and agent._connecting is None
    assert any("gave up connecting" in r.getMessage() for r in caplog.records)


async def test_closed_while_still_connecting_to_a_server_that_is_down(
        caplog: pytest.LogCaptureFixture) -> None:
    agent = adapter("orders.lookup", f"nats://127.0.0.1:{free_port()}", connect_timeout=0.05,
                    reconnect_wait=0.01)
    await agent.open()  # not reachable yet: attached as suspected, still trying
    connecting = agent._connecting
    assert connecting is not None and not connecting.done()
    assert await agent.check() is False
    with pytest.raises(Undelivered, match="not connected to NATS"):
        await agent.invoke(work(), {"subject": "orders.lookup"}, Recorded())
    await agent.close()
    assert connecting.cancelled() and agent._nc is None
    assert not any("gave up connecting" in r.getMessage() for r in caplog.records)
    await agent.shut()  # again, with nothing left: harmless


async def test_a_client_that_fails_to_close_does_not_fail_the_close(
        caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        is_closed = False

        async def close(self) -> None:
            raise ConnectionResetError("the socket was already gone")

    caplog.set_level(logging.DEBUG, "reach.adapters.nats")
    agent = adapter("orders.lookup")
    agent._nc = Broken()  # type: ignore[assignment]
    await agent.shut()
    assert agent._nc is None
    assert "closing NATS: ConnectionResetError" in caplog.text


def test_describe_names_the_health_subject_and_the_service() -> None:
    agent = adapter("orders.lookup", health_subject="orders.health", service="orders")
    assert agent.describe() == {"servers": [URL], "subjects": ["orders.lookup"],
                                "health_subject": "orders.health", "service": "orders"}


def test_more_declaration_mistakes_are_named() -> None:
    with pytest.raises(ValueError, match="max_reply_bytes must be a positive integer"):
        adapter("orders.lookup", max_reply_bytes=0)
    for servers in ([], 5):
        with pytest.raises(ValueError, match="servers must be a NATS URL or a non-empty list"):
            adapter("orders.lookup", servers)  # type: ignore[arg-type]


@pytest.fixture
async def own_server() -> AsyncIterator[dict[str, Any]]:
    """A nats-server of this test's own, on a free port, that the test may stop and restart."""
    need_nats_server()
    port = free_port()
    state: dict[str, Any] = {"port": port, "proc": None}

    async def start() -> None:
        state["proc"] = subprocess.Popen(["nats-server", "-a", "127.0.0.1", "-p", str(port)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await wait_until(lambda: _reachable(("127.0.0.1", port)))

    async def stop() -> None:
        proc = state["proc"]
        proc.kill()
        await asyncio.to_thread(proc.wait, 5)

    state["start"], state["stop"] = start, stop
    await start()
    yield state
    if state["proc"].poll() is None:
        await stop()


async def test_the_client_reconnects_through_a_server_restart(
        own_server: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "reach.adapters.nats")
    url = f"nats://127.0.0.1:{own_server['port']}"
    agent = adapter("orders.lookup", url, reconnect_wait=0.02)
    await agent.open()
    worker = Nats()
    try:
        await own_server["stop"]()
        await wait_until(lambda: agent._nc is not None and not agent._nc.is_connected)
        assert not await agent.check()
        await own_server["start"]()
        await wait_until(lambda: "reconnected to NATS" in caplog.text)
        assert agent._last_error is None and await agent.check()
        await worker.connect(url)
        await responder(worker, "orders.lookup", b'{"ok": true}')
        # Right after the restart the server may not yet route the new worker's interest to
        # the reconnected client's request (seen once under a loaded CI run: "no responders"):
        # that answer is Undelivered, which the gateway fails over on; here, ask again.
        for _ in range(100):
            try:
                answer = await agent.invoke(work(), {"subject": "orders.lookup"}, Recorded())
                break
            except Undelivered:
                await asyncio.sleep(0.02)
        assert answer == {"ok": True}
        assert "lost NATS at" in caplog.text
    finally:
        await worker.close()
        await agent.close()
