"""Completion webhooks: ``notify`` on submit, a signed POST of the outcome when the task ends.

A submit that names ``notify`` (SDK ``client.submit(..., notify=URL)``, REST ``"notify"``) is
checked at its door before it is accepted (``Notify.check``: http(s), and a host that resolves
to public addresses unless ``notify_allow`` names its network; refused ``invalid_params``),
and its config is kept in the store before the submit is acknowledged (``Notify.keep``). When
the task ends (succeeded, failed, dead, cancelled), the coordinator's one sender
(reach.server.pushes) POSTs ``outcome(task)`` with the sender's retries, dead letters and
replay. The task's own outcome is never touched by what the receiver does.

Signed (docs/webhooks.md has a ten-line verifier): ``X-Reach-Timestamp`` (unix seconds) and
``X-Reach-Signature: sha256=<hex HMAC-SHA256(secret, b"<timestamp>." + body)>``. The secret is
the token the caller authenticated with (``X-Reach-Signer: token``), else the coordinator's
notify secret (``X-Reach-Signer: coordinator``: ``Settings.notify_secret``, or one made once
and kept in the store, ``reach_values``). The config keeps a fingerprint of the token, never
the token: the token itself is read from the coordinator's token table when it signs.

A chain (reach.core.chains, reach.gateway.chaining) notifies once, when it ends: the head's
config follows the chain (``WebhookKind.follows``) and tells the last step's outcome, or why a
step could not start; it stays the head's (one row, one dead letter, the head's id).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any, Protocol

from reach.core import chains
from reach.core.tasks import Task, TaskState
from reach.core.trust import Trust
from reach.errors import InvalidParams, ReachError, Unavailable
from reach.server import outbound
from reach.server.push_kept import WEBHOOK, Push
from reach.server.pushes import Pusher

log = logging.getLogger("reach.pushes")
CONFIG_ID = "reach:notify"  # one webhook per task
SECRET_NAME = "notify_secret"  # its row in reach_values
SIGNATURE, TIMESTAMP, SIGNER = "X-Reach-Signature", "X-Reach-Timestamp", "X-Reach-Signer"


class Values(Protocol):
    """Where the made secret is kept (``reach.store.store.Store`` has it)."""

    async def kept_value(self, name: str, made: str) -> str: ...


def fingerprint(token: str) -> str:
    """What a config keeps to find its caller's token again (not the token)."""
    return hashlib.sha256(b"reach-notify:" + token.encode()).hexdigest()[:32]


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Reach-Signature`` value of ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def outcome(task: Task) -> dict[str, Any]:
    """What the receiver gets: the outcome as its caller may see it."""
    env = task.envelope
    body: dict[str, Any] = {
        "v": 1, "event": "task.ended", "task_id": task.task_id, "trace_id": env.trace_id,
        "capability": env.capability, "caller": env.caller, "state": task.state.value,
        "attempts": len(task.attempts), "created_at": env.created_at,
        "ended_at": task.updated_at}
    if task.state is TaskState.SUCCEEDED:
        body["result"] = task.result
        if task.fallback is not None:
            body["fallback"] = task.fallback
    else:
        body["error"] = task.error or {"code": "task_failed", "message": "task failed"}
    if env.link is not None or env.then:
        body["chain"] = chains.place(task.task_id, env.then, env.link).to_json()
    return body


