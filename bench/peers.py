"""The peers a team would pick instead of Reach, measured by the same batches as every row:

    celery-redis  caller ──▶ Redis (broker) ──▶ Celery worker ──▶ Redis (results) ──▶ caller
                  ``echo.apply_async((payload,))``, results read by one drainer thread
    nats-reqrep   caller ──▶ nats-server ──▶ responder (queue group) ──▶ nats-server ──▶ caller
                  nats-py ``nc.request``; two subscriptions in one queue group, one process
    http-direct   caller ──HTTP/1.1 keep-alive──▶ uvicorn echo app (no reach layer at all)
                  httpx.AsyncClient, connection pool sized to the calls in flight
    http-direct-split   the same with one AsyncClient (one connection) per call in flight

Redis (127.0.0.1:6379) and NATS (127.0.0.1:4222) are services of this machine, not started
here: when one does not answer, its row is skipped with the reason, never faked. The services'
own CPU is read by process name (psutil) for the CPU table. Every responder decodes the JSON
payload and encodes it again, as the raw echo agent and the Reach agent do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlparse

from harness import (
    HERE,
    PAYLOAD,
    Chain,
    Launcher,
    ServiceCpu,
    Skip,
    role,
    say,
    serve_caller,
    serve_commands,
)

REDIS_URL = os.environ.get("REACH_BENCH_REDIS", "redis://127.0.0.1:6379/14")
NATS_URL = os.environ.get("REACH_BENCH_NATS", "nats://127.0.0.1:4222")
CALL_TIMEOUT = 30.0


# =====================================================================================
# Celery + Redis
# =====================================================================================


class CeleryCaller:
    """``echo.apply_async((payload,))`` on the event loop, then the result through
    ``AsyncResult.then``; one drainer thread reads the Redis result channel for all calls in
    flight, as ``AsyncResult.get()`` itself does (``backend.result_consumer.drain_events``).

    Chosen over the obvious ``await asyncio.to_thread(result.get)`` with a thread per call in
    flight because it is Celery's better showing here: measured on this 2-core machine at 64
    in flight, ~420 calls/s against ~180 (64 threads contend for the GIL and for the one
    result channel); at 1 in flight both are within noise (~2.5-3 ms)."""

    def __init__(self) -> None:
        self._task: Any = None
        self._backend: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._drainer: threading.Thread | None = None

    async def open(self, url: str) -> None:
        import celery_app
        self._task = celery_app.echo
        self._backend = celery_app.app.backend
        self._loop = asyncio.get_running_loop()
        self._drainer = threading.Thread(target=self._drain, name="celery-drain", daemon=True)
        self._drainer.start()

    def _drain(self) -> None:
        while not self._stop.is_set():
            try:
                self._backend.result_consumer.drain_events(timeout=0.05)
            except Exception:  # a lost connection: the consumer reconnects on the next call
                time.sleep(0.05)

    async def prepare(self, inflight: int) -> None:
        pass

    async def call(self) -> Any:
        loop = self._loop
        assert loop is not None
        fut: asyncio.Future[Any] = loop.create_future()
        result = self._task.apply_async((PAYLOAD,))
        result.then(lambda done: loop.call_soon_threadsafe(_settle, fut, done))
        async with asyncio.timeout(CALL_TIMEOUT):
            return await fut

    async def close(self) -> None:
        self._stop.set()
        if self._drainer is not None:
            await asyncio.to_thread(self._drainer.join, 1.0)


def _settle(fut: asyncio.Future[Any], done: Any) -> None:
    if fut.done():
        return
    if done.successful():
        fut.set_result(done.result)
    else:
        fut.set_exception(RuntimeError(f"celery task {done.state}: {done.result!r}"))


async def role_celery_caller(args: argparse.Namespace) -> None:
    await serve_caller(CeleryCaller(), REDIS_URL)


def _redis_flush() -> None:
    """Empty the benchmark's own Redis db (and no other), or Skip when Redis is not there."""
    try:
        import redis
    except ImportError as exc:
        raise Skip(f"the redis package is not installed ({exc})") from None
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=5)
        client.ping()
        client.flushdb()  # this db only: REACH_BENCH_REDIS names a db kept for the benchmark
        client.close()
    except redis.RedisError as exc:
        raise Skip(f"Redis not reachable at {REDIS_URL} ({exc})") from None


