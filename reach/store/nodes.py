"""The coordinators of a cluster and their leases, in ``reach_nodes`` (PostgreSQL).

A node joins with a lease of ``lease_s`` seconds and renews it well before it ends. Every time
is the database's (``clock_timestamp()``), never a coordinator's: two machines whose clocks
disagree still agree on whose lease has run out, so clock skew cannot make two nodes own one
task. ``renew`` answers False once the lease was lost (it ran out, or another node already
removed the row): from then on the node must stop acknowledging work (it is fenced), since a
survivor may be taking its tasks over. ``take_over`` moves a dead node's unfinished tasks to
the caller with ``SELECT .. FOR UPDATE SKIP LOCKED`` in batches, so survivors racing for one
dead node each get a disjoint share and no task twice; then, the same way, its stranded chain
steps: chain tasks that succeeded with no note of a next step or of why none started (the
node died, or stopped, while the next step's submit was refused for a while), whose chains
the survivor carries on (reach.gateway.chaining). A dead node's row stays until both are
moved, so that it is still found.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from reach.core import chains
from reach.core.tasks import TERMINAL, Task
from reach.store.postgres import unreachable
from reach.store.store import Store
from reach.store.tables import CHAINED, NODES, TASKS, task_from_row

_NOW = "extract(epoch from clock_timestamp())"
# the terminal states as an SQL list (an enum's own values, never input), spelled as the
# owner index's predicate is, so the planner can use that partial index
_DONE = "(" + ", ".join(f"'{s.value}'" for s in sorted(TERMINAL)) + ")"
# A node's stranded chain steps (see the module's docstring), created since :since (what a
# restart's ``Chains.resume`` looks at: the derived keys of older ones have expired); with
# ``owner = ..``, read through the chain index (``CHAINED`` spelled as its predicate is).
_STRANDED = (f"{CHAINED} AND created_at >= :since AND history NOT LIKE :noted_next "
             f"AND history NOT LIKE :noted_stop")
_NOTES = {"noted_next": f"%{chains.NEXT}%", "noted_stop": f"%{chains.STOPPED}%"}


@dataclass(frozen=True, slots=True)
class Node:
    """One row of ``reach_nodes``: times in the database's epoch seconds."""

    node_id: str
    url: str
    started_at: float
    lease_until: float
    metrics: str | None = None  # JSON, as the node last renewed its lease with


