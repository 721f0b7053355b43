"""The one sender of task notifications: A2A push notifications and completion webhooks.

A config (``Push``, reach.server.push_kept) names where one task's outcome goes, and its kind
says how the POST is made (``Kind``: the A2A door's ``a2a_push.A2AKind``, the webhook's
``notify.WebhookKind``). Every kind gets the same guarantees:

- **kept before it is acknowledged**: ``keep`` writes the config's row (``reach_push_configs``,
  reach.store.pushes) before it returns, and a restart takes it up again (``load``): a task
  that ended meanwhile is notified then;
- **one POST rule** (reach.server.outbound): up to ``TRIES`` tries with jittered backoff
  (``BACKOFF``) on a network fault, a timeout, a 408, 425, 429 or 5xx, no redirect followed, a
  bounded body, and the caller's URL screened (SSRF) before each try;
- **dead letters**: the last failed try, or a final answer, keeps the row marked dead (the
  newest ``MAX_DEAD``), listed by ``reach pushes`` (``letters``) and sent again by
  ``reach pushes --replay`` (``replay``, ``claim``);
- **chains** (reach.gateway.chaining): a config whose task passed its result on to a next
  step tells the chain's end instead (``Kind.follows``): it is sent when the last step ends,
  or when a step could not start, and stays the head's (one row per chain, replayed by the
  head's id);
- **a cluster** (docs/cluster.md): a row names the node that sends it, which follows the task
  wherever it runs; a survivor takes a dead node's rows over with its tasks (``adopt``); each
  delivery first checks the row is still this node's.

Configs are held in memory too (at most ``MAX_PER_TASK`` per task and ``MAX_CONFIGS`` in
all). The coordinator owns the sender (``Reach.pusher``), whether or not the A2A door is on,
and its deliveries are owned asyncio tasks, cut by ``close``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Coroutine, Sequence
from typing import Any, Protocol

import aiohttp

from reach.core.backoff import Backoff
from reach.core.tasks import Task, TaskState
from reach.errors import InvalidParams
from reach.gateway.gateway import Gateway
from reach.server import outbound
from reach.server.push_kept import DeadPush, Kept, Push, PushConfigStore, kind_of

__all__ = ["DeadPush", "Kind", "Push", "Pusher"]

log = logging.getLogger("reach.pushes")
TRIES = 5  # tries per delivery before it is a dead letter
BACKOFF = Backoff(base=0.2, factor=2.0, cap=10.0, jitter=0.2)  # between tries
TRY_TIMEOUT = 10.0  # seconds one POST may take
CLOSE_GRACE = 2.0  # seconds the deliveries under way get at a stop
MAX_PER_TASK, MAX_CONFIGS, MAX_DEAD = 10, 100_000, 1_000


class Kind(Protocol):
    """How the configs of one kind are read back and sent."""

    name: str
    allow: outbound.Allow  # which non-public receivers its URLs may name

    def read(self, body: str) -> Push:
        """A kept body as a config (``ValueError``: unreadable)."""
        ...

    async def request(self, push: Push, task: Task) -> tuple[bytes, dict[str, str]]:
        """The body and headers of the POST that tells ``task``'s outcome."""
        ...

    def follows(self, push: Push, task: Task) -> bool:
        """Whether what this ended task's config tells is its chain's end, not its own (a
        chain's link that passed its result on, reach.gateway.chaining)."""
        ...