async def launch_celery(chain: Chain, launcher: Launcher) -> None:
    try:
        import celery  # noqa: F401
    except ImportError as exc:
        raise Skip(f"celery is not installed ({exc})") from None
    await asyncio.to_thread(_redis_flush)
    chain.cleanup = lambda: asyncio.to_thread(_redis_flush)
    pool, concurrency = chain.params["pool"], chain.params["concurrency"]
    chain.agent, _ = await launcher.start(
        f"{chain.name}-worker", [str(HERE / "celery_app.py"), "--pool", pool,
                                 "--concurrency", str(concurrency)])
    chain.caller, _ = await launcher.start(f"{chain.name}-caller", role("celery-caller"))
    chain.service = ServiceCpu(("redis-server",))


# =====================================================================================
# NATS request-reply
# =====================================================================================


async def role_nats_responder(args: argparse.Namespace) -> None:
    """``--responders`` subscriptions in queue group ``echo``: each request goes to one."""
    import nats

    nc = await nats.connect(NATS_URL, connect_timeout=5, allow_reconnect=False)

    async def answer(msg: Any) -> None:
        await msg.respond(json.dumps(json.loads(msg.data)).encode())

    for _ in range(args.responders):
        await nc.subscribe(args.subject, queue="echo", cb=answer)
    await nc.flush()
    try:
        say("READY", f"{NATS_URL} {args.subject}")
        await serve_commands()
    finally:
        await nc.close()


class NatsCaller:
    """``nc.request(subject, payload)``: one request, the first reply."""

    def __init__(self, subject: str) -> None:
        self._subject = subject
        self._nc: Any = None

    async def open(self, url: str) -> None:
        import nats
        self._nc = await nats.connect(url, connect_timeout=5, allow_reconnect=False)

    async def prepare(self, inflight: int) -> None:
        pass

    async def call(self) -> Any:
        msg = await self._nc.request(self._subject, json.dumps(PAYLOAD).encode(),
                                     timeout=CALL_TIMEOUT)
        return json.loads(msg.data)

    async def close(self) -> None:
        if self._nc is not None:
            await self._nc.close()


async def role_nats_caller(args: argparse.Namespace) -> None:
    await serve_caller(NatsCaller(args.subject), NATS_URL)


def _nats_probe() -> None:
    """Skip unless a NATS server greets us (its first line is ``INFO {...}``)."""
    try:
        import nats  # noqa: F401
    except ImportError as exc:
        raise Skip(f"nats-py is not installed ({exc})") from None
    where = urlparse(NATS_URL)
    try:
        with socket.create_connection((where.hostname, where.port or 4222), timeout=2) as s:
            s.settimeout(2)
            greeting = s.recv(5)
    except OSError as exc:
        raise Skip(f"NATS not reachable at {NATS_URL} ({exc})") from None
    if not greeting.startswith(b"INFO"):
        raise Skip(f"{NATS_URL} does not speak NATS (it said {greeting!r})")


async def launch_nats(chain: Chain, launcher: Launcher) -> None:
    await asyncio.to_thread(_nats_probe)
    subject = f"reach-bench.{os.getpid()}.echo"  # this run's own: concurrent runs never mix
    chain.agent, _ = await launcher.start(
        f"{chain.name}-responder", role("nats-responder", "--subject", subject,
                                        "--responders", str(chain.params["responders"])))
    chain.caller, _ = await launcher.start(f"{chain.name}-caller",
                                           role("nats-caller", "--subject", subject))
    chain.service = ServiceCpu(("nats-server",))


# =====================================================================================
# direct HTTP
# =====================================================================================


async def echo_app(scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                   send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
    """A bare ASGI app: any request's JSON body comes back as the JSON response."""
    if scope["type"] != "http":
        return
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    out = json.dumps(json.loads(body)).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(out)).encode())]})
    await send({"type": "http.response.body", "body": out})


async def role_http_echo(args: argparse.Namespace) -> None:
    """uvicorn serving ``echo_app`` on a loopback port of its own (h11 unless httptools is
    installed; the standard asyncio loop, like every other process here)."""
    import uvicorn

    # uvicorn binds (port 0: a free one), as it does for a team: its listening socket is then
    # created as IPPROTO_TCP, which is what makes asyncio set TCP_NODELAY on each connection
    # (a socket made here with proto 0 would leave Nagle on and add 40 ms per response).
    config = uvicorn.Config(echo_app, host="127.0.0.1", port=0, lifespan="off",
                            log_level="warning", access_log=False, backlog=1024,
                            timeout_keep_alive=300)
    server = uvicorn.Server(config)
    serving = asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        if serving.done():
            serving.result()  # raises what stopped it
            raise RuntimeError("uvicorn stopped before it started")
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        say("READY", f"http://127.0.0.1:{port} http={config.http}")
        await serve_commands()
    finally:
        server.should_exit = True
        await asyncio.gather(serving, return_exceptions=True)


