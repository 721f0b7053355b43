"""The cluster's peer links: N coordinators behave as one Reach (docs/protocol.md §14).

Each coordinator is a node with an id. A node links to each of its peers over one websocket
that speaks Reach's own protocol (``hello`` with ``role: "peer"``, then a challenge-response in
which both nodes prove they know the peer secret without sending it: reach.cluster.handshake,
the trust model in docs/cluster.md and docs/security.md): the peer streams the
agents it holds (reach.cluster.feed, on the peer's side), this node mirrors them into its own
registry as agents of kind ``peer`` (reach.cluster.mirror) whose ``AgentLink`` is a
``PeerLink`` over that one connection (reach.cluster.link), and routes to them as to its own.
``Peers`` (reach.cluster.peers) is the seam discovery plugs into: ``add(node_id, url)``,
``remove(node_id)``. ``Node`` (reach.cluster.node) makes a coordinator's cluster parts from
its settings.

The names below load on first use (PEP 562): importing a submodule runs this file first, and
it must not run the modules that import that submodule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reach._lazy import exports

if TYPE_CHECKING:
    from reach.cluster.feed import Feed
    from reach.cluster.link import PeerConnection, PeerLink
    from reach.cluster.node import Node, new_node_id
    from reach.cluster.peers import Peers

__all__ = ["Feed", "Node", "PeerConnection", "PeerLink", "Peers", "new_node_id"]
_HOME = {"Feed": "feed", "Node": "node", "PeerConnection": "link", "PeerLink": "link",
         "Peers": "peers", "new_node_id": "node"}


__getattr__ = exports(__name__, {name: "." + home for name, home in _HOME.items()})
