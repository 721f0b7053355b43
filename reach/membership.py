"""This coordinator as one node of a cluster (``Reach.start(cluster=True)``, docs/cluster.md).

Every ``lease_s / 3`` seconds the node renews its lease in ``reach_nodes``, links to the other
live nodes as peers (``reach.peers``) and unlinks from those that are gone, and takes over the
unfinished tasks of nodes whose lease ran out (``Nodes.take_over``: ``SKIP LOCKED``, so
survivors share a dead node's tasks and none runs twice). PostgreSQL's LISTEN/NOTIFY is not
used: the lease period already bounds how late a change is seen, and a missed notification
could not be told from none (PgBouncer's transaction mode drops them).

Fencing: a node that cannot renew before its lease ends (cut off from the database, or so slow
that another node removed it) must not act as the owner of its tasks any more, since a survivor
takes them over the moment the lease ends. It refuses new tasks (the store's ``fence``), lets go
of the tasks it was driving (their callers here follow them in the store), closes its agents'
and callers' connections so that they move to another node, refuses new ones, and drops its
peer links. When the database answers again it joins anew, under the same node id, and carries
on as a fresh node: the tasks still owned by it are resumed, the rest were taken over.

A chain step that succeeded on a node that died (or stopped) before its next step started is
taken over with the unfinished tasks (``Nodes.take_over``), and the survivor starts that next
step (``Chains.carry_on``): the chain goes on, under the step's derived idempotency key, so a
second start anywhere (another survivor, the dead node restarted) is the same task.

What else a dead node held goes with its tasks: ``after_take_over`` (the A2A door's push
sender, ``Pusher.adopt``) takes up its push notification configs once its tasks are here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from reach.cluster.peers import Peers
from reach.core.metrics import combine
from reach.core.tasks import TaskState
from reach.gateway import admission
from reach.gateway.events import DEAD_LETTER
from reach.gateway.gateway import Gateway
from reach.server.channel import Channel
from reach.settling import discard_of
from reach.store.nodes import Nodes
from reach.store.store import Store

log = logging.getLogger("reach.cluster")

GOING_AWAY = 1001  # websocket close code: the endpoint is going away (clients move on)
ORPHAN_EVERY = 30  # rounds between looks for ownerless tasks while no node is seen to die


def advertised(url: str) -> str:
    """The URL other nodes dial to reach this one: ``url``, with an unspecified bind address
    (0.0.0.0, ::) replaced by this machine's name."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host not in ("0.0.0.0", "::", ""):
        return url
    name = socket.getfqdn()
    return urlunsplit(parts._replace(netloc=f"{name}:{parts.port}"))


