"""``Admin``: operate a running coordinator from another process, over its admin feed.

    from reach import Admin

    async with Admin.connect("ws://127.0.0.1:8765", token=ADMIN_TOKEN) as admin:
        for letter in await admin.dead_letters(capability="orders.write"):
            await admin.replay(letter["task_id"], params={"qty": 1}, timeout=30)

``reach.dead_letters()`` and ``reach.replay()`` only work inside the process that owns the
coordinator; this is the same from anywhere that can reach its port (docs/admin-feed.md).

An ``Admin`` keeps the feed's picture current: the first ``snapshot`` and every ``delta``
after it are applied as they arrive by one reader task, so ``agents()`` and ``dead_letters()``
answer from memory without a round trip. Commands carry an id and are answered by the
``reply`` of the same id; several may run at once. A refused command raises the
``reach.ReachError`` of its code (``invalid_params``, ``unauthorized``, ...); a refused token
raises ``Unauthorized`` from ``connect``; a connection that goes away raises ``Unavailable``.

Values are the feed's own JSON objects (dicts: ``AgentView``, ``DeadLetter``, the task view),
as ``reach.agents()`` and ``reach.dead_letters()`` return them in-process, so a script works
the same either way. Never starts an event loop itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from reach.errors import (
    InvalidParams,
    ProtocolError,
    ReachError,
    Unauthorized,
    Unavailable,
    from_wire,
)
from reach.sdk.opening import Opening
from reach.wire import admin as a
from reach.wire import protocol as p

POLICY_VIOLATION = 1008  # the close code of a refused admin token
MAX_FRAME_BYTES = 64 * 1024 * 1024  # a big coordinator's snapshot is one frame
MAX_TRACES = 1000  # recent traces kept from the deltas of a long session


class Admin:
    """An open admin-feed session: the coordinator's agents and dead letters, kept current,
    and the operator's actions (replay, discard, drain, ...). Open with ``Admin.connect``."""

    def __init__(self, url: str, token: str | None, *, open_timeout: float = 5.0) -> None:
        self.url = url
        self._token = token
        self._open_timeout = open_timeout
        self._ws: ClientConnection | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._failure: ReachError | None = None
        self._ready: asyncio.Future[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._agents: dict[str, dict[str, Any]] = {}
        self._letters: dict[str, dict[str, Any]] = {}
        self._traces: dict[str, dict[str, Any]] = {}
        self._coordinator: dict[str, Any] = {}
        self._changed = asyncio.Event()

    @classmethod
    def connect(cls, url: str, token: str | None = None, *,
                open_timeout: float = 5.0) -> Opening[Admin]:
        """Open the admin feed at ``url`` with the admin token: ``await`` it (then
        ``await admin.close()``) or use it with ``async with``. Returns once the first
        snapshot arrived; a refused token raises ``Unauthorized``, an unreachable
        coordinator ``Unavailable``."""
        admin = cls(url, token, open_timeout=open_timeout)
        return Opening(admin, admin._open, admin.close)

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ connection

    async def _open(self) -> None:
        try:
            self._ws = await websockets.connect(self.url, max_size=MAX_FRAME_BYTES,
                                                open_timeout=self._open_timeout)
        except InvalidURI as exc:
            raise InvalidParams(f"not a websocket URL: {self.url!r} (like ws://HOST:8765)"
                                ) from exc
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            raise Unavailable(f"cannot connect to {self.url}: {exc or type(exc).__name__} "
                              f"(is `reach serve` running there?)") from exc
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        await self._ws.send(p.dump(p.AdminHello(token=self._token)))
        self._reader = loop.create_task(self._read_loop(), name="reach-admin")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self._open_timeout)
        except TimeoutError:
            await self.close()
            raise Unavailable(f"{self.url} sent no admin snapshot within "
                              f"{self._open_timeout:g}s") from None
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Close the session (idempotent); commands still waiting raise ``Unavailable``."""
        self._fail(Unavailable("the admin session was closed"))
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    def _fail(self, failure: ReachError) -> None:
        if self._failure is None:
            self._failure = failure
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(self._failure)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(self._failure)
            self._ready.exception()  # read here, so an unawaited one is never logged

    async def _read_loop(self) -> None:
        assert self._ws is not None
        try:
            async for raw in self._ws:
                self._on_frame(raw)
        except ConnectionClosed as exc:
            close = exc.rcvd
            if close is not None and close.code == POLICY_VIOLATION:
                self._fail(Unauthorized(close.reason or "the admin token was refused"))
            else:
                self._fail(Unavailable("the admin feed connection was lost"))
        except ReachError as exc:
            self._fail(exc)
        else:
            self._fail(Unavailable("the coordinator closed the admin feed"))
        finally:
            self._fail(Unavailable("the admin feed connection was lost"))

    def _on_frame(self, raw: str | bytes) -> None:
        try:
            frame = a.parse_admin(raw)
        except ProtocolError:
            try:  # a frame type newer than this client is skipped; a broken one ends it
                kind = json.loads(raw).get("type")
            except (ValueError, AttributeError):
                kind = None
            if kind in a.ADMIN_FRAME_TYPES or kind is None:
                raise
            return
        if isinstance(frame, a.Snapshot):
            self._coordinator = frame.coordinator.model_dump()
            raw_frame = json.loads(raw)
            self._agents = {v["agent_id"]: v for v in raw_frame.get("agents", [])}
            self._letters = {v["task_id"]: v for v in raw_frame.get("dead_letters", [])}
            self._traces = {v["trace_id"]: v for v in raw_frame.get("traces", [])}
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif isinstance(frame, a.Delta):
            raw_frame = json.loads(raw)
            for view in raw_frame.get("agents", []):
                self._agents[view["agent_id"]] = view
            for letter in raw_frame.get("dead_letters", []):
                self._letters[letter["task_id"]] = letter
            for trace in raw_frame.get("traces", []):
                self._traces[trace["trace_id"]] = trace
            if len(self._traces) > MAX_TRACES:  # a long session keeps the newest only
                newest = sorted(self._traces.values(), key=lambda t: t.get("started_at") or 0.0)
                self._traces = {t["trace_id"]: t for t in newest[-MAX_TRACES:]}
            for task_id in frame.resolved:
                self._letters.pop(task_id, None)
        elif isinstance(frame, a.Reply):
            future = self._pending.pop(frame.id, None)
            if future is not None and not future.done():
                if frame.ok:
                    future.set_result(frame.result)
                else:
                    wire = frame.error.model_dump() if frame.error else {"code": "reach_error"}
                    future.set_exception(from_wire(wire))
        else:  # an error frame: a command's (it has the id) or the refused token's
            refusal = from_wire(frame.error.model_dump())
            waiting = self._pending.pop(frame.id, None) if frame.id is not None else None
            if waiting is not None:
                if not waiting.done():
                    waiting.set_exception(refusal)
            elif frame.error.code == "unauthorized":
                raise Unauthorized(refusal.message or "the admin token was refused")
        self._changed.set()
        self._changed = asyncio.Event()

    # ------------------------------------------------------------ commands

    async def command(self, action: str, **args: Any) -> Any:
        """Run one admin-feed command (docs/admin-feed.md §4) and return its ``result``;
        the methods below are this with their arguments named. ``ReachError`` on refusal."""
        if self._failure is not None:
            raise self._failure
        assert self._ws is not None
        command_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[command_id] = future
        try:
            await self._ws.send(p.dump(p.Command(id=command_id, action=action, args=args)))
        except ConnectionClosed:
            self._pending.pop(command_id, None)
            raise Unavailable("the admin feed connection was lost") from None
        try:
            return await future
        finally:
            self._pending.pop(command_id, None)

    @property
    def coordinator(self) -> dict[str, Any]:
        """The coordinator this session is on: ``url``, ``version``, ``started_at``, ``store``."""
        return dict(self._coordinator)

    async def agents(self) -> list[dict[str, Any]]:
        """Every agent the coordinator knows (``AgentView``), sorted by name; from the feed's
        current picture."""
        self._check()
        return sorted(self._agents.values(), key=lambda v: (v["name"], v["agent_id"]))

    async def traces(self) -> list[dict[str, Any]]:
        """The recent traces (``TraceSummary``), newest first: the coordinator's last 200
        at connect, and those begun since. Older ones are found with ``find``."""
        self._check()
        return sorted(self._traces.values(), key=lambda t: t.get("started_at") or 0.0,
                      reverse=True)

    async def dead_letters(self, capability: str | None = None, agent: str | None = None,
                           error: str | None = None, discarded: bool = False
                           ) -> list[dict[str, Any]]:
        """The unresolved dead letters (``DeadLetter``), oldest first; filtered by
        ``capability``, last ``agent``, and ``error`` (a substring of its code or message,
        any case). ``discarded=True`` asks the coordinator for the discarded ones instead
        (the ``dead_letters`` query command)."""
        self._check()
        if discarded:
            args: dict[str, Any] = {"discarded": True}
            for key, value in (("capability", capability), ("agent", agent), ("error", error)):
                if value is not None:
                    args[key] = value
            result = await self.command("dead_letters", **args)
            return list(result.get("dead_letters", []))
        letters = [v for v in self._letters.values() if _matches(v, capability, agent, error)]
        return sorted(letters, key=lambda v: (v.get("dead_since", 0.0), v["task_id"]))

    async def replay(self, task_id: str, params: dict[str, Any] | None = None,
                     timeout: float | None = None, *, wait: float | None = None
                     ) -> dict[str, Any]:
        """Replay a dead letter, with new ``params`` and/or a new task ``timeout`` if given
        (checked against the capability's schema; the letter's history records the change).
        Returns the task view once it ends or ``wait`` seconds pass (default 30)."""
        args: dict[str, Any] = {"task_id": task_id}
        if params is not None:
            args["params"] = params
        if timeout is not None:
            args["timeout"] = timeout
        if wait is not None:
            args["wait"] = wait
        result: dict[str, Any] = await self.command("replay", **args)
        return result

    async def replay_many(self, *, capability: str | None = None, agent: str | None = None,
                          error: str | None = None, since: float | None = None,
                          until: float | None = None) -> list[str]:
        """Replay every dead letter that matches (a missing filter matches all); returns the
        task ids started. Their outcomes arrive in the picture (``dead_letters()``)."""
        args = {k: v for k, v in (("capability", capability), ("agent", agent),
                                  ("error", error), ("since", since), ("until", until))
                if v is not None}
        result = await self.command("replay_filter", **args)
        return list(result.get("replayed", []))

    async def discard(self, task_id: str, *, reason: str) -> dict[str, Any]:
        """Settle a dead letter that can never succeed: kept and audited with ``reason``, gone
        from the default list. Returns the letter's view."""
        result: dict[str, Any] = await self.command("discard", task_id=task_id, reason=reason)
        return result

    async def cancel(self, task_id: str, *, reason: str = "") -> dict[str, Any]:
        """Cancel a live task of any caller: it ends ``cancelled`` and its agent is told to
        stop. Returns its view (as it ended, if it ended first)."""
        result: dict[str, Any] = await self.command("cancel", task_id=task_id, reason=reason)
        return result

    async def phrases(self, capability: str | None = None) -> list[dict[str, Any]]:
        """What intent routing learned from callers' choices (of ``capability``)."""
        args = {} if capability is None else {"capability": capability}
        result: dict[str, Any] = await self.command("phrases", **args)
        return list(result["phrases"])

    async def forget_phrase(self, text: str) -> dict[str, Any]:
        """Stop routing this request by the phrase learned for it."""
        result: dict[str, Any] = await self.command("forget_phrase", text=text)
        return result

    async def push_dead_letters(self) -> list[dict[str, Any]]:
        """The notifications that were not delivered (A2A pushes and task webhooks), oldest
        first: task_id, config_id, kind, url, reason, dead_at, capability, caller, state
        (docs/a2a.md, docs/webhooks.md)."""
        result: dict[str, Any] = await self.command("push_dead_letters")
        return list(result["push_dead_letters"])

    async def replay_pushes(self, task_id: str | None = None) -> list[str]:
        """Send the undelivered push notifications again (of ``task_id`` only, when given);
        returns their tasks' ids. Those that fail again are listed again."""
        args = {} if task_id is None else {"task_id": task_id}
        result: dict[str, Any] = await self.command("replay_pushes", **args)
        return list(result["replayed"])

    async def notify_secret(self) -> str | None:
        """The secret completion webhooks are signed with when their caller gave no token
        (docs/webhooks.md)."""
        result: dict[str, Any] = await self.command("notify_secret")
        return None if result["notify_secret"] is None else str(result["notify_secret"])

    async def drain(self, name: str) -> dict[str, Any]:
        """Route no new work to agent ``name`` (or agent_id); its in-flight work finishes."""
        result: dict[str, Any] = await self.command("drain", agent=name)
        return result

    async def undrain(self, name: str) -> dict[str, Any]:
        """Let a drained agent receive work again."""
        result: dict[str, Any] = await self.command("undrain", agent=name)
        return result

    async def find(self, id: str) -> dict[str, Any]:  # noqa: A002 - the feed's own word
        """A task or trace by its id or the first 6+ characters of one: ``trace_id``,
        ``task_id``, ``dead_letter``, ``summary``, ``timeline``."""
        result: dict[str, Any] = await self.command("find", id=id)
        return result

    async def task(self, task_id: str) -> dict[str, Any]:
        """A task's full view: envelope, state, result or error, attempts, history."""
        result: dict[str, Any] = await self.command("task", task_id=task_id)
        return result

    async def trace(self, trace_id: str) -> dict[str, Any]:
        """A trace's ``Timeline``: its tasks and hops."""
        result: dict[str, Any] = await self.command("trace", trace_id=trace_id)
        return result

    async def changed(self, timeout: float) -> bool:
        """Wait until the next frame is applied (or ``timeout`` passes): a script polling the
        picture waits on this rather than sleeping. False on timeout."""
        self._check()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure


def _matches(letter: dict[str, Any], capability: str | None, agent: str | None,
             error: str | None) -> bool:
    if capability is not None and letter.get("capability") != capability:
        return False
    if agent is not None and letter.get("agent") != agent:
        return False
    if error is not None:
        err = letter.get("error") or {}
        text = f"{err.get('code', '')}: {err.get('message', '')}".lower()
        if error.lower() not in text:
            return False
    return True


__all__ = ["Admin"]
