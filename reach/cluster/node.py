"""A coordinator's cluster parts (``Node``): its id, the peer secret, the feed of its own
agents to peers, and its links to peers."""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass, field

from reach.cluster.feed import Feed
from reach.cluster.peers import Peers
from reach.config import Settings
from reach.core.registry import Registry
from reach.core.trust import Trust
from reach.ports import Clock

__all__ = ["Node", "new_node_id"]


def new_node_id() -> str:
    """A short random node id, for a coordinator started without ``node_id``."""
    return "n-" + secrets.token_hex(3)


@dataclass(frozen=True, slots=True)
class Node:
    """One coordinator's cluster parts: its id, the peer secret (proved by both sides of a
    link, never sent: reach.cluster.handshake), the feed of its own agents to peer sessions
    here, its links to peers, and the attempts peers have forwarded here now (by task id and
    attempt, to the link that forwarded each: a link may touch only its own)."""

    node_id: str
    token: str
    feed: Feed
    peers: Peers
    forwarded: dict[tuple[str, int], object] = field(default_factory=dict)
    # address → peer handshakes from it waiting for their proof (not yet authenticated: the
    # same per-address bound as connections before their hello, max_pending_per_address)
    handshaking: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: Settings, registry: Registry, clock: Clock,
           known: dict[str, set[str]], admin_token: str, rng: random.Random,
           trust: Trust | None = None) -> Node:
        node_id = settings.node_id or new_node_id()
        token = settings.peer_token or admin_token
        return cls(node_id, token, Feed(registry),
                   Peers(settings, registry, clock, known, node_id, token,
                         random.Random(rng.random()), trust))

    async def start(self) -> None:
        """Link to the static peers of ``Settings.peers`` (each by URL)."""
        for url in self.peers.settings.peers:
            await self.peers.add(None, url)
