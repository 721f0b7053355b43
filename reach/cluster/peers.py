"""The peers this node links to: ``reach.peers.add(node_id, url)`` / ``remove(node_id)``.

This is the seam discovery plugs into: a static list (``Settings.peers``) at start, or
whatever knows the cluster's nodes (the PostgreSQL ``nodes`` table) calling ``add`` and
``remove`` as nodes come and go. Each peer has one supervising task, owned here and stopped
by ``remove`` or ``close``: dial, say ``hello`` as a peer, mirror the peer's agents and carry
attempts to them until the link drops, then dial again with backoff (0.05 s doubling to 5 s,
jittered below). The dial starts with the handshake of reach.cluster.handshake: the node at
the URL must prove it knows the peer secret before this node sends anything but a nonce, or
mirrors any of its agents; mirrored agents pass this node's own serve rules. A refusal (a
different secret, either way) is logged and retried at the same pace: the other node may be
reconfigured, and a node must never stop trying to reach its cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass, field
from typing import Any, NoReturn

import websockets
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from reach.cluster import handshake
from reach.cluster.link import PeerConnection
from reach.cluster.mirror import Mirror
from reach.config import Settings
from reach.core.backoff import Backoff
from reach.core.registry import Registry
from reach.core.trust import Trust
from reach.errors import ProtocolError, ReachError, Unauthorized, Unavailable
from reach.ports import Clock
from reach.wire import peer as wp
from reach.wire import protocol as p

log = logging.getLogger("reach.cluster")
RECONNECT = Backoff(base=0.05, factor=2.0, cap=5.0, jitter=0.5, mode="below")


class SameNode(Exception):
    """The URL dialled is this node itself (a static peer list names every node)."""


@dataclass(slots=True, eq=False)
class Peer:
    """One peer as this node links to it."""

    key: str  # the node id asked for, or the URL of a static peer
    url: str
    node: str | None  # its node id: as asked, else as its welcome said
    mirror: Mirror | None = None
    conn: PeerConnection | None = None
    task: asyncio.Task[None] | None = None
    error: str | None = None  # why the last dial failed
    links: int = 0  # links made so far
    synced: asyncio.Event = field(default_factory=asyncio.Event)

    def view(self) -> dict[str, Any]:
        mirror = self.mirror
        return {"node": self.node, "url": self.url, "connected": self.conn is not None,
                "synced": self.synced.is_set(), "agents": 0 if mirror is None else len(
                    mirror.ids), "links": self.links, "error": self.error,
                "bad_frames": 0 if self.conn is None else self.conn.bad_frames}


class Peers:
    """The peer links of one coordinator (``reach.peers``)."""

    def __init__(self, settings: Settings, registry: Registry, clock: Clock,
                 known: dict[str, set[str]], node_id: str, token: str,
                 rng: random.Random | None = None, trust: Trust | None = None) -> None:
        self.settings = settings
        # this node's rules: a peer's agents pass its serve rules as local agents do
        self.trust = trust or Trust.of(settings.tokens, settings.permissions, settings.serves)
        self.registry = registry
        self.clock = clock
        self.known = known
        self.node_id = node_id
        self.token = token
        self.rng = rng or random.Random()
        self._peers: dict[str, Peer] = {}
        self.closed = False

    def view(self) -> list[dict[str, Any]]:
        """Every peer: node, url, connected, synced, agents mirrored, last error."""
        return [peer.view() for peer in self._peers.values()]

    async def add(self, node_id: str | None, url: str) -> None:
        """Link to the node ``node_id`` at ``url`` (None: whatever node answers there), and
        keep the link up until ``remove``. Returns at once; ``synced`` waits for the link."""
        if self.closed:
            raise RuntimeError("the coordinator is stopping: no new peer links")
        if node_id == self.node_id:
            raise ValueError(f"{node_id!r} is this node's own id: a node is not its own peer")
        key = node_id or url
        for other_key, other in list(self._peers.items()):
            # The same URL known already (a static peer, then discovery naming its node):
            # one link, now keyed by the node id, not a second link to the same node.
            if other.url == url and other_key != key and node_id is not None and \
                    other.node in (None, node_id) and other_key == other.url:
                del self._peers[other_key]
                other.key, other.node = node_id, node_id
                self._peers[node_id] = other
                return
        old = self._peers.get(key)
        if old is not None:
            if old.url == url:
                return
            await self.remove(key)
        peer = self._peers[key] = Peer(key, url, node_id)
        peer.task = asyncio.get_running_loop().create_task(self._keep(peer),
                                                           name=f"reach-peer {key}")

    async def remove(self, node_id: str) -> None:
        """Stop linking to ``node_id`` (or a static peer's URL): its attempts in flight are
        lost, its agents disconnected here."""
        peer = self._peers.pop(node_id, None)
        if peer is None or peer.task is None:
            return
        peer.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await peer.task

    async def synced(self, node_id: str, timeout: float = 10.0) -> None:
        """Wait until the link to ``node_id`` is up and its snapshot applied."""
        peer = self._peers[node_id]
        async with asyncio.timeout(timeout):
            await peer.synced.wait()

    async def close(self) -> None:
        self.closed = True
        for key in list(self._peers):
            await self.remove(key)

    # ------------------------------------------------------------ one peer's life

    async def _keep(self, peer: Peer) -> None:
        failures = 0
        while True:
            try:
                await self._link(peer)
                failures = 0
            except SameNode:
                # A static list shared by every node names this one too: nothing to link.
                log.info("peer %s is this node (%s): not linked", peer.url, self.node_id)
                peer.error = "this node itself"
                return
            except (ReachError, OSError, InvalidHandshake, InvalidURI, TimeoutError,
                    ConnectionClosed) as exc:
                peer.error = exc.message if isinstance(exc, ReachError) else \
                    f"{type(exc).__name__}: {exc}"
                log.warning("peer %s at %s: %s", peer.key, peer.url, peer.error)
                failures += 1
            except Exception as exc:  # a bug must not end the link for good: log, go on
                peer.error = f"{type(exc).__name__}: {exc}"
                log.exception("peer %s at %s failed", peer.key, peer.url)
                failures += 1
            await asyncio.sleep(RECONNECT.delay(failures, self.rng))

    async def _link(self, peer: Peer) -> None:
        s = self.settings
        # The peer's rows may be a little over max_frame_bytes (one agent declaring up to
        # that much, plus its row): the limit on what comes back leaves room for it.
        ws = await websockets.connect(
            peer.url, max_size=2 * s.max_frame_bytes + 65536, compression=None,
            open_timeout=s.hello_timeout, ping_interval=s.ping_interval,
            ping_timeout=s.ping_timeout, close_timeout=1.0)  # (a dead peer: remove at once)
        try:
            node, frame_limit = await self._hello(ws, peer)
            mirror = peer.mirror
            if mirror is None or mirror.node != node:
                mirror = peer.mirror = Mirror(node, self.registry, self.clock,
                                              s.max_peer_agents, self.known, self.trust)
            conn = peer.conn = PeerConnection(ws, node, mirror,
                                              max_outbox_bytes=s.max_outbox_bytes,
                                              max_schema_bytes=s.max_schema_bytes,
                                              max_frame_bytes=frame_limit)
            peer.node, peer.error = node, None
            peer.links += 1
            mirror.on_synced = peer.synced.set
            try:
                await conn.run()
            finally:
                peer.conn = None
                peer.synced.clear()
        finally:
            await ws.close()

    async def _hello(self, ws: Any, peer: Peer) -> tuple[str, int]:
        """The handshake (reach.cluster.handshake): say hello as a peer with a fresh nonce,
        check the holder's proof of the peer secret before sending anything else, prove it
        back; the peer's node id and ``max_frame_bytes``, from its welcome. A holder that
        proves nothing (an impostor at the URL, or a node older than this handshake) is sent
        no proof, no forward, and none of its agents is mirrored."""
        s, me, secret = self.settings, self.node_id, self.token
        nonce = handshake.new_nonce()
        await ws.send(p.dump(p.Hello(caller=me, role="peer", node=me, nonce=nonce)))
        async with asyncio.timeout(s.hello_timeout):
            frame = wp.parse_answer(await ws.recv())
        if isinstance(frame, p.Error):
            self._refused(frame, peer, nonce)
        if not isinstance(frame, wp.Challenge):
            raise ProtocolError(f"{peer.url} answered the peer hello without proving it knows "
                                f"the peer secret (not a peer, an impostor, or a node older "
                                f"than the challenge-response handshake): not linked")
        if not handshake.proves(frame.proof, secret, "holder", me, frame.node, nonce,
                                frame.nonce):
            raise Unauthorized(f"{peer.url} (node {frame.node!r}) did not prove it knows the "
                               f"peer secret: not linked (a different peer token, or an "
                               f"impostor)")
        if frame.node == me:
            raise SameNode(peer.url)
        if peer.node is not None and frame.node != peer.node:
            raise ProtocolError(f"{peer.url} is node {frame.node!r}, not {peer.node!r}")
        await ws.send(p.dump(wp.Proof(proof=handshake.mac(secret, "dialer", me, frame.node,
                                                          nonce, frame.nonce))))
        async with asyncio.timeout(s.hello_timeout):
            welcome = wp.parse_answer(await ws.recv())
        if isinstance(welcome, p.Error):
            self._refused(welcome, peer, None)
        if not isinstance(welcome, p.Welcome) or welcome.role != "peer" or \
                welcome.node != frame.node:
            raise ProtocolError("the peer did not answer its proof with a peer welcome")
        return frame.node, welcome.max_frame_bytes

    def _refused(self, frame: p.Error, peer: Peer, nonce: str | None) -> NoReturn:
        """A refusal from the dialled node. It is this node itself only when the refusal
        proves it (``details.proof`` over this node's id and nonce): any other listener saying
        ``same_node`` is redialled like any refusal, not believed."""
        details = frame.error.details
        proof = details.get("proof")
        if details.get("same_node") and nonce is not None and isinstance(proof, str) and \
                handshake.proves(proof, self.token, "same-node", self.node_id, self.node_id,
                                 nonce, ""):
            raise SameNode(peer.url)
        raise Unavailable(f"refused: {frame.error.message}", code=frame.error.code)
