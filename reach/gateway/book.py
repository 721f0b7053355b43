"""The task book: every task the gateway knows in memory, and who waits on each.

Live tasks, recently finished ones (for status and traces, bounded in count and bytes),
unresolved dead letters (bounded in count and bytes too: the rest stay in the store), trace
membership, caller-scoped idempotency keys (with their ages, for the TTL), each caller's count
of unfinished tasks, and the waiters of a task: its outcome future, synchronous watchers,
stream sinks and the pending commit of its first write. What the store keeps durably is not
here; this is what answers without a query.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from pydantic_core import to_json

from reach.config import Settings
from reach.core import counts
from reach.core.tasks import Task, TaskState
from reach.gateway.backlog import Backlog
from reach.gateway.events import DEAD_LETTER, EventBus

S = TaskState
log = logging.getLogger("reach.gateway")
ChunkSink = Callable[[str, int, Any], None]


class TaskBook:
    def __init__(self, settings: Settings, events: EventBus) -> None:
        self.settings = settings
        self.events = events
        self.live: dict[str, Task] = {}
        self.recent: OrderedDict[str, Task] = OrderedDict()
        self.traces: dict[str, list[str]] = {}
        self.dead: dict[str, Task] = {}
        self.keys: dict[str, str] = {}  # caller-scoped idempotency key → task id
        self.caller_live: dict[str, int] = {}  # caller → its unfinished tasks
        self.backlog = Backlog(self.live)  # the live tasks waiting their turn (queued)
        self.commits: dict[str, asyncio.Future[None]] = {}
        # Who waits on each pending insert (``then``), called from its one settling callback.
        self._after: dict[str, list[Callable[[asyncio.Future[None]], None]]] = {}
        self._recent_bytes = 0  # about how much ``recent`` holds (params and results)
        self._recent_sizes: dict[str, int] = {}
        self._dead_bytes = 0  # about how much ``dead`` holds, as ``_recent_bytes``
        self._dead_sizes: dict[str, int] = {}
        self._dead_capped = False
        self._keys_capped = False
        self._key_ages: deque[tuple[float, str, str]] = deque()  # (created, key, task), by age
        # task id → its outcome future, made when first asked for (``outcome``): a websocket
        # caller is answered by a watcher and never asks, so most calls make none
        self._outcomes: dict[str, asyncio.Future[Task] | None] = {}
        self._watchers: dict[str, list[Callable[[Task], None]]] = {}
        self._chunk_sinks: dict[str, list[ChunkSink]] = {}
        self._chunk_next: dict[str, int] = {}  # task id → the next chunk seq callers expect

    # ------------------------------------------------------------ membership

    def track(self, task: Task) -> None:
        """A task became live (accepted, resumed or replayed)."""
        if task.task_id not in self.live:
            counts.add(self.caller_live, task.envelope.caller)
        self.live[task.task_id] = task  # (accepted, resumed or replayed: never queued yet)
        ids = self.traces.setdefault(task.envelope.trace_id, [])
        if task.task_id not in ids:  # a replay or resume is the same task, not a new hop
            ids.append(task.task_id)
        self._outcomes.setdefault(task.task_id, None)

    def unlive(self, task: Task) -> None:
        if self.live.pop(task.task_id, None) is not None:
            counts.drop(self.caller_live, task.envelope.caller)
            if task.state is S.QUEUED:
                self.backlog.leave(task)

    def forget(self, task: Task, error: BaseException | None = None) -> None:
        """A task whose first write failed: it was never accepted, nothing may remain. One
        that ended before the write failed leaves the recent tasks and the dead letters
        again; whoever awaits its outcome hears ``error`` (a failed write) instead."""
        env, tid = task.envelope, task.task_id
        self.unlive(task)
        _refuse(self._outcomes.pop(tid, None), error)
        self._watchers.pop(tid, None)
        self._chunk_sinks.pop(tid, None)
        self._chunk_next.pop(tid, None)
        if self.recent.pop(tid, None) is not None:
            self._recent_bytes -= self._recent_sizes.pop(tid, 0)
        if self.unkeep_dead(tid) is not None:
            self.events.publish(DEAD_LETTER, {"action": "not_stored", "task_id": tid,
                                              "capability": env.capability})
        ids = self.traces.get(env.trace_id)
        if ids is not None and tid in ids:
            ids.remove(tid)
            if not ids:
                del self.traces[env.trace_id]
        if self.keys.get(env.idempotency_key) == tid:
            del self.keys[env.idempotency_key]

    def find(self, task_id: str) -> Task | None:
        """A task still in memory: live, recently finished, or an unresolved dead letter."""
        return self.live.get(task_id) or self.recent.get(task_id) or self.dead.get(task_id)

    def restore(self, task: Task) -> None:
        """A task read back from the store at start, for the trace list: it joins its trace,
        and, finished, the recent tasks (an unfinished one is resumed, and tracked, apart)."""
        ids = self.traces.setdefault(task.envelope.trace_id, [])
        if task.task_id not in ids:
            ids.append(task.task_id)
        if task.terminal and self.find(task.task_id) is None:
            self._keep_recent(task)

    def usage(self, caller: str) -> int:
        return self.caller_live.get(caller, 0)

    # ------------------------------------------------------------ commits

    def committing(self, task_id: str, commit: asyncio.Future[None]) -> None:
        """The task's insert is queued: ``commit`` completes once it is stored (or not)."""
        self.commits[task_id] = commit
        self._after[task_id] = []

    def then(self, task_id: str, commit: asyncio.Future[None],
             fn: Callable[[asyncio.Future[None]], None]) -> None:
        """Call ``fn(commit)`` once ``commit`` is done. When it is the task's pending insert,
        ``fn`` runs from the insert's one settling callback (``committed``), in the order
        asked: one turn of the loop for everyone waiting on a commit (the caller's ack, the
        first attempt's send), not one each."""
        after = self._after.get(task_id)
        if after is not None and self.commits.get(task_id) is commit:
            after.append(fn)
        else:
            commit.add_done_callback(fn)

    def committed(self, task_id: str, commit: asyncio.Future[None]) -> None:
        """The insert is done: the task's commit is no longer pending; call who waited."""
        self.commits.pop(task_id, None)
        for fn in self._after.pop(task_id, ()):
            try:
                fn(commit)
            except Exception:  # as the loop does for a future's callback: logged, and the
                log.exception("a callback on task %s's commit failed", task_id)  # rest run

    # ------------------------------------------------------------ waiters

    def outcome(self, task_id: str) -> asyncio.Future[Task] | None:
        """A future that completes with the task once it is terminal (None if not live)."""
        if task_id not in self._outcomes:
            return None
        fut = self._outcomes[task_id]
        if fut is None:
            fut = self._outcomes[task_id] = asyncio.get_running_loop().create_future()
        return fut

    def watch(self, task_id: str, fn: Callable[[Task], None]) -> bool:
        """Call ``fn(task)`` the moment the task's outcome is released (synchronously, without
        the extra turn of the loop a future's callback costs). False if the task is not live."""
        if task_id not in self._outcomes:
            return False
        self._watchers.setdefault(task_id, []).append(fn)
        return True

    def hand_over(self, task_id: str
                  ) -> tuple[asyncio.Future[Task] | None, list[Callable[[Task], None]]]:
        """Take a live task's waiters away (another node drives it now): its outcome future
        and watchers, which the book no longer answers."""
        self._chunk_sinks.pop(task_id, None)
        return self._outcomes.pop(task_id, None), self._watchers.pop(task_id, [])

    def add_chunk_sink(self, task_id: str, sink: ChunkSink) -> None:
        self._chunk_sinks.setdefault(task_id, []).append(sink)

    def emit_chunk(self, task_id: str, seq: int, data: Any) -> None:
        # A losing hedge may stream on after the task was answered: nobody listens any more.
        if task_id not in self.live:
            return
        # A retried attempt streams again from 0: callers already have those chunks.
        if seq < self._chunk_next.get(task_id, 0):
            return
        self._chunk_next[task_id] = seq + 1
        for sink in self._chunk_sinks.get(task_id, ()):
            sink(task_id, seq, data)

    def release(self, task: Task) -> None:
        """The task is terminal: answer its waiters (once what they are told is stored),
        then keep it among the recent ones (and the dead letters when it died)."""
        tid = task.task_id
        if tid not in self._outcomes:  # not live here (answered, or handed over)
            return
        fut = self._outcomes.pop(tid)
        watchers = self._watchers.pop(tid, ())
        if (fut is None and not watchers) or (fut is not None and fut.done()):
            return  # nobody waits

        def answer(c: asyncio.Future[None] | None = None) -> None:
            if c is not None and (c.cancelled() or c.exception() is not None):
                _refuse(fut, None if c.cancelled() else c.exception())
                return  # never stored, so never accepted: no outcome to tell
            for fn in watchers:
                try:
                    fn(task)
                except Exception:  # one watcher's bug must not cost the others or
                    log.exception("a watcher of task %s failed", tid)  # the bookkeeping
            if fut is not None and not fut.done():
                fut.set_result(task)
        commit = self.commits.get(tid)
        if commit is None or commit.done():
            answer(commit)
        else:  # answer only what was stored
            self.then(tid, commit, answer)

    def settle(self, task: Task) -> None:
        """After the answer: the task leaves the live set, and is kept as recent (and as a
        dead letter when it died)."""
        tid = task.task_id
        self.unlive(task)
        size = footprint(task)
        if task.state is S.DEAD:
            self.keep_dead(task, size)
            self.events.publish(DEAD_LETTER, {"action": "added", "task_id": tid,
                                              "capability": task.envelope.capability})
        elif self.unkeep_dead(tid) is not None:
            self.events.publish(DEAD_LETTER, {"action": "resolved", "task_id": tid,
                                              "capability": task.envelope.capability})
        self._keep_recent(task, size)
        if task.state is S.DEAD:
            self.bound_dead()
        self._chunk_sinks.pop(tid, None)
        self._chunk_next.pop(tid, None)

    def fail_waiters(self, error: Exception) -> None:
        """The coordinator stops: every waiter still waiting hears ``error``."""
        for fut in self._outcomes.values():
            _refuse(fut, error)

    # ------------------------------------------------------------ bounded memory

    def _keep_recent(self, task: Task, size: int | None = None) -> None:
        """Keep a finished task for status and traces, within ``recent_tasks`` and
        ``recent_bytes`` (older ones are read from the store)."""
        tid = task.task_id
        size = footprint(task) if size is None else size
        self._recent_bytes += size - self._recent_sizes.get(tid, 0)
        self._recent_sizes[tid] = size
        self.recent[tid] = task
        self.recent.move_to_end(tid)
        s = self.settings
        while len(self.recent) > 1 and (len(self.recent) > s.recent_tasks
                                        or self._recent_bytes > s.recent_bytes):
            old_id, old = self.recent.popitem(last=False)
            self._recent_bytes -= self._recent_sizes.pop(old_id, 0)
            ids = self.traces.get(old.envelope.trace_id)
            if ids is not None and old_id in ids and old_id not in self.live:
                ids.remove(old_id)
                if not ids:
                    del self.traces[old.envelope.trace_id]

    def remember_key(self, key: str, task_id: str, created_at: float) -> None:
        self.keys[key] = task_id
        self._key_ages.append((created_at, key, task_id))
        if len(self._key_ages) > self.settings.idempotency_keys_max:
            # Memory over the TTL: the oldest keys go early (a repeat of one runs again).
            _, old_key, old_task = self._key_ages.popleft()
            if self.keys.get(old_key) == old_task and old_task not in self.live:
                del self.keys[old_key]
            if not self._keys_capped:
                self._keys_capped = True
                log.warning("more than %d idempotency keys within their TTL: the oldest are "
                            "forgotten early (raise idempotency_keys_max or lower "
                            "idempotency_ttl)", self.settings.idempotency_keys_max)

    def prune_keys(self, before: float) -> int:
        """Forget the keys of tasks created before ``before`` (the TTL); returns how many."""
        ages, pruned = self._key_ages, 0
        while ages and ages[0][0] < before:
            _, key, task_id = ages.popleft()
            if self.keys.get(key) == task_id and task_id not in self.live:
                del self.keys[key]
                pruned += 1
        return pruned

    def prune_dead(self, before: float) -> int:
        """Stop listing dead letters that died before ``before`` (the retention); their rows
        stay in the store, where ``status`` and ``replay`` still find them."""
        old = [tid for tid, t in self.dead.items()
               if t.state is S.DEAD and t.updated_at < before]
        for tid in old:
            self.drop_dead(tid)
        return len(old)

    def drop_dead(self, task_id: str) -> None:
        """Stop listing a dead letter (past the retention or the bounds); its row stays."""
        task = self.unkeep_dead(task_id)
        if task is not None:
            self.events.publish(DEAD_LETTER, {"action": "expired", "task_id": task_id,
                                              "capability": task.envelope.capability})

    def keep_dead(self, task: Task, size: int | None = None) -> None:
        """List ``task`` among the dead letters, counting its bytes (``bound_dead`` then
        keeps the list within ``dead_letters_max`` and ``dead_letter_bytes``)."""
        tid = task.task_id
        size = footprint(task) if size is None else size
        self._dead_bytes += size - self._dead_sizes.get(tid, 0)
        self._dead_sizes[tid] = size
        self.dead[tid] = task

    def unkeep_dead(self, task_id: str) -> Task | None:
        """Take a letter off the list (replayed, or gone from memory); returns it."""
        self._dead_bytes -= self._dead_sizes.pop(task_id, 0)
        return self.dead.pop(task_id, None)

    def bound_dead(self) -> int:
        """Drop the oldest letters past ``dead_letters_max`` or ``dead_letter_bytes`` from
        memory (never the newest one); returns how many. Their rows stay in the store:
        ``status``, ``reach.task(id)`` and ``replay(id)`` still find them."""
        s, dropped = self.settings, 0
        while len(self.dead) > 1 and (len(self.dead) > s.dead_letters_max
                                      or self._dead_bytes > s.dead_letter_bytes):
            self.drop_dead(next(iter(self.dead)))
            dropped += 1
        if dropped and not self._dead_capped:
            self._dead_capped = True
            log.warning("more dead letters than dead_letters_max (%d) or dead_letter_bytes "
                        "(%d) hold: the oldest leave memory and reach.dead_letters(); their "
                        "rows stay in the store, where status and replay(task_id) find them",
                        s.dead_letters_max, s.dead_letter_bytes)
        return dropped