class WebhookKind:
    """How a task webhook is kept, read back and sent (``reach.server.pushes.Kind``)."""

    name = WEBHOOK

    def __init__(self, allow: outbound.Allow, trust: Trust, values: Values,
                 secret: str | None, clock: Callable[[], float] = time.time) -> None:
        self.allow = allow
        self.trust = trust
        self.values = values
        self.secret = secret  # the coordinator's; made and kept at ``start`` when None
        self.clock = clock
        self._tokens: dict[str, str] | None = None  # fingerprint -> token

    async def start(self) -> str:
        """The coordinator's notify secret: the configured one, else the one kept in the
        store (made by the first start that needed one)."""
        if self.secret is None:
            self.secret = await self.values.kept_value(SECRET_NAME, secrets.token_urlsafe(32))
        return self.secret

    def read(self, body: str) -> Push:
        spec = json.loads(body)
        if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
            raise ValueError(f"not a webhook config: {body[:200]!r}")
        return Push(WEBHOOK, str(spec.get("id", CONFIG_ID)), spec["url"], body, spec)

    def make(self, url: str, token: str | None) -> Push:
        """The config of one task's webhook, signed with ``token`` (a caller's) if given."""
        spec = {"kind": WEBHOOK, "id": CONFIG_ID, "url": url,
                "signer": None if token is None else fingerprint(token)}
        return Push(WEBHOOK, CONFIG_ID, url, json.dumps(spec), spec)

    def _token(self, push: Push, task: Task) -> str | None:
        tokens = self.trust.tokens
        if not tokens:
            return None
        if self._tokens is None:
            self._tokens = {fingerprint(t): t for t in tokens}
        signer = push.spec.get("signer") if isinstance(push.spec, dict) else None
        if signer:
            return self._tokens.get(signer)
        # (a config kept without a fingerprint: the caller's token when it has exactly one)
        mine = [t for t, principal in tokens.items() if principal == task.envelope.caller]
        return mine[0] if len(mine) == 1 else None

    async def request(self, push: Push, task: Task) -> tuple[bytes, dict[str, str]]:
        view = outcome(task)
        data = json.dumps(view, default=str, separators=(",", ":")).encode()
        if len(data) > outbound.MAX_BODY:  # the result stays with the task: read it there
            view.pop("result", None)
            view["result_omitted"] = f"{len(data)} bytes: read it with status()"
            data = json.dumps(view, default=str, separators=(",", ":")).encode()
        token = self._token(push, task)
        secret = token if token is not None else (self.secret or await self.start())
        stamp = int(self.clock())
        return data, {"Content-Type": "application/json", TIMESTAMP: str(stamp),
                      SIGNATURE: sign(secret, stamp, data),
                      SIGNER: "coordinator" if token is None else "token"}

    def follows(self, push: Push, task: Task) -> bool:
        """A chain's link that succeeded with steps to go does not notify: its chain's end
        does (the last step's outcome, or why a step could not start)."""
        return task.state is TaskState.SUCCEEDED and bool(task.envelope.then)


class Notify:
    """The doors' side of webhooks: check a URL before accepting, keep the config before
    acknowledging."""

    def __init__(self, pusher: Pusher, kind: WebhookKind) -> None:
        self.pusher = pusher
        self.kind = kind
        pusher.kinds[WEBHOOK] = kind

    async def check(self, url: str) -> None:
        """``InvalidParams`` saying what to do, for a URL Reach will not POST to."""
        try:
            await self.pusher.check(WEBHOOK, url)
        except InvalidParams as exc:
            raise InvalidParams(f"notify refused: {exc}", **exc.details) from None

    async def keep(self, task: Task, duplicate: bool, token: str | None) -> None:
        """Keep the webhook of an accepted task, before it is acknowledged. A duplicate
        submit keeps it too unless the task has ended (it was sent, or is a letter)."""
        url = task.envelope.notify
        if url is None or (duplicate and task.terminal):
            return
        # (its URL was checked before the task was accepted: ``check``)
        try:
            await self.pusher.keep(self.kind.make(url, token), task, checked=True)
        except ReachError:
            raise
        except Exception as exc:  # the store failed: not acknowledged, so submitted again
            log.error("the webhook of task %s was not kept: %r", task.task_id, exc)
            raise Unavailable(f"task {task.task_id} accepted but its webhook not kept "
                              f"({exc!r}); submit again with the same idempotency key",
                              task_id=task.task_id) from None

    def replayed(self, task: Task) -> None:
        """A dead letter that had a webhook runs again (``Gateway.on_replay``): its new end is
        told as its first was, and a chain's step tells its chain's new end, under its head's
        id. The config is kept again in the background (an operator's replay is not held up
        by the store); a step that ends before that is told all the same."""
        url = task.envelope.notify
        if url is not None:
            self.pusher.later(self._rearm(url, task), task.task_id)

    async def _rearm(self, url: str, task: Task) -> None:
        link = task.envelope.link
        owner: Task | None = task
        if link is not None and link.head != task.task_id:
            owner = await self.pusher.gateway.task(link.head)
        try:  # (signed as the first was: the caller's one token, else the coordinator's)
            await self.pusher.keep(self.kind.make(url, None), owner or task, checked=True)
        except Exception as exc:  # the store failed: the task's own outcome is untouched
            log.warning("the webhook of replayed task %s was not kept again: %r",
                        task.task_id, exc)
