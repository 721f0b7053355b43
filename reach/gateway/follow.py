"""Tasks this coordinator knows of but does not drive: a cluster's other nodes own them.

In a cluster (docs/cluster.md) a task is driven by the node that owns its row. A caller who
moved here after its coordinator died, or who asks about a task another node accepted, still
waits for it here: ``Following`` reads the task from the store until it ends (backing off from
``every`` to ``most`` seconds) and answers the waiters then. If the task becomes live here
meanwhile (this node took it over from a dead one), the waiters are handed to the book, which
answers them the moment it ends.

``let_go`` is the other direction: tasks this node drove but lost (the store found another node
owns them now, or this node lost its lease and is fenced) stop being driven here; nothing more
is written of them, and their waiters here follow them in the store instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from reach.core.tasks import Task
from reach.gateway.book import TaskBook
from reach.gateway.crew import Crew
from reach.ports import Clock, TaskStore

log = logging.getLogger("reach.cluster")

Watcher = Callable[[Task], None]


class Following:
    """Waiters of tasks another node drives, answered from the store when those end."""

    def __init__(self, store: TaskStore, book: TaskBook, clock: Clock, drivers: Crew, *,
                 enabled: bool = False, every: float = 0.05, most: float = 1.0,
                 limit: int = 10_000) -> None:
        self.store, self.book, self.clock, self.drivers = store, book, clock, drivers
        self.enabled = enabled  # only a cluster's node has tasks driven elsewhere
        self.every, self.most, self.limit = every, most, limit
        self._watchers: dict[str, list[Watcher]] = {}
        self._futures: dict[str, asyncio.Future[Task]] = {}
        self._polls = Crew()
        self._polling: set[str] = set()  # the tasks a poll runs for
        # What else this node forgets of a task it lets go (the gateway wires the dispatcher's
        # timed-out attempts here: nothing of a task another node owns stays behind).
        self.on_let_go: Callable[[str], None] | None = None

    def __len__(self) -> int:
        return len(self._watchers.keys() | self._futures.keys())

    # ------------------------------------------------------------ waiting

    def watch(self, task_id: str, fn: Watcher) -> bool:
        """Call ``fn(task)`` once the task, driven elsewhere, ends. False when this node has
        no other nodes (nothing can be driven elsewhere) or follows too many already."""
        if not self._room(task_id):
            return False
        self._watchers.setdefault(task_id, []).append(fn)
        self._start(task_id)
        return True

    def outcome(self, task_id: str) -> asyncio.Future[Task] | None:
        """A future that completes with the task once it ends elsewhere (None as ``watch``)."""
        fut = self._futures.get(task_id)
        if fut is None:
            if not self._room(task_id):
                return None
            fut = self._futures[task_id] = asyncio.get_running_loop().create_future()
            self._start(task_id)
        return fut

    def _room(self, task_id: str) -> bool:
        return self.enabled and (task_id in self._watchers or task_id in self._futures
                                 or len(self) < self.limit)

    def _start(self, task_id: str) -> None:
        if task_id not in self._polling:
            self._polling.add(task_id)
            self._polls.spawn(self._poll(task_id), name=f"follow-{task_id}")

    async def _poll(self, task_id: str) -> None:
        try:
            await self._follow(task_id)
        finally:
            self._polling.discard(task_id)

    async def _follow(self, task_id: str) -> None:
        delay = self.every
        while task_id in self._watchers or task_id in self._futures:
            await self.clock.sleep(delay)
            delay = min(delay * 2, self.most)
            if self.book.outcome(task_id) is not None:  # taken over by this node: the book
                self._hand_to_book(task_id)              # answers when it ends
                return
            try:
                task = await self.store.get(task_id)
            except Exception as exc:  # the store is down: keep following, more slowly
                log.warning("following task %s: the store did not answer: %r", task_id, exc)
                delay = self.most
                continue
            if task is None:  # not stored (a submit that was never accepted): nothing to wait
                log.warning("following task %s: the store has no such task", task_id)
                self._drop(task_id)
                return
            if task.terminal:
                self._answer(task)
                return

    def taken_over(self, task_id: str) -> None:
        """This node now drives the task (``Gateway.resume`` after a take-over): its waiters
        here go to the book at once, rather than when the next poll (up to ``most`` seconds
        away) finds it live."""
        if (task_id in self._watchers or task_id in self._futures) and \
                self.book.outcome(task_id) is not None:
            self._hand_to_book(task_id)

    def _hand_to_book(self, task_id: str) -> None:
        for fn in self._watchers.pop(task_id, ()):
            self.book.watch(task_id, fn)
        fut = self._futures.pop(task_id, None)
        inner = self.book.outcome(task_id)
        if fut is not None and inner is not None:
            inner.add_done_callback(lambda f: _copy(f, fut))

    def _answer(self, task: Task) -> None:
        for fn in self._watchers.pop(task.task_id, ()):
            try:
                fn(task)
            except Exception:  # one watcher's bug must not cost the others
                log.exception("a watcher of task %s failed", task.task_id)
        fut = self._futures.pop(task.task_id, None)
        if fut is not None and not fut.done():
            fut.set_result(task)

    def _drop(self, task_id: str) -> None:
        self._watchers.pop(task_id, None)
        fut = self._futures.pop(task_id, None)
        if fut is not None and not fut.done():
            fut.set_exception(LookupError(f"no task {task_id} in the store"))
            fut.exception()

    # ------------------------------------------------------------ letting go

    def let_go(self, task_ids: Iterable[str]) -> int:
        """Stop driving these tasks here (another node owns them now): their drivers are
        cancelled (a cancelled driver writes nothing more), they leave the live set, and their
        waiters follow them in the store. Returns how many were being driven here."""
        ids = [t for t in task_ids if self.book.outcome(t) is not None]
        if not ids:
            return 0
        # Its driver, and the fallback it may be following (whose answer would otherwise
        # finish a task this node no longer owns).
        self.drivers.cancel_named({f"{kind}-{t}" for t in ids for kind in ("task", "fallback")})
        for task_id in ids:
            task = self.book.live.get(task_id)
            if self.on_let_go is not None:
                self.on_let_go(task_id)
            fut, watchers = self.book.hand_over(task_id)
            if task is not None:
                self.book.unlive(task)
            if watchers:  # (an empty entry would poll for nobody, and count against limit)
                self._watchers.setdefault(task_id, []).extend(watchers)
            if fut is not None and not fut.done():
                self._futures[task_id] = fut
            if task_id in self._watchers or task_id in self._futures:
                self._start(task_id)
        log.warning("let go of %d task(s) another node now owns", len(ids))
        return len(ids)

    async def close(self, error: Exception) -> None:
        """The coordinator stops: stop following; every waiter still waiting hears ``error``."""
        await self._polls.stop()
        for fut in self._futures.values():
            if not fut.done():
                fut.set_exception(error)
                fut.exception()  # retrieved: nobody may be waiting, that is not an error
        self._futures.clear()
        self._watchers.clear()


def _copy(source: asyncio.Future[Task], into: asyncio.Future[Task]) -> None:
    if into.done():
        return
    if source.cancelled():
        into.cancel()
    elif source.exception() is not None:
        into.set_exception(source.exception())  # type: ignore[arg-type]
    else:
        into.set_result(source.result())
