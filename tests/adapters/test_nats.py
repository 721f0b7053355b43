"""NatsAgent against a real NATS server: plain nats-py workers in a queue group and a worker
written with nats-py's micro services framework, through a real coordinator and client.

Needs nats-server on 127.0.0.1:4222 (``nats-server -a 127.0.0.1 -p 4222 -js``); every test
uses subjects under a prefix of its own, so tests never see each other's workers.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from typing import Any

import pytest
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg
from nats.micro import add_service
from nats.micro.request import ERROR_CODE_HEADER, ERROR_HEADER, Request, ServiceError

from reach import Agent, Client, Reach, TaskError
from reach.adapters import NatsAgent
from reach.adapters import nats as nats_adapter
from reach.core.backoff import Backoff
from reach.errors import ReachError
from reach.ports import Work
from reach.testing import wait_until

from .conftest import need_nats_server

ADDRESS = ("127.0.0.1", 4222)
URL = "nats://127.0.0.1:4222"


def _reachable(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=0.5):
            return True
    except OSError:
        return False


_ABSENT = ("no NATS server on 127.0.0.1:4222; start one with: nats-server -a 127.0.0.1 -p "
           "4222 -js")
if not _reachable(ADDRESS) and os.environ.get("REACH_REQUIRE_SERVICES"):
    raise RuntimeError(f"{_ABSENT} (CI sets REACH_REQUIRE_SERVICES: these tests must run)")
pytestmark = pytest.mark.skipif(not _reachable(ADDRESS), reason=_ABSENT)

FAST: dict[str, Any] = dict(heartbeat_interval=0.05, suspect_after=2, offline_after=40,
                            backoff=Backoff(base=0.01, jitter=0.0))


def agent(prefix: str, **kw: Any) -> NatsAgent:
    caps = kw.pop("capabilities", None) or {
        "orders.lookup": {"subject": f"{prefix}.orders.lookup", "idempotent": True,
                          "latency_ms": 200}}
    return NatsAgent("orders-workers", URL, capabilities=caps, **kw)


async def queue_worker(nc: Nats, subject: str, tag: str, seen: list[Msg]) -> None:
    """A plain nats-py worker in the queue group "workers": echoes the params with its tag."""
    async def handle(msg: Msg) -> None:
        seen.append(msg)
        await msg.respond(json.dumps({"worker": tag, **json.loads(msg.data)}).encode())

    await nc.subscribe(subject, queue="workers", cb=handle)
    await nc.flush()


async def test_two_workers_in_a_queue_group_share_the_calls(prefix: str, workers: Any) -> None:
    seen_a: list[Msg] = []
    seen_b: list[Msg] = []
    await queue_worker(await workers(), f"{prefix}.orders.lookup", "a", seen_a)
    await queue_worker(await workers(), f"{prefix}.orders.lookup", "b", seen_b)
    say = await workers()

    async def plain_text(msg: Msg) -> None:
        await msg.respond(b"plain words")

    await say.subscribe(f"{prefix}.text.say", cb=plain_text)
    await say.flush()
    caps = {"orders.lookup": {"subject": f"{prefix}.orders.lookup", "idempotent": True,
                              "latency_ms": 200},
            "text.say": {"subject": f"{prefix}.text.say", "latency_ms": 200}}
    async with Reach.start(**FAST) as reach:
        view = await reach.attach(agent(prefix, capabilities=caps, max_concurrency=32))
        assert view["kind"] == "nats" and view["state"] == "online"
        async with Client.connect(reach.url) as client:
            results = await asyncio.gather(*(client.call("orders.lookup", {"id": i})
                                             for i in range(20)))
            assert await client.call("text.say", {}) == {"text": "plain words"}
        assert sorted(r["id"] for r in results) == list(range(20))
        assert {r["worker"] for r in results} == {"a", "b"}  # NATS spread them (p ≈ 2e-6)
        assert len(seen_a) + len(seen_b) == 20
        assert reach.agents()[0]["calls"] == 21 and reach.agents()[0]["faults"] == 0


async def test_the_worker_sees_the_task_in_headers(prefix: str, workers: Any) -> None:
    seen: list[Msg] = []
    await queue_worker(await workers(), f"{prefix}.orders.lookup", "a", seen)
    async with Reach.start(**FAST) as reach:
        adapter = agent(prefix)
        await reach.attach(adapter)
        async with Client.connect(reach.url, caller="planner") as client:
            handle = await client.submit("orders.lookup", {"id": 7}, idempotency_key="k1",
                                         timeout=2)
            assert (await handle.result(timeout=2))["id"] == 7
        assert adapter.describe() == {"servers": [URL],
                                      "subjects": [f"{prefix}.orders.lookup"]}
    got = seen[0].headers or {}
    assert json.loads(seen[0].data) == {"id": 7}
    assert got["Idempotency-Key"] == "planner/k1"
    assert got["Reach-Task-Id"] == handle.task_id and got["Reach-Caller"] == "planner"
    assert got["Reach-Attempt"] == "1" and "Reach-Trace-Id" not in got  # in traceparent
    assert got["traceparent"] == f"00-{handle.trace_id}-{handle.task_id[:16]}-01"
    assert 0 < int(got["Reach-Deadline-Ms"]) <= 2000


async def test_micro_service_errors_4xx_answer_5xx_fault_and_its_ping_is_liveness(
        prefix: str, workers: Any) -> None:
    calls: list[Any] = []

    async def lookup(req: Request) -> None:
        order = json.loads(req.data)["id"]
        calls.append(order)
        if order == "missing":
            await req.respond_error("404", "no such order", data=b'{"id": "missing"}')
        elif order == "flaky" and calls.count("flaky") == 1:
            raise ServiceError("503", "database unavailable")
        elif order == "crash":
            raise RuntimeError("worker bug")
        else:
            await req.respond(json.dumps({"order": order, "state": "shipped"}).encode())

    service = await add_service(await workers(), name=f"orders-{prefix}", version="1.0.0")
    await service.add_endpoint(name="lookup", subject=f"{prefix}.orders.lookup",
                               handler=lookup)
    async with Reach.start(**FAST) as reach:
        view = await reach.attach(agent(prefix, service=f"orders-{prefix}"))
        assert view["state"] == "online"  # $SRV.PING.orders-… answered
        async with Client.connect(reach.url) as client:
            with pytest.raises(TaskError) as answered:
                await client.call("orders.lookup", {"id": "missing"})
            assert str(answered.value).endswith("no such order")
            assert answered.value.details["status"] == 404
            assert answered.value.details["body"] == {"id": "missing"}
            assert calls == ["missing"]  # an answer: never retried
            assert reach.agents()[0]["faults"] == 0  # and not held against the worker
            # 503: a fault, retried (the capability is idempotent), then answered
            assert await client.call("orders.lookup", {"id": "flaky"}) == {
                "order": "flaky", "state": "shipped"}
            assert calls[1:] == ["flaky", "flaky"]
            assert reach.agents()[0]["faults"] == 1
            # an exception in a micro handler is answered as 500 by the framework: a fault
            with pytest.raises(ReachError, match="worker bug") as crashed:
                await client.call("orders.lookup", {"id": "crash"})
            remote = crashed.value.details["remote"]["details"]
            assert remote["status"] == 500 and "answer" not in remote
            assert calls.count("crash") == 3  # the first attempt and max_retries (2) more
        await service.stop()  # every instance gone: the ping goes unanswered
        await wait_until(lambda: reach.agents()[0]["state"] == "suspected")


async def test_no_responders_fails_over_at_once_even_when_not_idempotent(prefix: str) -> None:
    caps = {"orders.cancel": {"subject": f"{prefix}.orders.cancel", "latency_ms": 2000,
                              "weight": 1000}}  # not idempotent; routing prefers NATS
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent(prefix, capabilities=caps))
        ws = Agent("ws-agent")

        @ws.capability("orders.cancel", latency_ms=2000, weight=1)
        async def cancel() -> str:
            return "cancelled by websocket"

        async with ws.connect(reach.url), Client.connect(reach.url) as client:
            await wait_until(lambda: len(reach.agents()) == 2)
            loop = asyncio.get_running_loop()
            started = loop.time()
            handle = await client.submit("orders.cancel", {})
            assert await handle.result(timeout=2) == "cancelled by websocket"
            assert loop.time() - started < 0.5  # at once, not at a 2.4 s timeout
            task = await client.status(handle.task_id)
        assert [(a["agent"], a["outcome"]) for a in task["attempts"]] == [
            ("orders-workers", "undelivered"), ("ws-agent", "ok")]


@pytest.mark.parametrize("idempotent", [True, False])
async def test_a_worker_that_dies_mid_call(prefix: str, workers: Any,
                                           idempotent: bool) -> None:
    """Worker a takes the call and dies; the call times out at the gateway's completion
    timeout (200 ms × 1.2) and, for idempotent work, is retried on worker b."""
    subject = f"{prefix}.orders.lookup"
    got_it = asyncio.Event()

    async def take_and_hang(msg: Msg) -> None:
        got_it.set()

    doomed = await workers()
    await doomed.subscribe(subject, queue="workers", cb=take_and_hang)
    await doomed.flush()
    caps = {"orders.lookup": {"subject": subject, "idempotent": idempotent,
                              "latency_ms": 200}}
    async with Reach.start(**FAST) as reach:
        adapter = agent(prefix, capabilities=caps)
        await reach.attach(adapter)
        async with Client.connect(reach.url) as client:
            loop = asyncio.get_running_loop()
            started = loop.time()
            call = asyncio.ensure_future(client.call("orders.lookup", {"id": 1}))
            await asyncio.wait_for(got_it.wait(), 1)
            seen_b: list[Msg] = []
            await queue_worker(await workers(), subject, "b", seen_b)
            await doomed.close()  # the worker dies holding the call
            if idempotent:
                assert (await call)["worker"] == "b"
                assert loop.time() - started >= 0.2  # waited out the completion timeout
                assert len(seen_b) == 1 and seen_b[0].headers["Reach-Attempt"] == "2"
            else:
                with pytest.raises(ReachError) as err:
                    await call
                assert err.value.code in ("timeout", "task_failed")
                assert seen_b == []  # not idempotent: never run a second time
        assert adapter._nc is not None and not adapter._nc._resp_map  # request aborted


async def test_health_subject_decides_liveness(prefix: str, workers: Any) -> None:
    nc = await workers()

    async def healthy(msg: Msg) -> None:
        await msg.respond(b"ok")

    probe = await nc.subscribe(f"{prefix}.health", cb=healthy)
    await nc.flush()
    async with Reach.start(**FAST) as reach:
        view = await reach.attach(agent(prefix, health_subject=f"{prefix}.health"))
        assert view["state"] == "online"
        await probe.unsubscribe()
        await wait_until(lambda: reach.agents()[0]["state"] == "suspected")
        await nc.subscribe(f"{prefix}.health", cb=healthy)
        await wait_until(lambda: reach.agents()[0]["state"] == "online")


async def test_oversized_and_binary_replies_are_faults(prefix: str, workers: Any) -> None:
    nc = await workers()

    async def big(msg: Msg) -> None:
        await msg.respond(b"x" * 2000)

    async def binary(msg: Msg) -> None:
        await msg.respond(b"\xff\xfe\x00")

    await nc.subscribe(f"{prefix}.blob.get", cb=big)
    await nc.subscribe(f"{prefix}.blob.raw", cb=binary)
    await nc.flush()
    caps = {"blob.get": {"subject": f"{prefix}.blob.get", "latency_ms": 200},
            "blob.raw": {"subject": f"{prefix}.blob.raw", "latency_ms": 200}}
    async with Reach.start(**FAST) as reach:
        await reach.attach(agent(prefix, capabilities=caps, max_reply_bytes=1000))
        async with Client.connect(reach.url) as client:
            with pytest.raises(ReachError, match="over max_reply_bytes"):
                await client.call("blob.get", {})
            with pytest.raises(ReachError, match="neither JSON nor UTF-8"):
                await client.call("blob.raw", {})
        assert reach.agents()[0]["faults"] == 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_attached_while_nats_is_down_comes_online_when_it_starts(prefix: str) -> None:
    need_nats_server()
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    caps = {"orders.lookup": {"subject": f"{prefix}.orders.lookup", "latency_ms": 200}}
    adapter = NatsAgent("orders-workers", url, capabilities=caps, connect_timeout=0.1,
                        reconnect_wait=0.02)
    server: subprocess.Popen[bytes] | None = None
    try:
        async with Reach.start(**FAST) as reach:
            view = await reach.attach(adapter)  # NATS is not there: attached, suspected
            assert view["state"] == "suspected"
            async with Client.connect(reach.url) as client:
                with pytest.raises(ReachError) as err:
                    await client.call("orders.lookup", {}, timeout=0.2)
                assert err.value.code in ("unavailable", "timeout")
            server = subprocess.Popen(["nats-server", "-a", "127.0.0.1", "-p", str(port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            await wait_until(lambda: reach.agents()[0]["state"] == "online")
            server.terminate()
            await asyncio.to_thread(server.wait, 5)
            await wait_until(lambda: reach.agents()[0]["state"] == "suspected")
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait(5)
    assert adapter._nc is None  # detached at stop: the reconnecting client is closed


def test_declarations_are_checked() -> None:
    caps = {"orders.lookup": {"latency_ms": 200}}
    assert NatsAgent("w", capabilities=caps).describe()["subjects"] == ["orders.lookup"]
    with pytest.raises(ValueError, match="capability 'orders.lookup': subject must be a NATS"):
        NatsAgent("w", capabilities={"orders.lookup": {"subject": "orders.*"}})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['subjct'\]"):
        NatsAgent("w", capabilities={"orders.lookup": {"subjct": "x"}})
    with pytest.raises(ValueError, match="not a NATS server URL"):
        NatsAgent("w", "http://127.0.0.1:4222", capabilities=caps)
    with pytest.raises(ValueError, match="health_subject must be"):
        NatsAgent("w", capabilities=caps, health_subject="bad subject")
    with pytest.raises(ValueError, match="service must be"):
        NatsAgent("w", capabilities=caps, service="a.b")
    with pytest.raises(ValueError, match="connect_timeout must be"):
        NatsAgent("w", capabilities=caps, connect_timeout=0)
    # the request's own timeout: past the caller's deadline, else a generous backstop
    adapter = NatsAgent("w", capabilities=caps)
    work = Work("a" * 32, 1, "orders.lookup", {}, "c/k", "b" * 32, "c", deadline_ms=1000)
    assert adapter._timeout(work) == pytest.approx(1.2)
    work.deadline_ms = None
    assert adapter._timeout(work) == 30.0
    assert NatsAgent("w", capabilities=caps, request_timeout=5)._timeout(work) == 5
    # the micro framework's header names, as nats-py spells them
    assert (nats_adapter.ERROR_HEADER, nats_adapter.ERROR_CODE_HEADER) == (
        ERROR_HEADER, ERROR_CODE_HEADER)


def test_without_nats_py_import_works_and_building_one_says_what_to_install() -> None:
    script = (
        "import sys; sys.modules['nats'] = None\n"
        "import reach.adapters\n"
        "from reach.adapters import NatsAgent\n"
        "try:\n"
        "    NatsAgent('w', capabilities={'orders.lookup': {}})\n"
        "except ImportError as exc:\n"
        "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=30, env={**os.environ, "PYTHONWARNINGS": "error"})
    assert out.returncode == 0, out.stderr
    assert "pip install 'agent-reach[nats]'" in out.stdout