class Pusher:
    """The coordinator's notification configs and their deliveries. ``backoff``,
    ``try_timeout`` and ``close_grace`` are the module's defaults; a test sets them in
    milliseconds."""

    def __init__(self, gateway: Gateway, store: PushConfigStore, seed: int | None = None
                 ) -> None:
        self.store = store
        self.backoff, self.try_timeout, self.close_grace = BACKOFF, TRY_TIMEOUT, CLOSE_GRACE
        self.gateway = gateway
        self.node = store.node_id  # the cluster node whose rows it sends (None: alone)
        self.kinds: dict[str, Kind] = {}
        self.rng = random.Random(seed)
        self.configs: dict[str, dict[str, Push]] = {}
        self.dead: list[DeadPush] = []
        self.delivered = 0
        self._count = 0
        self._sending: set[asyncio.Task[None]] = set()
        self._sessions: dict[outbound.Allow, aiohttp.ClientSession] = {}

    # ------------------------------------------------------------ configs

    async def check(self, kind: str, url: str) -> None:
        """Refuse a URL Reach will not send to (``InvalidParams``, saying what to do)."""
        why = await outbound.refusal(url, self.kinds[kind].allow)
        if why is not None:
            raise InvalidParams(why, url=url[:200])

    async def keep(self, push: Push, task: Task, *, checked: bool = False) -> Push:
        """Keep ``push`` for ``task`` (its URL checked first, unless the door just did:
        ``checked``), in the store before this returns; a task that has ended is notified at
        once. ``InvalidParams`` past the bounds."""
        if not checked:
            await self.check(push.kind, push.url)
        mine = self.configs.get(task.task_id, {})
        if push.id not in mine and (len(mine) >= MAX_PER_TASK or self._count >= MAX_CONFIGS):
            raise InvalidParams(f"too many push notification configs (at most "
                                f"{MAX_PER_TASK} per task, {MAX_CONFIGS} in all)")
        # Kept before it is acknowledged: a restart sends what it promised (``load``).
        await self.store.keep_push_config(task.task_id, push.id, push.body, time.time())
        self._track(push, task)
        return push

    def _track(self, push: Push, task: Task) -> None:
        mine = self.configs.setdefault(task.task_id, {})
        self._count += push.id not in mine
        fresh = not mine
        mine[push.id] = push
        if task.terminal:
            self._ended(task)
        elif fresh and not self.gateway.watch(task.task_id, self._ended):
            self._forget(task.task_id)  # pragma: no cover — an unfinished task is live

    def read(self, body: str) -> Push | None:
        """A kept body as a config, or None when its kind is not served now (an A2A config
        kept while the A2A door was on) or it cannot be read."""
        kind = self.kinds.get(kind_of(body))
        try:
            return None if kind is None else kind.read(body)
        except ValueError as exc:
            log.warning("a kept push config cannot be read: %s", exc)
            return None

    async def load(self) -> int:
        """Take up the configs a previous run kept (after its unfinished tasks resumed): an
        ended task's notifications go now, an unfinished one's when it ends; a config whose
        task is gone is dropped. How many were taken up."""
        return await self._take_up(await self.store.push_configs(MAX_CONFIGS))

    async def adopt(self) -> int:
        """Take up the configs of the cluster's dead nodes (after their tasks were taken
        over), as ``load`` does this node's own: how many."""
        taken = 0
        while (room := min(MAX_DEAD, MAX_CONFIGS - self._count)) > 0:
            kept = await self.store.adopt_pushes(room)
            taken += await self._take_up(kept)
            if len(kept) < room:
                break
        return taken

    async def _take_up(self, rows: Sequence[Kept]) -> int:
        store, taken = self.store, 0
        for kept in rows:
            push = self.read(kept.body)
            if push is None:
                continue  # (kept as it is: the kind's door may serve it again)
            task = await self.gateway.task(kept.task_id)
            if task is None:
                await store.forget_push_config(kept.task_id, push.id)
                continue
            if kept.dead is not None:
                self.dead.append(DeadPush(push, task, kept.dead, kept.dead_at, kept.node))
            else:
                self._track(push, task)
            taken += 1
        await self._trim()
        return taken

    async def of(self, task_id: str, kind: str) -> list[Push]:
        """The task's configs of ``kind`` not sent yet: this node's, or in a cluster every
        node's (a config is sent by the node it was made on, but seen from any)."""
        if self.node is None:
            return [p for p in self.configs.get(task_id, {}).values() if p.kind == kind]
        rows = await self.store.task_push_configs(task_id, MAX_PER_TASK * 10)
        found = (self.read(kept.body) for kept in rows)
        return [p for p in found if p is not None and p.kind == kind]

    async def delete(self, task_id: str, config_id: str) -> None:
        mine = self.configs.get(task_id, {})
        if mine.pop(config_id, None) is not None:
            self._count -= 1
        if not mine:
            self.configs.pop(task_id, None)
        # A dead letter of it is gone too: a replay must not send what its owner deleted.
        self.dead = [d for d in self.dead
                     if (d.task.task_id, d.config.id) != (task_id, config_id)]
        await self.store.forget_push_config(task_id, config_id)

    def _forget(self, task_id: str) -> list[Push]:
        gone = list(self.configs.pop(task_id, {}).values())
        self._count -= len(gone)
        return gone

    # ------------------------------------------------------------ sending

    def _ended(self, task: Task) -> None:
        for push in self._forget(task.task_id):
            self._send(push, task)

    def _send(self, push: Push, task: Task) -> None:
        """Deliver what ``push`` tells of ``task``: its own end, or its chain's."""
        kind = self.kinds.get(push.kind)
        if kind is not None and kind.follows(push, task):
            self._follow(push, task, task)
        else:
            self._spawn(self._deliver(push, task), task.task_id)

    def _follow(self, push: Push, task: Task, link: Task) -> None:
        """``link`` of ``task``'s chain passed its result on: deliver once the chain ends
        (its last step, or a stand-in for a step that could not start). Nothing is held
        meanwhile but the chain's own watcher; the config's row stays ``task``'s, so a
        restart follows the chain again (``load``)."""
        def ended(end: Task) -> None:
            if end.state is TaskState.SUCCEEDED and end.envelope.then:
                self._follow(push, task, end)
            else:
                self._spawn(self._deliver(push, task, end), task.task_id)
        self.gateway.chains.follow(link, ended)

    def later(self, job: Coroutine[Any, Any, None], task_id: str) -> None:
        """Run ``job`` as one of the sender's own tasks: ``settled`` waits for it, ``close``
        cuts it."""
        self._spawn(job, task_id)

    def _spawn(self, delivery: Coroutine[Any, Any, None], task_id: str) -> None:
        sending = asyncio.get_running_loop().create_task(delivery, name=f"push-{task_id}")
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def _deliver(self, push: Push, task: Task, end: Task | None = None) -> None:
        """POST ``end``'s outcome (default ``task``'s: a chain's end is another task's) for
        the config ``push`` of ``task``; keep its row dead when it is not delivered."""
        try:  # deleted meanwhile, or taken over by another node (a cluster's): not sent here
            if not await self.store.push_pending_here(task.task_id, push.id):
                return
        except Exception as exc:  # the store is closing: its row stays for the next start
            log.info("push config %s of task %s not read: %r", push.id, task.task_id, exc)
            return
        reason = await self._try(push, end or task)
        # Delivered: its row goes. Dead: its row stays, marked, for a replay after a restart
        # too. (A delivery cut by a stop keeps its row as it was: the next start sends it.)
        try:
            if reason is None:
                await self.store.forget_push_config(task.task_id, push.id)
                return
            now = time.time()
            await self.store.push_dead(task.task_id, push.id, reason, now)
        except Exception as exc:  # the store is closing: sent again after a restart
            log.info("push config %s of task %s not written: %r", push.id, task.task_id, exc)
            return
        self.dead.append(DeadPush(push, task, reason, now, self.node, end))
        await self._trim()

    async def _trim(self) -> None:
        """Past ``MAX_DEAD`` letters the oldest go, their rows too."""
        gone, self.dead[:] = self.dead[:-MAX_DEAD], self.dead[-MAX_DEAD:]
        for letter in gone:
            await self.store.forget_push_config(letter.task.task_id, letter.config.id)

    async def _try(self, push: Push, task: Task) -> str | None:
        """Deliver with retries: None once delivered, else why it was given up."""
        kind = self.kinds.get(push.kind)
        if kind is None:
            return f"this coordinator does not send {push.kind!r} notifications now"
        made = 0

        def tried() -> None:
            nonlocal made
            made += 1
        data, headers = await kind.request(push, task)
        reason = await outbound.post(
            self._client(kind.allow), push.url, data, headers, tries=TRIES, backoff=self.backoff,
            timeout=self.try_timeout, rng=self.rng, sleep=asyncio.sleep, allow=kind.allow,
            tried=tried)
        if reason is None:
            self.delivered += 1
            return None
        log.warning("%s notification for task %s to %s not delivered after %d tries: %s",
                    push.kind, task.task_id, outbound.where(push.url), made, reason)
        return reason

    # ------------------------------------------------------------ dead letters

    def dead_letters(self) -> list[dict[str, Any]]:
        """The notifications not delivered, oldest first (``DeadPush.view``)."""
        return [letter.view() for letter in self.dead]

    async def letters(self) -> list[dict[str, Any]]:
        """The dead letters an operator sees: this coordinator's (``dead_letters``) or, in a
        cluster, every node's as the store keeps them, by when they were given up. Those of
        this node that another node replayed meanwhile leave its list here."""
        if self.node is None:
            return self.dead_letters()
        rows = await self.store.push_configs(MAX_DEAD, dead_only=True, everywhere=True)
        mine = {(d.task.task_id, d.config.id): d for d in self.dead}
        out: list[DeadPush] = []
        for kept in rows:
            push = self.read(kept.body)
            if push is None:
                continue
            letter = mine.get((kept.task_id, push.id)) if kept.node == self.node else None
            if letter is None:
                task = await self.gateway.task(kept.task_id)
                if task is None:
                    continue
                letter = DeadPush(push, task, kept.dead or "", kept.dead_at, kept.node)
            out.append(letter)
        here = {(d.task.task_id, d.config.id) for d in out if d.node == self.node}
        self.dead = [d for d in self.dead if (d.task.task_id, d.config.id) in here]
        return [letter.view() for letter in sorted(out, key=lambda d: d.at)]

    def replay(self, task_id: str | None = None) -> list[str]:
        """Send this node's dead letters again, each with its tries (``task_id``: that task's
        only); the ids of their tasks. A letter stays in the store, marked dead, until its
        replay claims it (``claim_push_dead``: one replay at a time, on any node)."""
        chosen: list[DeadPush] = []
        kept: list[DeadPush] = []
        for letter in self.dead:
            (chosen if task_id is None or letter.task.task_id == task_id else kept).append(letter)
        self.dead = kept
        for letter in chosen:
            self._spawn(self._replay(letter), letter.task.task_id)
        return [letter.task.task_id for letter in chosen]

    async def _replay(self, letter: DeadPush) -> None:
        if await self.store.claim_push_dead(letter.task.task_id, letter.config.id):
            if letter.outcome is not None:
                await self._deliver(letter.config, letter.task, letter.outcome)
            else:  # (read back after a restart: a chain's end is found again)
                self._send(letter.config, letter.task)

    async def claim(self, task_id: str) -> list[str]:
        """Replay one task's dead letters, whichever node of the cluster keeps them: each is
        claimed for this node first, so a letter is replayed once (``[]``: none is dead any
        more). The task's id once per letter."""
        self.dead = [d for d in self.dead if d.task.task_id != task_id]
        claimed = await self.store.claim_push_dead(task_id)
        task = await self.gateway.task(task_id) if claimed else None
        if task is None:
            return []
        for kept in claimed:
            push = self.read(kept.body)
            if push is not None:
                self._send(push, task)
        return [task_id] * len(claimed)

    # ------------------------------------------------------------ lifecycle

    async def settled(self) -> None:
        """Once every delivery under way has ended (delivered or dead)."""
        while self._sending:
            await asyncio.gather(*list(self._sending), return_exceptions=True)

    def _client(self, allow: outbound.Allow) -> aiohttp.ClientSession:
        """The HTTP client of one kind's rules (each checks the addresses it connects to)."""
        client = self._sessions.get(allow)
        if client is None or client.closed:
            client = self._sessions[allow] = outbound.session(allow)
        return client

    async def close(self) -> None:
        """Give the deliveries under way ``close_grace`` seconds, cancel those left, and
        close the HTTP client."""
        try:
            async with asyncio.timeout(self.close_grace):
                await self.settled()
        except TimeoutError:
            log.warning("%d push notifications cut by the stop", len(self._sending))
        for sending in list(self._sending):
            sending.cancel()
        await asyncio.gather(*list(self._sending), return_exceptions=True)
        for client in self._sessions.values():
            await client.close()
