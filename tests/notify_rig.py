"""What the completion webhook tests share: a real aiohttp receiver on loopback that keeps
each delivery's headers and raw body, a worker agent, millisecond settings and backoffs."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from reach import Agent, TaskError
from reach.core.backoff import Backoff

FAST: dict[str, Any] = dict(heartbeat_interval=0.5, ack_timeout=1.0, recovery_grace=0.2,
                            drain_timeout=0.5)
LOOPBACK = ["127.0.0.0/8"]
QUICK = Backoff(base=0.001, factor=1.0, cap=0.001, jitter=0.0)
DOC = Path(__file__).resolve().parents[1] / "docs" / "webhooks.md"


def verifier() -> Callable[..., bool]:
    """The ``verify`` function of docs/webhooks.md, as a reader would paste it."""
    text = DOC.read_text()
    block = text[text.index("## Verifying a delivery"):]
    code = re.search(r"```python\n(.*?)```", block, re.S)
    assert code is not None
    lines = code.group(1).strip().splitlines()
    assert len(lines) <= 11, "the verifier is meant to be about ten lines"
    scope: dict[str, Any] = {}
    exec(compile(code.group(1), str(DOC), "exec"), scope)  # noqa: S102 - our own doc
    return scope["verify"]  # type: ignore[no-any-return]


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Hook:
    """A receiver that answers ``fail`` first (each a status), then 204."""

    fail: list[int] = field(default_factory=list)
    got: list[Delivery] = field(default_factory=list)
    tries: int = 0
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.tries += 1
        if self.fail:
            return web.Response(status=self.fail.pop(0))
        self.got.append(Delivery(dict(request.headers), await request.read()))
        self.arrived.set()
        return web.Response(status=204)

    async def one(self, timeout: float = 5.0) -> Delivery:
        await asyncio.wait_for(self.arrived.wait(), timeout)
        return self.got[-1]


@asynccontextmanager
async def receiver(fail: list[int] | None = None, port: int = 0) -> AsyncIterator[Hook]:
    """A ``Hook`` listening on 127.0.0.1 (``port``: 0 for a free one)."""
    hook = Hook(list(fail or []))
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    hook.url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        yield hook
    finally:
        await runner.cleanup()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Worker:
    """An agent with ``echo.run`` (answers its params), ``orders.cancel`` (a ``TaskError``
    answer: the task fails) and ``slow.read`` (answers once ``go`` is set); ``calls`` counts
    the calls it got."""

    def __init__(self, name: str = "worker", token: str | None = None) -> None:
        self.go = asyncio.Event()
        self.calls = 0
        self.agent = Agent(name, token=token, reconnect_base=0.02)

        @self.agent.capability("echo.run", idempotent=True)
        async def echo(**params: Any) -> dict[str, Any]:
            self.calls += 1
            return {"echo": params}

        @self.agent.capability("orders.cancel")
        async def cancel(order: str = "") -> dict[str, Any]:
            self.calls += 1
            raise TaskError(f"no such order {order!r}", order=order)

        @self.agent.capability("slow.read", idempotent=True)
        async def read() -> dict[str, bool]:
            self.calls += 1
            await self.go.wait()
            return {"done": True}


@asynccontextmanager
async def working(url: str, token: str | None = None) -> AsyncIterator[Worker]:
    worker = Worker(token=token)
    await worker.agent.connect(url)
    try:
        yield worker
    finally:
        worker.go.set()
        await worker.agent.close(drain=0.1)
