"""The cluster's peer links: N coordinators behave as one Reach (docs/protocol.md §14).

Each coordinator is a node with an id. A node links to each of its peers over one websocket
that speaks Reach's own protocol (``hello`` with ``role: "peer"``, then a challenge-response in
which both nodes prove they know the peer secret without sending it: reach.cluster.handshake,
the trust model in docs/cluster.md and docs/security.md): the peer streams the
agents it holds (reach.cluster.feed, on the peer's side), this node mirrors them into its own
registry as agents of kind ``peer`` (reach.cluster.mirror) whose ``AgentLink`` is a
``PeerLink`` over that one connection (reach.cluster.link), and routes to them as to its own.
``Peers`` (reach.cluster.peers) is the seam discovery plugs into: ``add(node_id, url)``,
``remove(node_id)``. ``Node`` makes a coordinator's cluster parts from its settings.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass, field

from reach.cluster.feed import Feed
from reach.cluster.link import PeerConnection, PeerLink
from reach.cluster.peers import Peers
from reach.config import Settings
from reach.core.registry import Registry
from reach.core.trust import Trust
from reach.ports import Clock

__all__ = ["Feed", "Node", "PeerConnection", "PeerLink", "Peers", "new_node_id"]


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
