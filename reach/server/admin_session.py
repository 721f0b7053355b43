"""The admin feed: an operator's websocket session (docs/admin-feed.md).

After an ``admin`` frame with the admin token, the session sends a ``snapshot``, then a
``delta`` whenever something changed (at most every ``MIN_GAP``, at least every ``MAX_GAP``),
and runs ``command`` frames concurrently, answering each with a ``reply``. It reads coordinator
state only through the event bus and the ``Operator`` surface, so a slow operator connection
costs routing nothing: its event buffer is bounded, and overflowing it just means a fresh
snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

from websockets.asyncio.server import ServerConnection

from reach.errors import InvalidParams, ReachError, Unauthorized
from reach.gateway.events import AGENT, BREAKER, DEAD_LETTER, PROBE, TASK, Event, Subscription
from reach.server.services import Services
from reach.server.session import Session, refuse, wire_error
from reach.wire import admin as a
from reach.wire import protocol as p

log = logging.getLogger("reach.admin")
MIN_GAP = 0.25
MAX_GAP = 1.0
# Built from the operator surface's own views (plain dicts where the models name objects):
# no validation on the way out, see reach.wire.admin.dump_admin.
_Snapshot = p.unchecked(a.Snapshot)
_Delta = p.unchecked(a.Delta)
_Reply = p.unchecked(a.Reply)


class AdminSession(Session):
    def __init__(self, services: Services, ws: ServerConnection) -> None:
        super().__init__(services, ws)
        self._commands: set[asyncio.Task[None]] = set()

    async def run(self, hello: p.AdminHello) -> None:
        if not secrets.compare_digest((hello.token or "").encode(),
                                      self.services.admin_token.encode()):
            await refuse(self.ws, Unauthorized(
                "admin token refused; use the coordinator's admin token (Settings.admin_token, "
                "reach.admin_token, printed by `reach serve`)"))
            return
        sub = self.services.gateway.events.subscribe()
        pump = asyncio.get_running_loop().create_task(self._pump(sub), name="reach-admin-feed")
        try:
            self.out.post(self._snapshot())
            await self._frames(self._on_frame)
        finally:
            sub.close()
            pump.cancel()
            # Both ways run (tests/server/test_cov_admin_more.py), unseen by coverage on 3.11:
            # the read ends by an exception thrown up the await chain, and Python 3.11 traces no
            # line of this frame from there to its next await (CPython gh-106749).
            for task in self._commands:  # pragma: no branch — see above
                task.cancel()
            await asyncio.gather(pump, *self._commands, return_exceptions=True)
            await self.out.aclose()

    # ------------------------------------------------------------ snapshot and deltas

    def _snapshot(self) -> str:
        op: Any = self.services.operator  # its views are the dicts the frame's models describe
        return a.dump_admin(_Snapshot(
            at=self.services.clock.wall(), coordinator=op.coordinator(), agents=op.agents(),
            traces=op.traces(), dead_letters=op.dead_letters(), metrics=op.metrics(),
            alerts=op.alerts(), overrides=op.overrides()))

    async def _pump(self, sub: Subscription) -> None:
        clock = self.services.clock
        last_full = clock.now()
        while True:
            await sub.wait(MAX_GAP - MIN_GAP)
            await clock.sleep(MIN_GAP)  # let a burst of events become one delta
            events = sub.drain()
            if sub.dropped:
                sub.dropped = 0
                self.out.post(self._snapshot())
                last_full = clock.now()
                continue
            full = clock.now() - last_full >= MAX_GAP - 0.01
            if full:
                last_full = clock.now()
            elif not events:  # pragma: no cover — a wait ends early only on an event;
                continue  # otherwise MAX_GAP has passed and the delta is a full one
            self.out.post(self._delta(events, full))

    def _delta(self, events: list[Event], full: bool) -> str:
        op: Any = self.services.operator
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
            elif event.kind in (AGENT, BREAKER, PROBE):
                names.add(data["agent"])
            elif event.kind == DEAD_LETTER:
                tid = data["task_id"]
                if data["action"] == "added":
                    added[tid] = None
                    resolved.pop(tid, None)
                else:
                    resolved[tid] = None
                    added.pop(tid, None)
        agents = op.agents() if full else op.agents(names=names)
        letters = [v for tid in added if (v := op.dead_letter(tid)) is not None]
        return a.dump_admin(_Delta(
            at=self.services.clock.wall(), agents=agents,
            traces=[op.trace_summary(t) for t in traces], dead_letters=letters,
            resolved=list(resolved), metrics=op.metrics(), dropped=0, alerts=op.alerts(),
            overrides=op.overrides()))

    # ------------------------------------------------------------ commands

    def _on_frame(self, frame: Any) -> None:
        if not isinstance(frame, p.Command):
            raise InvalidParams(f"the admin feed takes 'command' frames, not {frame.type!r}")
        task = asyncio.get_running_loop().create_task(self._command(frame))
        self._commands.add(task)
        task.add_done_callback(self._commands.discard)

    async def _command(self, f: p.Command) -> None:
        try:
            result = await self.services.operator.command(f.action, f.args)
        except ReachError as exc:
            self._reply(f, error=exc)
        except (TypeError, ValueError, KeyError) as exc:
            what = f"missing argument {exc}" if isinstance(exc, KeyError) else str(exc)
            self._reply(f, error=InvalidParams(f"bad arguments for {f.action!r}: {what}; "
                                               f"see docs/admin-feed.md"))
        except Exception as exc:  # a bug must still answer, or the operator waits forever
            log.exception("admin command %r failed", f.action)
            self._reply(f, error=ReachError(
                f"{f.action!r} failed inside the coordinator: {exc!r}"))
        else:
            self._reply(f, result=result)

    def _reply(self, f: p.Command, *, result: Any = None, error: ReachError | None = None
               ) -> None:
        ok = error is None
        self.out.post(a.dump_admin(_Reply(
            id=f.id, ok=ok, result=result,
            error=None if error is None else wire_error(error.to_wire()))))
        self.services.operator.record(f.action, f.args, ok)