def _refuse(fut: asyncio.Future[Task] | None, error: BaseException | None) -> None:
    """End an outcome future that will have no outcome: with ``error``, or cancelled."""
    if fut is None or fut.done():
        return
    if error is None:
        fut.cancel()
    else:
        fut.set_exception(error)
        fut.exception()  # retrieved: nobody may be waiting, that is not an error


REPLAYED = "replayed"
_WAS = "replayed; was "


def replay_note(error: dict[str, Any] | None) -> str:
    """The history note of a replay: it names the error the replay is about to replace, so a
    letter that dies again (say ``unavailable``, into an open breaker) still shows why it
    first died, also after a restart (the history is stored with the task)."""
    if not error:
        return REPLAYED
    text = f"{error.get('code', 'error')}: {error.get('message', '')}".strip()
    return (_WAS + text)[:300]


def earlier_errors(task: Task) -> list[dict[str, Any]]:
    """The errors replays replaced, oldest first: ``[{"at", "error": "code: message"}]``."""
    return [{"at": at, "error": note[len(_WAS):]} for state, at, note in task.history
            if state == S.PENDING.value and note.startswith(_WAS)]


def footprint(task: Task) -> int:
    """About the bytes a finished task holds: its params and result as JSON, plus the rest."""
    env = task.envelope
    size = 600 + 200 * len(task.attempts) + 60 * len(task.history)
    if env.params:
        size += len(to_json(env.params))
    if task.result is not None:
        size += len(to_json(task.result))
    return size
