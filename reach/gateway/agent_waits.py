"""Tasks waiting for the agents of their capability to change (reach.core.life ``WaitAgents``:
a resumed task's agent coming back, a breaker letting work through, a submit in the backlog
with no agent that can take it now).

Waiters are kept per capability: a change of one agent wakes the tasks of the capabilities
it declares, not every waiting task of the coordinator (a backlog of thousands waiting for a
restarting agent must not be woken by every other agent's heartbeat changes). Each is called
back once, at the next turn of the loop, and must wait again if it still finds nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable


class AgentWaits:
    __slots__ = ("_by_cap", "_loop")

    def __init__(self) -> None:
        # capability → who waits for its agents to change, in arrival order
        self._by_cap: dict[str, dict[Callable[[], None], None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def on(self, fn: Callable[[], None], capability: str) -> None:
        """Call ``fn`` once at the next change of ``capability``'s agents, unless taken off."""
        self._loop = asyncio.get_running_loop()
        waiting = self._by_cap.get(capability)
        if waiting is None:
            waiting = self._by_cap[capability] = {}
        waiting[fn] = None

    def off(self, fn: Callable[[], None], capability: str) -> None:
        waiting = self._by_cap.get(capability)
        if waiting is not None:
            waiting.pop(fn, None)
            if not waiting:
                del self._by_cap[capability]

    def wake(self, capabilities: Iterable[str] | None = None) -> None:
        """The agents of ``capabilities`` (None: any) changed: their waiters look again."""
        by_cap, loop = self._by_cap, self._loop
        if not by_cap or loop is None:
            return
        caps = list(by_cap) if capabilities is None else \
            [c for c in capabilities if c in by_cap]
        for cap in caps:
            for fn in by_cap.pop(cap):
                loop.call_soon(fn)
