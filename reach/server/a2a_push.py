"""A2A push notifications, sent by Reach's own sender.

A config (``CreateTaskPushNotificationConfig``, or ``SendMessage``'s
``configuration.taskPushNotificationConfig``) names a URL, and optionally a token and
credentials, for one task the caller may read. When the task ends, Reach POSTs the A2A
``StreamResponse`` holding the task (as ``GetTask`` shows it) to each of its URLs, with
``X-A2A-Notification-Token`` (and ``Authorization`` when the config gives credentials),
as the SDK's sender does. Unlike the SDK's sender (one try), a delivery is retried with
backoff (``BACKOFF``, up to ``TRIES`` tries) on a network fault, a timeout, a 408, 429 or
5xx; another answer, or the last failed try, makes it a dead letter: logged, kept in the
store (the newest ``MAX_DEAD``) so a restart keeps it, listed by ``reach pushes`` and sent
again by ``reach pushes --replay`` (``replay()``).

SSRF: a URL must be http or https, redirects are not followed, and its host must resolve to
public addresses only (the SDK's ``validate_push_notification_url``), checked when the config
is made and again before each try, unless ``Settings.a2a_push_private`` allows private and
loopback receivers (tests, receivers inside the cluster's network).

Configs are kept in the store (``reach_push_configs``) before they are acknowledged, and in
memory (at most ``MAX_PER_TASK`` per task and ``MAX_CONFIGS`` in all); a config's row goes once
its notification is delivered, and stays, marked dead, when it is not. After a restart
``load`` takes them up again: a task that ended meanwhile is notified then, and the dead
letters are dead letters again, waiting for a replay.

In a cluster (docs/cluster.md) a config is sent by the node it was made on (its row names that
node, ``reach.store.pushes``), which follows the task wherever it runs. When that node dies,
the survivor that takes its tasks over takes its configs too (``adopt``, the take-over hook
of ``reach.membership``): it sends them when the tasks end, and keeps its dead letters. Each
delivery first checks that its row is still this node's, so a node cut off from the cluster
does not send what a survivor took over. Every node lists the cluster's dead letters
(``letters``) and replays one task's, wherever they were kept (``claim``: once).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Coroutine, Sequence
from typing import Any

import aiohttp
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from a2a.utils.push_url_validator import validate_push_notification_url
from google.protobuf.json_format import (  # type: ignore[import-untyped]
    MessageToDict,
    MessageToJson,
    Parse,
)

from reach.core.backoff import Backoff
from reach.core.tasks import Task
from reach.gateway.gateway import Gateway
from reach.server import a2a_tasks
from reach.server.a2a_push_kept import DeadPush, Kept, PushConfigStore

__all__ = ["DeadPush", "Kept", "PushConfigStore", "Pusher"]

log = logging.getLogger("reach.a2a")
TRIES = 5  # tries per delivery before it is a dead letter
BACKOFF = Backoff(base=0.2, factor=2.0, cap=10.0, jitter=0.2)  # between tries
TRY_TIMEOUT = 10.0  # seconds one POST may take
CLOSE_GRACE = 2.0  # seconds the deliveries under way get at a stop
MAX_PER_TASK, MAX_CONFIGS, MAX_DEAD = 10, 100_000, 1_000
RETRIED = frozenset({408, 429})  # and every 5xx
TOKEN_HEADER = "X-A2A-Notification-Token"


class Pusher:
    """The push notification configs of one A2A door, and their deliveries (each an owned
    asyncio task, cancelled by ``close``). ``backoff``, ``try_timeout`` and ``close_grace``
    are the module's defaults; a test sets them in milliseconds."""

    def __init__(self, gateway: Gateway, allow_private: bool, store: PushConfigStore,
                 seed: int | None = None) -> None:
        self.store = store
        self.backoff, self.try_timeout, self.close_grace = BACKOFF, TRY_TIMEOUT, CLOSE_GRACE
        self.gateway = gateway
        self.node = store.node_id  # the cluster node whose rows it sends (None: alone)
        self.allow_private = allow_private
        self.rng = random.Random(seed)
        self.configs: dict[str, dict[str, pb.TaskPushNotificationConfig]] = {}
        self.dead: list[DeadPush] = []
        self.delivered = 0
        self._count = 0
        self._sending: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None

    # ------------------------------------------------------------ configs

    async def add(self, config: pb.TaskPushNotificationConfig, task: Task
                  ) -> pb.TaskPushNotificationConfig:
        """Keep ``config`` for ``task`` (its id made when it has none) and return it; a task
        that has ended is notified at once."""
        await self.check(config.url)
        mine = self.configs.get(task.task_id, {})
        out = pb.TaskPushNotificationConfig()
        out.CopyFrom(config)
        out.task_id = task.task_id
        out.id = config.id or uuid.uuid4().hex
        if out.id not in mine and (len(mine) >= MAX_PER_TASK or self._count >= MAX_CONFIGS):
            raise InvalidParamsError(f"too many push notification configs (at most "
                                     f"{MAX_PER_TASK} per task, {MAX_CONFIGS} in all)")
        # Kept before it is acknowledged: a restart sends what it promised (``load``).
        await self.store.keep_push_config(task.task_id, out.id, MessageToJson(out), time.time())
        self._track(out, task)
        return out

    def _track(self, config: pb.TaskPushNotificationConfig, task: Task) -> None:
        mine = self.configs.setdefault(task.task_id, {})
        self._count += config.id not in mine
        fresh = not mine
        mine[config.id] = config
        if task.terminal:
            self._ended(task)
        elif fresh and not self.gateway.watch(task.task_id, self._ended):
            self._forget(task.task_id)  # pragma: no cover — an unfinished task is live

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
            config = Parse(kept.body, pb.TaskPushNotificationConfig())
            task = await self.gateway.task(kept.task_id)
            if task is None:
                await store.forget_push_config(kept.task_id, config.id)
                continue
            if kept.dead is not None:
                self.dead.append(DeadPush(config, task, kept.dead, kept.dead_at, kept.node))
            else:
                self._track(config, task)
            taken += 1
        await self._trim()
        return taken

    async def get(self, task_id: str, config_id: str) -> pb.TaskPushNotificationConfig:
        found = {c.id: c for c in await self.of(task_id)}.get(config_id)
        if found is None:
            raise InvalidParamsError(f"no push notification config {config_id!r} for task "
                                     f"{task_id!r}")
        return found

    async def of(self, task_id: str) -> list[pb.TaskPushNotificationConfig]:
        """The task's configs not sent yet: this node's, or in a cluster every node's (a
        config is sent by the node it was made on, but seen from any)."""
        if self.node is None:
            return list(self.configs.get(task_id, {}).values())
        rows = await self.store.task_push_configs(task_id, MAX_PER_TASK * 10)
        return [Parse(kept.body, pb.TaskPushNotificationConfig()) for kept in rows]

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

    def _forget(self, task_id: str) -> list[pb.TaskPushNotificationConfig]:
        gone = list(self.configs.pop(task_id, {}).values())
        self._count -= len(gone)
        return gone

    async def check(self, url: str) -> None:
        """Refuse a URL Reach will not send to (``InvalidParamsError``)."""
        if self.allow_private:
            if not url.startswith(("http://", "https://")):
                raise InvalidParamsError(f"push notification URL {url!r} is not http(s)",
                                         data={"code": "invalid_params"})
        elif not await validate_push_notification_url(url):
            raise InvalidParamsError(
                f"push notification URL {url[:200]!r} refused: it must be http(s) and "
                f"resolve to public addresses only (a2a_push_private allows private and "
                f"loopback ones)", data={"code": "invalid_params"})

    # ------------------------------------------------------------ sending

    def _ended(self, task: Task) -> None:
        for config in self._forget(task.task_id):
            self._spawn(self._deliver(config, task), task.task_id)

    def _spawn(self, delivery: Coroutine[Any, Any, None], task_id: str) -> None:
        sending = asyncio.get_running_loop().create_task(delivery, name=f"a2a-push-{task_id}")
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def _deliver(self, config: pb.TaskPushNotificationConfig, task: Task) -> None:
        try:  # deleted meanwhile, or taken over by another node (a cluster's): not sent here
            if not await self.store.push_pending_here(task.task_id, config.id):
                return
        except Exception as exc:  # the store is closing: its row stays for the next start
            log.info("push config %s of task %s not read: %r", config.id, task.task_id, exc)
            return
        body = MessageToDict(pb.StreamResponse(task=a2a_tasks.a2a_task(task)))
        headers = {TOKEN_HEADER: config.token} if config.token else {}
        auth = config.authentication
        if config.HasField("authentication") and auth.scheme and auth.credentials:
            headers["Authorization"] = f"{auth.scheme} {auth.credentials}"
        reason = await self._try(config, task, body, headers)
        # Delivered: its row goes. Dead: its row stays, marked, for a replay after a restart
        # too. (A delivery cut by a stop keeps its row as it was: the next start sends it.)
        try:
            if reason is None:
                await self.store.forget_push_config(task.task_id, config.id)
                return
            now = time.time()
            await self.store.push_dead(task.task_id, config.id, reason, now)
        except Exception as exc:  # the store is closing: sent again after a restart
            log.info("push config %s of task %s not written: %r", config.id, task.task_id,
                     exc)
            return
        self.dead.append(DeadPush(config, task, reason, now, self.node))
        await self._trim()

    async def _trim(self) -> None:
        """Past ``MAX_DEAD`` letters the oldest go, their rows too."""
        gone, self.dead[:] = self.dead[:-MAX_DEAD], self.dead[-MAX_DEAD:]
        for letter in gone:
            await self.store.forget_push_config(letter.task.task_id, letter.config.id)

    async def _try(self, config: pb.TaskPushNotificationConfig, task: Task, body: Any,
                   headers: dict[str, str]) -> str | None:
        """Deliver with retries: None once delivered, else why it was given up."""
        reason = ""
        for attempt in range(TRIES):
            if attempt:
                await asyncio.sleep(self.backoff.delay(attempt - 1, self.rng))
            try:
                await self.check(config.url)
                async with self._client().post(
                        config.url, json=body, headers=headers, allow_redirects=False,
                        timeout=aiohttp.ClientTimeout(total=self.try_timeout)) as answer:
                    if answer.status < 300:
                        self.delivered += 1
                        return None
                    reason = f"HTTP {answer.status}"
                    if answer.status < 500 and answer.status not in RETRIED:
                        break
            except InvalidParamsError as exc:
                reason = str(exc)
                break
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                reason = repr(exc)
        log.warning("push notification for task %s to %s not delivered after %d tries: %s",
                    task.task_id, config.url[:200], attempt + 1, reason)
        return reason

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
            config = Parse(kept.body, pb.TaskPushNotificationConfig())
            letter = mine.get((kept.task_id, config.id)) if kept.node == self.node else None
            if letter is None:
                task = await self.gateway.task(kept.task_id)
                if task is None:
                    continue
                letter = DeadPush(config, task, kept.dead or "", kept.dead_at, kept.node)
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
            await self._deliver(letter.config, letter.task)

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
            config = Parse(kept.body, pb.TaskPushNotificationConfig())
            self._spawn(self._deliver(config, task), task_id)
        return [task_id] * len(claimed)

    async def settled(self) -> None:
        """Once every delivery under way has ended (delivered or dead)."""
        while self._sending:
            await asyncio.gather(*list(self._sending), return_exceptions=True)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

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
        if self._session is not None:
            await self._session.close()
