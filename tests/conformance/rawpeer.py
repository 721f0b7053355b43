"""A peer that speaks docs/protocol.md with nothing but ``websockets`` and ``json``.

The conformance tests are written against the page, not the Python SDKs: they never import
``reach.sdk`` (``reach.Reach`` only starts the coordinator under test). ``Peer`` is one raw
websocket connection; ``agent`` and ``caller`` open one with the first frame of §2, and an
agent beats in the background at the interval its ``welcome`` gave, unless told not to.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

WAIT = 2.0  # seconds any one expected frame may take (the frames come in milliseconds)


class Peer:
    """One raw connection: JSON frames out, JSON frames in, nothing interpreted."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.welcome: dict[str, Any] = {}
        self._beat: asyncio.Task[None] | None = None
        self.held: list[dict[str, Any]] = []  # frames read past while looking for another

    @classmethod
    async def open(cls, url: str) -> Peer:
        return cls(await websockets.connect(url, compression=None, max_size=None))

    async def send(self, frame: dict[str, Any] | str | bytes) -> None:
        await self.ws.send(frame if isinstance(frame, str | bytes) else json.dumps(frame))

    async def recv(self, timeout: float = WAIT) -> dict[str, Any]:
        if self.held:
            return self.held.pop(0)
        async with asyncio.timeout(timeout):
            frame = json.loads(await self.ws.recv())
        assert isinstance(frame, dict) and frame.get("v") == 1, frame  # §1: always sends v
        return frame

    async def expect(self, kind: str, timeout: float = WAIT, **match: Any) -> dict[str, Any]:
        """The next frame of ``type`` ``kind`` whose fields equal ``match``; frames read past
        are kept (``held``) for the next ``recv``."""
        skipped: list[dict[str, Any]] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    frame = await self.recv(timeout)
                    if frame["type"] == kind and all(frame.get(k) == v for k, v in match.items()):
                        return frame
                    skipped.append(frame)
        finally:
            self.held[:0] = skipped

    async def silent(self, for_s: float) -> None:
        """Assert nothing arrives for ``for_s`` seconds."""
        with contextlib.suppress(TimeoutError):
            frame = await self.recv(for_s)
            raise AssertionError(f"expected silence, got {frame}")

    async def outcome(self, req_id: int, timeout: float = WAIT) -> dict[str, Any]:
        """The outcome (``result`` or ``error``) of request ``req_id``, past its ``accepted``
        and chunks (§4: the outcome may come alone, carrying ``trace_id``)."""
        async with asyncio.timeout(timeout):
            while True:
                frame = await self.recv(timeout)
                if frame.get("id") == req_id and frame["type"] in ("result", "error"):
                    return frame

    async def closed(self, timeout: float = WAIT) -> tuple[int | None, str]:
        """Wait for the coordinator to close; the close code and reason it sent."""
        async with asyncio.timeout(timeout):
            with contextlib.suppress(websockets.ConnectionClosed):
                while True:
                    self.held.append(json.loads(await self.ws.recv()))
        rcvd = self.ws.protocol.close_rcvd
        return (None, "") if rcvd is None else (rcvd.code, rcvd.reason)

    def beat(self, every: float | None = None, **fields: Any) -> None:
        """Send ``heartbeat`` frames every ``every`` s (default: the welcome's interval / 2)."""
        interval = every or float(self.welcome["heartbeat_interval"]) / 2

        async def run() -> None:
            with contextlib.suppress(websockets.ConnectionClosed):
                while True:
                    await self.send({"v": 1, "type": "heartbeat", **fields})
                    await asyncio.sleep(interval)
        self.stop_beat()
        self._beat = asyncio.get_running_loop().create_task(run())

    def stop_beat(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
            self._beat = None

    async def close(self) -> None:
        self.stop_beat()
        await self.ws.close()


async def agent(url: str, name: str, capabilities: list[dict[str, Any]], *,
                beat: bool = True, **fields: Any) -> Peer:
    """An agent connection past its ``welcome`` (asserted), beating unless ``beat=False``."""
    peer = await Peer.open(url)
    await peer.send({"v": 1, "type": "register", "name": name,
                     "capabilities": capabilities, **fields})
    welcome = await peer.recv()
    assert welcome["type"] == "welcome" and welcome["role"] == "agent", welcome
    peer.welcome = welcome
    if beat:
        peer.beat()
    return peer


async def caller(url: str, name: str = "conformance", **fields: Any) -> Peer:
    """A caller connection past its ``welcome`` (asserted)."""
    peer = await Peer.open(url)
    await peer.send({"v": 1, "type": "hello", "caller": name, **fields})
    welcome = await peer.recv()
    assert welcome == {**welcome, "type": "welcome", "role": "caller"}, welcome
    peer.welcome = welcome
    return peer


async def answer(peer: Peer, invoke: dict[str, Any], result: Any) -> None:
    """Answer an ``invoke`` with a ``result`` echoing its task id and attempt (§3)."""
    await peer.send({"v": 1, "type": "result", "task_id": invoke["task_id"],
                     "attempt": invoke["attempt"], "result": result})


def submit(req_id: int, capability: str, params: dict[str, Any] | None = None,
           **fields: Any) -> dict[str, Any]:
    return {"v": 1, "type": "submit", "id": req_id, "capability": capability,
            "params": params or {}, **fields}


async def wait_state(reach: Any, name: str, state: str, timeout: float = WAIT) -> None:
    """Wait until ``reach.agents()`` shows agent ``name`` in ``state``."""
    async with asyncio.timeout(timeout):
        while True:
            if any(a["name"] == name and a["state"] == state for a in reach.agents()):
                return
            await asyncio.sleep(0.005)