class ClusterNode:
    """The lease, discovery and take-over loop of one node, and its fencing."""

    def __init__(self, node_id: str, lease_s: float, store: Store, gateway: Gateway,
                 peers: Peers, channel: Channel, url: Callable[[], str]) -> None:
        self.node_id, self.lease_s = node_id, lease_s
        self.store, self.gateway, self.peers, self.channel = store, gateway, peers, channel
        self.nodes = Nodes(store)
        self.url = url
        self.every = lease_s / 3
        self.fenced = False
        self.taken_over = 0  # tasks this node took over from dead ones
        self._task: asyncio.Task[None] | None = None
        self._known: dict[str, str] = {}  # peer node id → url, as linked
        self._metrics: dict[str, dict[str, Any]] = {}  # the other live nodes', as written
        # Whether this round looks for a dead node's tasks: at start, when a node's lease went,
        # and every ORPHAN_EVERY rounds (a node that died while this one was fenced, say);
        # the query reads every unfinished task, so it is not run on every round.
        self._look_for_orphans = True
        self._rounds = 0
        self._dead_since = 0.0  # the other nodes' dead letters are read from here on
        self.foreign_dead: set[str] = set()  # dead letters other nodes own, listed here too
        # what else moves with a dead node's tasks (set before ``start``; the A2A door's
        # push configs): called after each batch of tasks taken over, and once a round that
        # looked for them (a dead node may have left configs but no unfinished task)
        self.after_take_over: Callable[[], Awaitable[int]] | None = None

    def metrics(self) -> dict[str, Any]:
        """The cluster's metrics (``core.metrics.combine``): this node's now, the others'
        as their last renewal wrote them (at most ``lease_s / 3`` old)."""
        own = self.gateway.metrics.snapshot()
        return combine({**self._metrics, self.node_id: own})

    def _own_metrics(self) -> str:
        snap = self.gateway.metrics.snapshot()
        return json.dumps({"totals": snap["totals"], "capabilities": snap["capabilities"]})

    def view(self) -> dict[str, Any]:
        return {"node": self.node_id, "fenced": self.fenced, "lease_s": self.lease_s,
                "peers": sorted(self._known), "taken_over": self.taken_over}

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Join (this node's row and lease), link to the live nodes, take over what dead ones
        left, then keep doing so every ``lease_s / 3`` seconds."""
        await self.nodes.join(self.node_id, advertised(self.url()), self.lease_s)
        await self._discover()
        await self._take_over()
        await self._dead_letters()
        self._task = asyncio.get_running_loop().create_task(self._loop(),
                                                            name="reach-cluster")

    async def stop(self) -> None:
        """Leave the cluster (after the gateway drained): the row goes, so the others take
        what is left unfinished over at once rather than a lease later."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if not self.fenced:
            try:
                await self.store.flush()  # (the drained tasks' ends: what ``leave`` reads)
                await self.nodes.leave(self._since())
            except Exception as exc:  # the database is gone: the lease runs out by itself
                log.warning("node %s could not leave the cluster: %r", self.node_id, exc)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                await self.tick()
            except Exception:  # one bad round must not end the node's membership
                log.exception("node %s: cluster round failed", self.node_id)

    async def tick(self) -> None:
        """One round: renew (or fence, or rejoin), discover, take over."""
        if self.fenced:
            if not await self._rejoin():
                return
        elif not await self._renew():
            await self._fence()
            return
        await self._discover()
        await self._take_over()
        await self._dead_letters()

    # ------------------------------------------------------------ the lease

    async def _renew(self) -> bool:
        try:
            return await self.nodes.renew(self._own_metrics())
        except Exception as exc:  # the database did not answer: the last renewal may hold
            held = self.nodes.holds()
            log.warning("node %s could not renew its lease (%r); %s", self.node_id, exc,
                        "it still holds" if held else "it has run out")
            return held

    async def _fence(self) -> None:
        self.fenced = True
        why = "cut off from the cluster's database (its lease ran out)"
        self.store.fence(why)
        self.channel.fenced = why
        log.error("node %s is fenced: %s; it stops accepting work, lets its tasks go to the "
                  "other nodes and closes its agents' and callers' connections",
                  self.node_id, why)
        self.gateway.following.let_go(list(self.gateway.book.live))
        await self.channel.close_work(GOING_AWAY, "this coordinator is fenced: use another")
        for node_id in list(self._known):
            await self.peers.remove(node_id)
        self._known.clear()

    async def _rejoin(self) -> bool:
        try:
            await self.nodes.join(self.node_id, advertised(self.url()), self.lease_s)
        except Exception:  # still cut off: try again next round
            return False
        self.fenced = False
        self.channel.fenced = None
        for task in await self.store.unfinished():  # still ours: nobody took them over
            if self.gateway.book.outcome(task.task_id) is None:
                self.gateway.resume(task)
        log.warning("node %s is back in the cluster", self.node_id)
        return True

    # ------------------------------------------------------------ the others

    async def _discover(self) -> None:
        self._rounds += 1
        if self._rounds % ORPHAN_EVERY == 0 or await self.nodes.expired():
            self._look_for_orphans = True
        nodes = [n for n in await self.nodes.live() if n.node_id != self.node_id]
        live = {n.node_id: n.url for n in nodes}
        self._metrics = {n.node_id: _loads(n.metrics) for n in nodes if n.metrics}
        for node_id in [n for n in self._known if n not in live]:
            self._look_for_orphans = True
            await self.peers.remove(node_id)
            del self._known[node_id]
            log.warning("node %s left the cluster (or its lease ran out)", node_id)
        for node_id, url in live.items():
            if self._known.get(node_id) != url:
                await self.peers.add(node_id, url)
                self._known[node_id] = url

    async def _dead_letters(self) -> None:
        """List the dead letters other nodes made since the last round here too, so every
        node shows the cluster's (``reach.dead_letters()``, the admin feed)."""
        book = self.gateway.book
        for task in await self.store.dead(self.gateway.settings.dead_letters_max,
                                          self._dead_since):
            self._dead_since = max(self._dead_since, task.updated_at)
            if task.task_id in book.dead or book.find(task.task_id) is not None \
                    or discard_of(task) is not None:  # settled on another node
                continue
            book.keep_dead(task)
            self.foreign_dead.add(task.task_id)
            self.gateway.events.publish(DEAD_LETTER, {"action": "added", "task_id": task.task_id,
                                                      "capability": task.envelope.capability})
        book.bound_dead()
        # ... and drop those a node replayed meanwhile (not one being replayed here).
        settled = [t for t, task in book.dead.items()
                   if task.state is TaskState.DEAD and book.outcome(t) is None]
        for task_id in await self.nodes.not_dead(settled):
            self.foreign_dead.discard(task_id)
            if book.outcome(task_id) is None:
                book.unkeep_dead(task_id)
                self.gateway.events.publish(DEAD_LETTER, {"action": "resolved",
                                                          "task_id": task_id})

    async def claim(self, task_id: str) -> bool:
        """Take over a dead letter to replay it here (``reach.replay`` from any node)."""
        if not await self.nodes.claim_dead(task_id, self.node_id):
            return False
        self.foreign_dead.discard(task_id)
        return True

    async def _take_over(self) -> None:
        if not self._look_for_orphans:
            return
        orphans = [d for d in await self.nodes.orphan_owners() if d != self.node_id]
        self._look_for_orphans = bool(orphans)  # look again until none is left
        for dead in orphans:
            while True:
                tasks = await self.nodes.take_over(dead, self.node_id, since=self._since())
                if not tasks:
                    break
                for task in tasks:
                    if task.terminal:  # a stranded chain step: kept, for its followers here
                        self.gateway.book.restore(task)
                    elif self.gateway.book.outcome(task.task_id) is None:
                        self.gateway.resume(task)
                    self.gateway.following.taken_over(task.task_id)
                stranded = [t for t in tasks if t.terminal]
                if stranded:  # (their next steps' agents may have declared on the dead node)
                    admission.learn(self.gateway.known, await self.store.declared())
                    self.gateway.chains.carry_on(stranded)
                await self._adopt()
                self.taken_over += len(tasks)
                log.warning("node %s took over %d task(s) of node %s", self.node_id,
                            len(tasks), dead)
        await self._adopt()

    def _since(self) -> float:
        """From when a dead node's stranded chain steps are carried on: as a restart's
        ``Chains.resume``, those whose derived keys are still remembered."""
        return self.gateway.clock.wall() - self.gateway.settings.idempotency_ttl

    async def _adopt(self) -> None:
        if self.after_take_over is not None:
            taken = await self.after_take_over()
            if taken:
                log.warning("node %s took over %d push notification config(s) of dead nodes",
                            self.node_id, taken)


def _loads(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:  # a node of another version, say: its metrics are left out
        return {}
    return value if isinstance(value, dict) else {}