class HttpCaller:
    """``POST /echo`` with httpx, keep-alive. Per in-flight level either one AsyncClient whose
    pool has that many connections (``split=False``: how a team writes it), or that many
    AsyncClients of one connection each, a call taking a free one (``split=True``).

    Why both: httpcore's pool looks at every connection for every queued request each time a
    request starts or ends, so with 64 connections the caller spends ~7 ms of CPU per call in
    ``_assign_requests_to_connections`` (measured with cProfile); the split row shows the HTTP
    hop without that cost."""

    def __init__(self, split: bool) -> None:
        self._split = split
        self._url = ""
        self._clients: dict[int, list[Any]] = {}
        self._free: list[Any] = []

    async def open(self, url: str) -> None:
        self._url = url + "/echo"
        # httpcore asks sniffio which event loop runs on every request; sniffio is optional
        # and not installed here, so each request would scan sys.path for it four times
        # (~0.5 ms). Marking it absent makes that failed import instant; httpcore then
        # assumes asyncio, as it does when the import fails the slow way.
        try:
            import sniffio  # noqa: F401
        except ImportError:
            sys.modules.setdefault("sniffio", None)  # type: ignore[assignment]

    async def prepare(self, inflight: int) -> None:
        import httpx
        if inflight not in self._clients:
            count, size = (inflight, 1) if self._split else (1, inflight)
            limits = httpx.Limits(max_connections=size, max_keepalive_connections=size,
                                  keepalive_expiry=300)
            self._clients[inflight] = [httpx.AsyncClient(limits=limits, timeout=CALL_TIMEOUT)
                                       for _ in range(count)]
        self._free = list(self._clients[inflight])

    async def call(self) -> Any:
        # split: never more calls than clients in flight, so one is always free
        client = self._free.pop() if self._split else self._free[0]
        try:
            response = await client.post(self._url, json=PAYLOAD)
        finally:
            if self._split:
                self._free.append(client)
        response.raise_for_status()
        return response.json()

    async def close(self) -> None:
        await asyncio.gather(*(c.aclose() for cs in self._clients.values() for c in cs),
                             return_exceptions=True)


async def role_http_caller(args: argparse.Namespace) -> None:
    await serve_caller(HttpCaller(args.split), args.url)


async def launch_http(chain: Chain, launcher: Launcher) -> None:
    try:
        import httpx  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise Skip(f"httpx or uvicorn is not installed ({exc})") from None
    chain.agent, ready = await launcher.start(f"{chain.name}-server", role("http-echo"))
    url = ready.split()[0]
    split = ["--split"] if chain.params.get("split") else []
    chain.caller, _ = await launcher.start(f"{chain.name}-caller",
                                           role("http-caller", "--url", url, *split))


# =====================================================================================
# the rows
# =====================================================================================

ROLES: dict[str, Callable[[argparse.Namespace], Awaitable[None]]] = {
    "celery-caller": role_celery_caller, "nats-responder": role_nats_responder,
    "nats-caller": role_nats_caller, "http-echo": role_http_echo,
    "http-caller": role_http_caller}


def chains(celery_pool: str, celery_concurrency: int) -> list[Chain]:
    return [
        Chain("celery-redis", "peer", launch_celery,
              f"Celery {celery_pool} pool -c {celery_concurrency}, Redis broker + results "
              f"({REDIS_URL}), apply_async + AsyncResult.then, one drainer thread",
              params={"pool": celery_pool, "concurrency": celery_concurrency}),
        Chain("nats-reqrep", "peer", launch_nats,
              f"nats-py request-reply via {NATS_URL}, 2 responders in one queue group",
              params={"responders": 2}),
        Chain("http-direct", "peer", launch_http,
              "one httpx.AsyncClient, pool = in-flight connections -> uvicorn ASGI echo "
              "(h11), keep-alive"),
        Chain("http-direct-split", "peer", launch_http,
              "one httpx.AsyncClient of 1 connection per call in flight -> uvicorn ASGI echo "
              "(h11), keep-alive", params={"split": True}),
    ]
