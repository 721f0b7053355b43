"""The admin feed: an operator's websocket session (docs/admin-feed.md).

After an ``admin`` frame with the admin token, the session sends a ``snapshot``, then a
``delta`` whenever something changed (at most every ``MIN_GAP``, at least every ``MAX_GAP``),
and runs ``command`` frames concurrently, answering each with a ``reply``. It reads coordinator
state only through the event bus and ``Reach``'s admin surface, so a slow operator connection
costs routing nothing: its event buffer is bounded, and overflowing it just means a fresh
snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import ServerConnection

from reach.errors import InvalidParams, ReachError, Unauthorized
from reach.gateway.events import AGENT, BREAKER, DEAD_LETTER, TASK, Event, Subscription
from reach.server.channel import _Session, refuse
from reach.wire import protocol as p

if TYPE_CHECKING:
    from reach.reach import Reach

log = logging.getLogger("reach.admin")
MIN_GAP = 0.25
MAX_GAP = 1.0


class AdminSession(_Session):
    def __init__(self, reach: Reach, ws: ServerConnection) -> None:
        super().__init__(reach, ws)
        self._commands: set[asyncio.Task[None]] = set()

    async def run(self, hello: p.AdminHello) -> None:
        if not secrets.compare_digest((hello.token or "").encode(),
                                      self.reach.admin_token.encode()):
            await refuse(self.ws, Unauthorized(
                "admin token refused; use the coordinator's admin token (Settings.admin_token, "
                "reach.admin_token, printed by `reach serve`)"))
            return
        sub = self.reach.gateway.events.subscribe()
        pump = asyncio.get_running_loop().create_task(self._pump(sub), name="reach-admin-feed")
        try:
            self.out.post(self._snapshot())
            await self._frames(self._on_frame)
        finally:
            sub.close()
            pump.cancel()
            for task in self._commands:
                task.cancel()
            await asyncio.gather(pump, *self._commands, return_exceptions=True)
            await self.out.aclose()

    # ------------------------------------------------------------ snapshot and deltas

    def _snapshot(self) -> str:
        reach = self.reach
        return p.encode("snapshot", at=reach.clock.wall(), coordinator=reach.describe(),
                        agents=reach.agents(), traces=reach.traces(),
                        dead_letters=reach.dead_letters(), metrics=reach.metrics())

    async def _pump(self, sub: Subscription) -> None:
        loop = asyncio.get_running_loop()
        last_full = loop.time()
        while True:
            await sub.wait(MAX_GAP - MIN_GAP)
            await asyncio.sleep(MIN_GAP)  # let a burst of events become one delta
            events = sub.drain()
            if sub.dropped:
                sub.dropped = 0
                self.out.post(self._snapshot())
                last_full = loop.time()
                continue
            full = loop.time() - last_full >= MAX_GAP - 0.01
            if full:
                last_full = loop.time()
            elif not events:
                continue
            self.out.post(self._delta(events, full))

    def _delta(self, events: list[Event], full: bool) -> str:
        reach = self.reach
        names: set[str] = set()
        traces: dict[str, None] = {}
        added: dict[str, None] = {}
        resolved: dict[str, None] = {}
        for event in events:
            data = event.data
            if event.kind == TASK:
                traces[data["trace_id"]] = None
                if data.get("agent"):
                    names.add(data["agent"])  # its in-flight count moved
            elif event.kind in (AGENT, BREAKER):
                names.add(data["agent"])
            elif event.kind == DEAD_LETTER:
                tid = data["task_id"]
                if data["action"] == "added":
                    added[tid] = None
                    resolved.pop(tid, None)
                else:
                    resolved[tid] = None
                    added.pop(tid, None)
        agents = reach.agents() if full else reach.agents(names=names)
        letters = [v for tid in added if (v := reach.dead_letter(tid)) is not None]
        return p.encode("delta", at=reach.clock.wall(), agents=agents,
                        traces=[reach.trace_summary(t) for t in traces],
                        dead_letters=letters, resolved=list(resolved),
                        metrics=reach.metrics(), dropped=0)

    # ------------------------------------------------------------ commands

    def _on_frame(self, frame: Any) -> None:
        if not isinstance(frame, p.Command):
            raise InvalidParams(f"the admin feed takes 'command' frames, not {frame.type!r}")
        task = asyncio.get_running_loop().create_task(self._command(frame))
        self._commands.add(task)
        task.add_done_callback(self._commands.discard)

    async def _command(self, f: p.Command) -> None:
        ok = True
        try:
            result = await self.reach.admin_command(f.action, f.args)
            self.out.post(p.encode("reply", id=f.id, ok=True, result=result))
        except ReachError as exc:
            ok = False
            self.out.post(p.encode("reply", id=f.id, ok=False, error=exc.to_wire()))
        except (TypeError, ValueError, KeyError) as exc:
            ok = False
            what = f"missing argument {exc}" if isinstance(exc, KeyError) else str(exc)
            err = InvalidParams(f"bad arguments for {f.action!r}: {what}; "
                                f"see docs/admin-feed.md")
            self.out.post(p.encode("reply", id=f.id, ok=False, error=err.to_wire()))
        except Exception as exc:  # a bug must still answer, or the operator waits forever
            ok = False
            log.exception("admin command %r failed", f.action)
            fault = ReachError(f"{f.action!r} failed inside the coordinator: {exc!r}")
            self.out.post(p.encode("reply", id=f.id, ok=False, error=fault.to_wire()))
        self.reach.admin_action(f.action, f.args, ok)
