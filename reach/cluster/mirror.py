"""A peer's agents in this node's registry: what its ``agents`` rows say, applied.

Each agent another node holds becomes a record of kind ``peer`` here, with its ``node`` set
and a ``PeerLink`` as its link, so routing, breakers, slots, warm-up and scores treat it as
any agent. Its liveness is judged here by the same rules as a local agent's, from what its
holder saw: the row's ``beat_age`` is turned back into a beat time on this node's clock (an
age, not a timestamp: the two clocks need not agree), so an agent that stops beating at its
holder goes suspected here at the same moment, even if no row says so.

Whose word counts: a row's declaration passes this node's serve rules (``serves``) exactly as
a local registration's does, so a peer cannot offer here what no agent of this node may
serve. A row moves only a record this peer holds, or one nobody holds now (an
agent that reconnected to the peer from elsewhere). An agent connected here, or mirrored from
another peer and still connected there, is not moved by this peer's rows. When the link
drops every agent of the peer is disconnected here (suspected at once, offline after
``offline_after`` beats), exactly as a local agent whose socket closed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from reach.core import names
from reach.core.agents import AgentRecord
from reach.core.registry import Registry
from reach.core.schemas import SchemaError
from reach.core.trust import Trust
from reach.errors import ProtocolError, Unauthorized
from reach.ports import AgentLink, Clock
from reach.wire.peer import AgentRow, Agents
from reach.wire.protocol import CapabilitySpec

log = logging.getLogger("reach.cluster")
PEER = "peer"


class Mirror:
    """This node's copy of one peer's own agents (the rows of its ``agents`` frames)."""

    def __init__(self, node: str, registry: Registry, clock: Clock, limit: int,
                 known: dict[str, set[str]], trust: Trust | None = None) -> None:
        self.node = node
        self.trust = trust  # this node's serve rules, which a peer's agents pass too
        self.registry = registry
        self.clock = clock
        self.limit = limit  # agents this peer may announce (Settings.max_peer_agents)
        self.known = known  # the gateway's capability → names (no_route vs unavailable)
        self.ids: set[str] = set()  # agents announced over the current link
        self.specs: dict[str, list[CapabilitySpec]] = {}  # what each one declared
        self.draining: dict[str, bool] = {}  # the holder's last word on each one's drain
        self.synced = False
        self.link_for: Callable[[str], AgentLink] | None = None
        self.on_synced: Callable[[], None] | None = None  # told when a snapshot is applied

    def holds(self, record: AgentRecord) -> bool:
        return record.kind == PEER and record.node == self.node

    def apply(self, frame: Agents) -> list[str]:
        """Apply one ``agents`` frame; returns what was refused in it (one line each)."""
        refused = []
        now = self.clock.wall()
        for row in frame.rows:
            try:
                self._row(row, now)
            except (ProtocolError, Unauthorized, SchemaError, ValueError) as exc:
                refused.append(f"agent {row.agent_id!r}: {exc}")
        if frame.synced:
            self.synced = True
            if self.on_synced is not None:
                self.on_synced()
        return refused

    def _row(self, row: AgentRow, now: float) -> None:
        reg = self.registry
        record = reg.by_id.get(row.agent_id)
        if record is not None and not self.holds(record) and \
                (record.link is not None or not row.connected):
            return  # held here or by another node: this peer's word does not move it
        named = reg.by_name.get(row.name)
        if named is not None and named.agent_id != row.agent_id and named.link is not None:
            raise ProtocolError(f"the name {row.name!r} is held by agent {named.agent_id!r} "
                                f"here; ignored")
        if row.agent_id not in self.ids and len(self.ids) >= self.limit:
            raise ProtocolError(f"over the {self.limit} agents one peer may announce "
                                f"(max_peer_agents); ignored")
        if row.capabilities is not None and not row.capabilities:
            raise ProtocolError("an agent must declare at least one capability")
        specs = row.capabilities or self.specs.get(row.agent_id)
        if specs is None:
            raise ProtocolError("a first row must carry the agent's capabilities")
        if record is None or record.link is None or not self.holds(record) or \
                row.capabilities is not None or record.max_concurrency != row.max_concurrency \
                or record.version != row.version:
            if self.link_for is None:
                raise ProtocolError("no link to the peer")
            if row.capabilities is not None and self.trust is not None:
                self.trust.check_serve(row.name, _canonical(row.capabilities))
            record = reg.register(
                agent_id=row.agent_id, name=row.name, version=row.version,
                max_concurrency=row.max_concurrency, specs=specs,
                link=self.link_for(row.agent_id), now=now, instance=row.instance,
                kind=PEER, heartbeat_interval=row.heartbeat_interval, node=self.node).record
            for cap in record.capabilities:
                self.known.setdefault(cap, set()).add(record.name)
            self.specs[row.agent_id] = specs  # (once registered: a refused row leaves none)
        self.ids.add(row.agent_id)
        reg.heartbeat(record, now - row.beat_age, inflight=row.inflight,
                      queue_depth=row.queue_depth, load=row.load)
        if record.held_full and row.inflight < row.max_concurrency:
            reg.holder_full(record, False)  # room again at the holder: slot waiters wake
        # Only a change of the holder's word moves the drain: an operator's drain here of a
        # peer's agent stays until the operator (or a new drain at the holder) lifts it.
        if row.draining != self.draining.get(row.agent_id, False):
            self.draining[row.agent_id] = row.draining
            if row.draining:
                reg.deregister(record, now, by="holder")
            else:
                reg.undrain(record, now)
        if not row.connected:
            reg.disconnected(record, now)
        else:
            reg.hold(record, row.held, now)  # (judged again at ``now``, not the beat's time)

    def drop(self) -> None:
        """The link went away: every agent it carried is disconnected here."""
        now = self.clock.wall()
        for agent_id in self.ids:
            record = self.registry.by_id.get(agent_id)
            if record is not None and self.holds(record) and record.link is not None:
                self.registry.disconnected(record, now)
        self.ids.clear()
        self.synced = False


def _canonical(specs: list[CapabilitySpec]) -> list[tuple[str, str]]:
    """(normalized name, scope) of each capability, as serve rules are checked locally (a
    name that does not normalize raises ``ValueError``: the row is refused, as it would be)."""
    return [(names.normalize(spec.name), spec.scope) for spec in specs]
