"""The raw floor: caller ──ws──▶ raw relay ──ws──▶ echo agent, with correlation ids and nothing
else (no routing, no store, no retries). What a relay costs in Python on this machine.

Two variants: ``raw`` sends with ``await ws.send`` (websockets' own way); ``raw-eager`` writes
like Reach's outbox does (reach.outbox.Outbox: at once when the socket is free, coalesced when
busy). The floor is the better of the two, so Reach is never compared against a relay that
lacks a write technique Reach itself uses.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from harness import PAYLOAD, Chain, Launcher, role, say, serve_caller, serve_commands

WS_OPTIONS: dict[str, Any] = {"compression": None, "max_size": 1 << 20, "ping_interval": None}


def sender(ws: Any, eager: bool) -> Callable[[str], Awaitable[None]]:
    """``await ws.send``, or with ``eager`` the write path Reach uses."""
    if not eager:
        return ws.send  # type: ignore[no-any-return]
    from reach.wire.outbox import Outbox
    out = Outbox(ws)

    async def send(text: str) -> None:
        out.post(text)
    return send


# -------------------------------------------------------------------- roles


async def role_relay(args: argparse.Namespace) -> None:
    """Caller frames ``{"id", "payload"}`` go to the agent under a relay-wide id; the agent's
    echo goes back to the caller that sent it, under that caller's own id. Nothing else."""
    from websockets.asyncio.server import ServerConnection, serve
    from websockets.exceptions import ConnectionClosed

    agents: list[ServerConnection] = []
    pending: dict[int, tuple[ServerConnection, Any]] = {}
    ids = itertools.count(1)
    senders: dict[Any, Callable[[str], Awaitable[None]]] = {}

    def send_to(ws: Any) -> Callable[[str], Awaitable[None]]:
        if ws not in senders:
            senders[ws] = sender(ws, args.eager)
        return senders[ws]

    async def agent_session(ws: ServerConnection) -> None:
        agents.append(ws)
        try:
            async for raw in ws:
                msg = json.loads(raw)
                route = pending.pop(msg["id"], None)
                if route is None:
                    continue
                caller, msg["id"] = route
                with contextlib.suppress(ConnectionClosed):
                    await send_to(caller)(json.dumps(msg))
        finally:
            agents.remove(ws)

    async def caller_session(ws: ServerConnection) -> None:
        mine: set[int] = set()
        try:
            async for raw in ws:
                msg = json.loads(raw)
                if not agents:
                    await send_to(ws)(json.dumps({"id": msg["id"], "error": "no agent"}))
                    continue
                rid = next(ids)
                pending[rid] = (ws, msg["id"])
                mine.add(rid)
                msg["id"] = rid
                await send_to(agents[0])(json.dumps(msg))
                if len(mine) > 4096:  # forget answered ids now and then (bounded memory)
                    mine.intersection_update(pending)
        finally:
            for rid in mine:
                pending.pop(rid, None)

    async def handler(ws: ServerConnection) -> None:
        path = ws.request.path if ws.request is not None else ""
        try:
            if path == "/agent":
                await agent_session(ws)
            else:
                await caller_session(ws)
        except ConnectionClosed:
            pass

    async with serve(handler, "127.0.0.1", args.port, **WS_OPTIONS) as server:
        port = server.sockets[0].getsockname()[1]
        say("READY", f"ws://127.0.0.1:{port}")
        await serve_commands()


async def role_echo(args: argparse.Namespace) -> None:
    """The raw agent: decode each frame, answer ``{"id", "payload"}``."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    async with connect(args.url + "/agent", open_timeout=10, **WS_OPTIONS) as ws:
        send = sender(ws, args.eager)

        async def echo() -> None:
            with contextlib.suppress(ConnectionClosed):
                async for raw in ws:
                    msg = json.loads(raw)
                    await send(json.dumps({"id": msg["id"], "payload": msg["payload"]}))

        worker = asyncio.get_running_loop().create_task(echo())
        say("READY", args.url)
        try:
            await serve_commands()
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)


class RawCaller:
    """Frames ``{"id", "payload"}`` over one websocket; answers matched by id."""

    def __init__(self, eager: bool = False) -> None:
        self._eager = eager
        self._send: Any = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ws: Any = None
        self._reader: asyncio.Task[None] | None = None

    async def open(self, url: str) -> None:
        from websockets.asyncio.client import connect
        self._ws = await connect(url + "/caller", open_timeout=10, **WS_OPTIONS)
        self._send = sender(self._ws, self._eager)
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def prepare(self, inflight: int) -> None:
        pass

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed
        try:
            async for raw in self._ws:
                msg = json.loads(raw)
                fut = self._pending.pop(msg["id"], None)
                if fut is None or fut.done():
                    continue
                if "error" in msg:
                    fut.set_exception(RuntimeError(msg["error"]))
                else:
                    fut.set_result(msg["payload"])
        except ConnectionClosed:
            pass
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("relay connection lost"))
            self._pending.clear()

    async def call(self) -> Any:
        req = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req] = fut
        try:
            await self._send(json.dumps({"id": req, "payload": PAYLOAD}))
            return await fut
        finally:
            self._pending.pop(req, None)

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


async def role_raw_caller(args: argparse.Namespace) -> None:
    await serve_caller(RawCaller(args.eager), args.url)


ROLES: dict[str, Callable[[argparse.Namespace], Awaitable[None]]] = {
    "relay": role_relay, "echo": role_echo, "raw-caller": role_raw_caller}


# -------------------------------------------------------------------- parent side


async def launch(chain: Chain, launcher: Launcher) -> None:
    """Relay, then echo agent, then caller — each waited for by its READY line."""
    eager = ["--eager"] if chain.params.get("eager") else []
    chain.middle, url = await launcher.start(f"{chain.name}-middle",
                                             role("relay", "--port", "0", *eager))
    chain.agent, _ = await launcher.start(f"{chain.name}-agent",
                                          role("echo", "--url", url, *eager))
    chain.caller, _ = await launcher.start(f"{chain.name}-caller",
                                           role("raw-caller", "--url", url, *eager))


def chains() -> list[Chain]:
    return [
        Chain("raw", "floor", launch, "websockets relay, `await ws.send`"),
        Chain("raw-eager", "floor", launch, "websockets relay, Reach's eager writes",
              params={"eager": True}),
    ]
