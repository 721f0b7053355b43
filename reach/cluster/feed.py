"""The holder's side of a peer link: which of this node's own agents a peer must hear about.

A node tells its peers about the agents whose connections it holds (websocket agents and
the adapters it drives), never about the agents it mirrors from other peers (kind ``peer``):
each node speaks only for itself, so no announcement travels in a loop and a delta has one
source. ``Feed`` listens to the registry once; each peer session gets an ``Outbound`` that
collects the ids of agents that changed and turns them into ``agents`` frames in batches
(docs/protocol.md §14): registrations and liveness changes are marked as they happen; beats,
load and drains are found by ``scan``, a pass over the agents every quarter heartbeat
interval that compares a few fields. 10,000 agents beating every 10 s cost one scan of
10,000 tuples per 2.5 s and a few frames per flush, not a frame per beat.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from pydantic_core import to_json

from reach.core.agents import AgentRecord
from reach.core.registry import Registry
from reach.wire.bounds import MAX_LOAD

PEER = "peer"  # the kind of an agent mirrored from another node
_HEAD = '{"v":1,"type":"agents","rows":['


def local(record: AgentRecord) -> bool:
    """Whether this node holds the agent's connection (only those are told to peers)."""
    return record.kind != PEER


def _signature(record: AgentRecord) -> tuple[Any, ...]:
    return (record.connected, record.draining, record.probe_held, record.last_beat,
            record.inflight, record.max_concurrency, record.version, id(record.capabilities))


def row_of(record: AgentRecord, now: float, specs: bool) -> dict[str, Any]:
    """One agent as an ``AgentRow`` (reach.wire.peer); its capabilities only with ``specs``."""
    row = {
        "agent_id": record.agent_id, "name": record.name, "version": record.version,
        "kind": record.kind, "instance": record.instance,
        "max_concurrency": record.max_concurrency,
        "capabilities": [c.spec.model_dump(mode="json", exclude_none=True)
                         for c in record.capabilities.values()] if specs else None,
        "heartbeat_interval": record.liveness.interval,
        "beat_age": min(1e9, max(0.0, now - record.last_beat)),
        "connected": record.connected and record.link is not None and local(record),
        "draining": record.draining, "held": record.probe_held,
        "inflight": record.inflight, "load": min(MAX_LOAD, max(0.0, record.load)),
        "queue_depth": record.queue_depth,
    }
    return {k: v for k, v in row.items() if v is not None}


class Outbound:
    """What one peer has been told, and which agents changed since."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.dirty: set[str] = {r.agent_id for r in registry.by_id.values() if local(r)}
        # agent id → (its capabilities object, signature) as last sent
        self._sent: dict[str, tuple[object, tuple[Any, ...]]] = {}

    def scan(self) -> None:
        """Mark every own agent whose beat, load, drain or declaration moved since sent."""
        sent, dirty = self._sent, self.dirty
        for agent_id, record in self.registry.by_id.items():
            told = sent.get(agent_id)
            if local(record):
                if told is None or told[1] != _signature(record):
                    dirty.add(agent_id)
            elif told is not None and told[1][0]:  # now held by another node: say it left
                dirty.add(agent_id)

    def rows(self, now: float, most: int = 500) -> list[dict[str, Any]]:
        """The rows of up to ``most`` agents marked since sent (they are then unmarked): a
        snapshot of 10,000 agents is built a batch at a time, the loop free in between."""
        out = []
        by_id, sent, dirty = self.registry.by_id, self._sent, self.dirty
        batch = dirty if len(dirty) <= most else set(itertools.islice(dirty, most))
        for agent_id in batch:
            record = by_id.get(agent_id)
            if record is None:
                continue
            told = sent.get(agent_id)
            if not local(record) and told is None:
                continue  # never told: nothing to take back
            specs = told is None or told[0] is not record.capabilities
            row = row_of(record, now, specs)
            out.append(row)
            sent[agent_id] = (record.capabilities, _signature(record) if local(record)
                              else (False,))
        if batch is dirty:
            self.dirty = set()
        else:
            dirty -= batch
        return out


def frames(rows: list[dict[str, Any]], limit: int, synced: bool = False) -> Iterator[str]:
    """``agents`` frames holding ``rows``, each at most ``limit`` bytes where one row allows
    it (a row larger than that goes alone; the receiving side allows for it). ``synced`` is
    set on the last one (a snapshot's end); no rows and ``synced`` give one empty frame."""
    batch: list[bytes] = []
    size = 0
    for row in rows:
        text = to_json(row, exclude_none=True)
        if batch and size + len(text) + 64 > limit:
            yield _frame(batch, False)
            batch, size = [], 0
        batch.append(text)
        size += len(text) + 1
    if batch or synced:
        yield _frame(batch, synced)


def _frame(batch: list[bytes], synced: bool) -> str:
    tail = '],"synced":true}' if synced else "]}"
    return _HEAD + b",".join(batch).decode() + tail


class Feed:
    """This node's own agents as its peers must see them: one ``Outbound`` per peer session.

    It listens to the registry once (registrations and liveness changes mark the agent in
    every subscriber); a session subscribes when a peer says hello and leaves when it ends."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.subscribers: set[Outbound] = set()
        registry.listen(self._changed)

    def _changed(self, record: AgentRecord) -> None:
        for sub in self.subscribers:
            sub.dirty.add(record.agent_id)

    def subscribe(self) -> Outbound:
        """A new peer: every own agent is marked, so its first rows are the snapshot."""
        sub = Outbound(self.registry)
        self.subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Outbound) -> None:
        self.subscribers.discard(sub)