class Nodes:
    """This node's lease and the cluster's membership, on the store's database.

    Calls run on the store's worker thread, behind its commits: a node whose database is
    unreachable cannot renew, which is what must fence it."""

    def __init__(self, store: Store) -> None:
        if store.engine.dialect.name != "postgresql":
            raise ValueError("a cluster's nodes live in a PostgreSQL store")
        self.store = store
        self.node_id: str | None = None
        self.lease_s = 0.0
        # Until when (time.monotonic) the lease surely holds: lease_s after the last renewal
        # that succeeded was *sent* (the database's clock started counting no earlier).
        self.valid_until = 0.0

    async def _call(self, sql: str, **params: Any) -> list[Any]:
        def q() -> list[Any]:
            with self.store.engine.begin() as conn:
                result = conn.execute(text(sql), params)
                return list(result) if result.returns_rows else []
        rows: list[Any] = await self.store._run(q)
        return rows

    # ------------------------------------------------------------ this node

    async def join(self, node_id: str, url: str, lease_s: float) -> None:
        """Record this node (again, after a restart) with a lease of ``lease_s`` seconds."""
        self.node_id, self.lease_s = node_id, lease_s
        sent = time.monotonic()
        try:
            await self._join(node_id, url, lease_s)
        except DBAPIError as exc:  # at start: one line (``reach serve``), not a traceback
            raise unreachable(self.store.url, exc) from exc
        self.valid_until = sent + lease_s
        self.store.unfence()

    async def _join(self, node_id: str, url: str, lease_s: float) -> None:
        await self._call(
            f"INSERT INTO {NODES.name} (node_id, url, started_at, lease_until, renewed_at) "
            f"VALUES (:n, :u, {_NOW}, {_NOW} + :s, {_NOW}) ON CONFLICT (node_id) DO UPDATE "
            f"SET url = :u, started_at = {_NOW}, lease_until = {_NOW} + :s, "
            f"renewed_at = {_NOW}", n=node_id, u=url, s=lease_s)

    async def renew(self, metrics: str | None = None) -> bool:
        """Extend the lease by ``lease_s`` from now; False once it was lost (expired or
        removed): the store is then fenced (it refuses new tasks) and the caller must stop
        acknowledging and drop its tasks, which survivors take over. ``join`` again to come
        back. A renewal that raises (the database unreachable) changes nothing: ``holds``
        says until when the last one counts. ``metrics`` (JSON text) is kept in the row for
        the other nodes to read (one view of the cluster's metrics)."""
        sent = time.monotonic()
        rows = await self._call(
            f"UPDATE {NODES.name} SET lease_until = {_NOW} + :s, renewed_at = {_NOW}, "
            f"metrics = COALESCE(:m, metrics) "
            f"WHERE node_id = :n AND lease_until > {_NOW} RETURNING node_id",
            n=self._me(), s=self.lease_s, m=metrics)
        if not rows:
            self.valid_until = 0.0
            self.store.fence(f"node {self.node_id}'s lease was lost")
            return False
        self.valid_until = sent + self.lease_s
        return True

    def holds(self, now: float | None = None) -> bool:
        """Whether the lease surely still holds (by this machine's monotonic clock, counted
        from when the last good renewal was sent: never later than the database's end)."""
        return (time.monotonic() if now is None else now) < self.valid_until

    async def leave(self, since: float = 0.0) -> None:
        """End this node's lease now (a graceful stop): its unfinished tasks are the others'
        to take over at once, with no lease to wait out. The row goes, unless the node owns
        stranded chain steps (created since ``since``: a next step refused while it
        drained): then it stays, expired, for a survivor to find them by and remove."""
        me = self._me()

        def q() -> None:
            with self.store.engine.begin() as conn:
                conn.execute(text(
                    f"DELETE FROM {NODES.name} WHERE node_id = :n AND NOT EXISTS (SELECT 1 "
                    f"FROM {TASKS.name} WHERE owner = :n AND {_STRANDED})"),
                    {"n": me, "since": since, **_NOTES})
                conn.execute(text(f"UPDATE {NODES.name} SET lease_until = {_NOW} "
                                  f"WHERE node_id = :n"), {"n": me})
        await self.store._run(q)

    def _me(self) -> str:
        if self.node_id is None:
            raise RuntimeError("join() first")
        return self.node_id

    # ------------------------------------------------------------ the cluster

    async def live(self) -> list[Node]:
        """The nodes whose lease has not run out, by id."""
        return await self._nodes(f"lease_until > {_NOW}")

    async def expired(self) -> list[Node]:
        """The nodes whose lease ran out (dead, or cut off from the database), by id."""
        return await self._nodes(f"lease_until <= {_NOW}")

    async def _nodes(self, where: str) -> list[Node]:
        rows = await self._call(f"SELECT node_id, url, started_at, lease_until, metrics FROM "
                                f"{NODES.name} WHERE {where} ORDER BY node_id")
        return [Node(r.node_id, r.url, r.started_at, r.lease_until, r.metrics) for r in rows]

    async def orphan_owners(self) -> list[str]:
        """Owners of unfinished tasks that have no live lease (their row expired or gone),
        and the nodes whose row is there with its lease run out (they may have left
        stranded chain steps, and ``take_over`` removes the row once nothing is left): the
        nodes whose tasks are waiting to be taken over."""
        rows = await self._call(
            f"SELECT t.owner FROM {TASKS.name} t WHERE t.owner IS NOT NULL AND "
            f"t.state NOT IN {_DONE} AND NOT EXISTS (SELECT 1 FROM {NODES.name} n WHERE "
            f"n.node_id = t.owner AND n.lease_until > {_NOW}) UNION SELECT node_id FROM "
            f"{NODES.name} WHERE lease_until <= {_NOW} ORDER BY 1")
        return [r[0] for r in rows]

    async def take_over(self, dead_node_id: str, me: str, limit: int = 500,
                        since: float = 0.0) -> list[Task]:
        """Move up to ``limit`` of a dead node's unfinished tasks to ``me``, oldest first, and
        return them to resume; once those are all moved, its stranded chain steps created
        since ``since`` (terminal: their chains are to carry on). Nothing while
        ``dead_node_id`` still holds a live lease, or once ``me`` holds none (a fenced node
        takes nothing). Rows another survivor is moving are skipped (SKIP LOCKED), so racing
        survivors get disjoint shares; call again until it returns nothing. The dead node's
        row goes once it has nothing left."""
        def q() -> list[Any]:
            with self.store.engine.begin() as conn:
                alive = {r[0] for r in conn.execute(text(
                    f"SELECT node_id FROM {NODES.name} WHERE node_id IN (:d, :m) "
                    f"AND lease_until > {_NOW}"), {"d": dead_node_id, "m": me})}
                if dead_node_id in alive or me not in alive:
                    return []
                rows = list(conn.execute(text(
                    f"UPDATE {TASKS.name} SET owner = :m WHERE task_id IN (SELECT task_id "
                    f"FROM {TASKS.name} WHERE owner = :d AND state NOT IN {_DONE} "
                    f"ORDER BY created_at LIMIT :n FOR UPDATE SKIP LOCKED) RETURNING *"),
                    {"m": me, "d": dead_node_id, "n": limit}))
                if len(rows) < limit:
                    rows += conn.execute(text(
                        f"UPDATE {TASKS.name} SET owner = :m WHERE task_id IN (SELECT task_id "
                        f"FROM {TASKS.name} WHERE owner = :d AND {_STRANDED} ORDER BY "
                        f"created_at LIMIT :n FOR UPDATE SKIP LOCKED) RETURNING *"),
                        {"m": me, "d": dead_node_id, "n": limit - len(rows), "since": since,
                         **_NOTES})
                if len(rows) < limit:
                    conn.execute(text(f"DELETE FROM {NODES.name} WHERE node_id = :d AND "
                                      f"lease_until <= {_NOW}"), {"d": dead_node_id})
                return rows
        rows: list[Any] = await self.store._run(q)
        return sorted((task_from_row(r) for r in rows), key=lambda t: t.envelope.created_at)

    async def claim_dead(self, task_id: str, me: str) -> bool:
        """Make ``me`` the owner of a dead letter, to replay it (from any node of the cluster:
        a node writes only the tasks it owns). False when the task is not dead any more (its
        owner, or another node, is replaying it already)."""
        rows = await self._call(
            f"UPDATE {TASKS.name} SET owner = :m WHERE task_id = :t AND state = 'dead' "
            f"RETURNING task_id", m=me, t=task_id)
        return bool(rows)

    async def not_dead(self, task_ids: list[str]) -> list[str]:
        """Those of ``task_ids`` that are no longer dead letters (replayed, on any node)."""
        if not task_ids:
            return []
        rows = await self._call(
            f"SELECT task_id FROM {TASKS.name} WHERE task_id = ANY(:ids) AND state <> 'dead'",
            ids=task_ids)
        return [r[0] for r in rows]
