"""Agent identities: the same ``agent_id`` for a name across reconnects and restarts."""

from __future__ import annotations

import hashlib

from reach.core.agents import AgentRecord
from reach.core.registry import Registry
from reach.gateway.gateway import Gateway
from reach.ports import Clock, TaskStore
from reach.wire.protocol import CapabilitySpec


def new_agent_id(name: str) -> str:
    """The id of a name no store has seen yet: derived from the name, so that the nodes of a
    cluster that each see an agent for the first time give it the same id without asking each
    other (a name seen before keeps the id its store holds)."""
    return "ag-" + hashlib.blake2b(name.encode(), digest_size=8).hexdigest()


class Identities:
    """Names → agent ids (loaded from the store at start, saved on every registration)."""

    def __init__(self, registry: Registry, gateway: Gateway, store: TaskStore,
                 clock: Clock) -> None:
        self._registry = registry
        self._gateway = gateway
        self._store = store
        self._clock = clock
        self._ids: dict[str, str] = {}

    async def load(self) -> None:
        self._ids = await self._store.agent_ids()

    def identity(self, name: str) -> str:
        """The agent id for ``name``: the same one across reconnects and restarts."""
        record = self._registry.by_name.get(name)
        if record is not None:
            return record.agent_id
        agent_id = self._ids.get(name)
        if agent_id is None:
            agent_id = self._ids[name] = new_agent_id(name)
        return agent_id

    async def remember(self, record: AgentRecord, specs: list[CapabilitySpec]) -> None:
        """Keep what a registration declared: the capabilities its name serves (for no_route
        vs unavailable) and the agent's row in the store."""
        for cap in record.capabilities:
            self._gateway.known.setdefault(cap, set()).add(record.name)
        await self._store.save_agent(
            record.agent_id, record.name, record.version,
            [c.model_dump() for c in specs], record.max_concurrency,
            self._clock.wall())
