"""A2A push notifications: the A2A door's kind of config for Reach's one sender.

A config (``CreateTaskPushNotificationConfig``, or ``SendMessage``'s
``configuration.taskPushNotificationConfig``) names a URL, and optionally a token and
credentials, for one task the caller may read. When the task ends, Reach POSTs the A2A
``StreamResponse`` holding the task (as ``GetTask`` shows it) to each of its URLs, with
``X-A2A-Notification-Token`` (and ``Authorization`` when the config gives credentials),
as the SDK's sender does. Unlike the SDK's sender (one try), the coordinator's sender
(``reach.server.pushes.Pusher``, shared with task webhooks) keeps the config before it is
acknowledged, retries with backoff, keeps dead letters (``reach pushes``, ``--replay``) and
hands configs over in a cluster; its module says how.

SSRF: a URL must be http or https, redirects are not followed, and its host must resolve to
public addresses only, checked when the config is made and again before each try
(``reach.server.outbound``), unless ``Settings.a2a_push_private`` allows private and loopback
receivers (tests, receivers inside the cluster's network) or ``notify_allow`` names their
network.
"""

from __future__ import annotations

import json
import uuid

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import (  # type: ignore[import-untyped]
    MessageToDict,
    MessageToJson,
    Parse,
    ParseError,
)

from reach.core.tasks import Task
from reach.errors import ReachError
from reach.server import a2a_tasks, outbound
from reach.server.push_kept import A2A, DeadPush, Kept, Push, PushConfigStore
from reach.server.pushes import MAX_PER_TASK, TRIES, Pusher

__all__ = ["MAX_PER_TASK", "TRIES", "A2AKind", "A2APushes", "DeadPush", "Kept",
           "PushConfigStore", "Pusher"]

TOKEN_HEADER = "X-A2A-Notification-Token"
RESERVED = "reach:"  # config ids of Reach's own kinds (a task webhook's: "reach:notify")


class A2AKind:
    """How an A2A push config is kept, read back and sent (``reach.server.pushes.Kind``)."""

    name = A2A

    def __init__(self, allow: outbound.Allow) -> None:
        self.allow = allow

    def read(self, body: str) -> Push:
        try:
            config = Parse(body, pb.TaskPushNotificationConfig())
        except ParseError as exc:
            raise ValueError(str(exc)) from None
        return Push(A2A, config.id, config.url, body, config)

    async def request(self, push: Push, task: Task) -> tuple[bytes, dict[str, str]]:
        config: pb.TaskPushNotificationConfig = push.spec
        body = MessageToDict(pb.StreamResponse(task=a2a_tasks.a2a_task(task)))
        headers = {"Content-Type": "application/json"}
        if config.token:
            headers[TOKEN_HEADER] = config.token
        auth = config.authentication
        if config.HasField("authentication") and auth.scheme and auth.credentials:
            headers["Authorization"] = f"{auth.scheme} {auth.credentials}"
        return json.dumps(body).encode(), headers

    def follows(self, push: Push, task: Task) -> bool:
        return False  # (an A2A push tells its own task's end)


class A2APushes:
    """The A2A door's view of the sender: configs as the A2A SDK's messages, refusals as
    its ``InvalidParamsError``."""

    def __init__(self, pusher: Pusher) -> None:
        self.pusher = pusher

    async def check(self, url: str) -> None:
        """Refuse a URL Reach will not send to (``InvalidParamsError``)."""
        try:
            await self.pusher.check(A2A, url)
        except ReachError as exc:
            raise InvalidParamsError(f"push notification {exc} (a2a_push_private allows "
                                     f"every private receiver)",
                                     data={"code": "invalid_params"}) from None

    async def add(self, config: pb.TaskPushNotificationConfig, task: Task
                  ) -> pb.TaskPushNotificationConfig:
        """Keep ``config`` for ``task`` (its id made when it has none) and return it; a task
        that has ended is notified at once."""
        await self.check(config.url)
        if config.id.startswith(RESERVED):
            raise InvalidParamsError(f"push notification config ids starting {RESERVED!r} "
                                     f"are Reach's own: choose another",
                                     data={"code": "invalid_params"})
        out = pb.TaskPushNotificationConfig()
        out.CopyFrom(config)
        out.task_id = task.task_id
        out.id = config.id or uuid.uuid4().hex
        try:
            await self.pusher.keep(Push(A2A, out.id, out.url, MessageToJson(out), out), task,
                                   checked=True)
        except ReachError as exc:
            raise InvalidParamsError(str(exc), data={"code": "invalid_params"}) from None
        return out

    async def get(self, task_id: str, config_id: str) -> pb.TaskPushNotificationConfig:
        found = {c.id: c for c in await self.of(task_id)}.get(config_id)
        if found is None:
            raise InvalidParamsError(f"no push notification config {config_id!r} for task "
                                     f"{task_id!r}")
        return found

    async def of(self, task_id: str) -> list[pb.TaskPushNotificationConfig]:
        """The task's A2A configs not sent yet (in a cluster, every node's)."""
        return [push.spec for push in await self.pusher.of(task_id, A2A)]

    async def delete(self, task_id: str, config_id: str) -> None:
        if not config_id.startswith(RESERVED):  # (a task webhook's is not the A2A door's)
            await self.pusher.delete(task_id, config_id)
