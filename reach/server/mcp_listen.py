"""2026 ``subscriptions/listen`` streams of the MCP door, kept per caller.

The SDK's ``ListenHandler`` forwards every event of one ``SubscriptionBus`` to every open
stream: with one bus for the door, a caller would hear that *another* caller's tools changed
(what it may call is its own business, and so is when that changes). Here each caller has
its bus and its handler, made at its first stream and dropped with its last, and a change is
published only on the buses of the callers it concerns, as the 2025 sessions' notifications
are sent. ``limit`` bounds the streams of all callers together (the SDK's own default).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ServerEvent
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR

LIMIT = 1024  # open listen streams, all callers together


@dataclass
class _Caller:
    bus: InMemorySubscriptionBus
    handler: ListenHandler
    streams: int = 0


class CallerListens:
    """The ``on_subscriptions_listen`` handler of a low-level ``Server``, per caller
    (``caller_of`` names the caller of a request's context)."""

    def __init__(self, caller_of: Callable[[Any], str], limit: int = LIMIT) -> None:
        self.caller_of = caller_of
        self.limit = limit
        self.open = 0  # streams open, all callers together
        self._callers: dict[str, _Caller] = {}

    async def __call__(self, ctx: Any, params: Any) -> Any:
        """Serve one listen stream on its caller's bus."""
        if self.open >= self.limit:
            raise MCPError(INTERNAL_ERROR, "Subscription limit reached")
        caller = self.caller_of(ctx)
        mine = self._callers.get(caller)
        if mine is None:
            bus = InMemorySubscriptionBus()
            mine = self._callers[caller] = _Caller(bus, ListenHandler(bus))
        mine.streams += 1
        self.open += 1
        try:
            return await mine.handler(ctx, params)
        finally:
            mine.streams -= 1
            self.open -= 1
            if mine.streams == 0 and self._callers.get(caller) is mine:
                del self._callers[caller]

    def callers(self) -> list[str]:
        """The callers with a stream open."""
        return list(self._callers)

    async def publish(self, callers: Iterable[str], event: ServerEvent) -> None:
        """Send ``event`` on the streams of these callers (those with none are skipped)."""
        for caller in callers:
            mine = self._callers.get(caller)
            if mine is not None:
                await mine.bus.publish(event)

    def close(self) -> None:
        """End every stream gracefully (each sends its final result)."""
        for mine in list(self._callers.values()):
            mine.handler.close()
