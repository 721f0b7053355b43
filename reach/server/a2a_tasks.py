"""Reach tasks as A2A tasks, A2A messages as Reach submits (pure conversions).

- A message asks for work in one of two ways: a data part ``{"capability": name, "params":
  {...}}`` names the capability; otherwise its text parts are an intent, routed as
  ``POST /v1/intent`` routes one (a data part's ``params`` go with it). ``request`` builds the
  ``SubmitRequest``; the message id is the idempotency key, so a client that resends the same
  message gets the same task, and the work runs once.
- Protobuf's ``Value`` has one number type, so every integer arrives as a float.
  ``coerce`` turns an integral float back into an int wherever the params schema says
  ``integer`` (before Reach's own schema check, which would refuse ``3.0`` for an integer).
- A task: the A2A task id is the Reach task id, its context id the Reach trace id, its
  history the request (a user message with the data part above), its state from
  ``STATES``, a succeeded task's result one artifact named ``result`` holding a data part,
  a failed task's error the status message (its text, and the error as a data part).
- A Reach error raised before any task exists (no route, not permitted, bad params, no
  capacity) is a JSON-RPC error from ``fault``; its ``data`` carries Reach's ``code``.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict, ParseDict  # type: ignore[import-untyped]
from google.protobuf.struct_pb2 import Value  # type: ignore[import-untyped]

from reach.core.tasks import SubmitRequest, Task, TaskState
from reach.server.front_models import Headers

RESULT = "result"  # the artifact holding a succeeded task's result
CHUNKS = "chunks"  # the artifact a streaming task's chunks are appended to
KEY = re.compile(r"[A-Za-z0-9._:~-]{1,200}")  # message ids taken as idempotency keys
STATES: dict[TaskState, int] = {
    TaskState.PENDING: pb.TASK_STATE_SUBMITTED,
    TaskState.QUEUED: pb.TASK_STATE_SUBMITTED,
    TaskState.DISPATCHED: pb.TASK_STATE_WORKING,
    TaskState.RUNNING: pb.TASK_STATE_WORKING,
    TaskState.RETRYING: pb.TASK_STATE_WORKING,
    TaskState.SUCCEEDED: pb.TASK_STATE_COMPLETED,
    TaskState.FAILED: pb.TASK_STATE_FAILED,
    TaskState.DEAD: pb.TASK_STATE_FAILED,
    TaskState.CANCELLED: pb.TASK_STATE_CANCELED,
}
# Reach's codes for errors before a task exists, and the A2A error each becomes
FAULTS: dict[str, type[A2AError]] = {
    "invalid_params": InvalidParamsError, "protocol_error": InvalidParamsError,
    "no_route": UnsupportedOperationError, "unauthorized": UnsupportedOperationError,
}


# ------------------------------------------------------------ values


def value(obj: Any) -> Value:
    """A JSON value as a protobuf ``Value``."""
    return ParseDict(obj, Value())


def plain(v: Value) -> Any:
    """A protobuf ``Value`` as a JSON value (numbers are floats)."""
    return MessageToDict(v)


def coerce(obj: Any, schema: Any, defs: dict[str, Any] | None = None) -> Any:
    """``obj`` with every integral float made an int where ``schema`` says ``integer``
    (through properties, additionalProperties, items, prefixItems, anyOf/oneOf/allOf and
    local ``$ref``s); everything else unchanged."""
    if not isinstance(schema, dict):
        return obj
    if defs is None:
        defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target = defs.get(ref.rsplit("/", 1)[-1])
        if isinstance(target, dict):
            obj = coerce(obj, target, defs)
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key, ()) if isinstance(schema.get(key), list) else ():
            obj = coerce(obj, sub, defs)
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if isinstance(obj, float) and "integer" in kinds and obj.is_integer() \
            and "number" not in kinds:
        return int(obj)
    if isinstance(obj, dict):
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        extra = schema.get("additionalProperties")
        return {k: coerce(v, props.get(k, extra), defs) for k, v in obj.items()}
    if isinstance(obj, list):
        items = schema.get("items")
        prefix = schema.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        return [coerce(v, prefix[i] if i < len(prefix) else items, defs)
                for i, v in enumerate(obj)]
    return obj


# ------------------------------------------------------------ messages in


def ask(message: pb.Message) -> tuple[str, dict[str, Any], str | None]:
    """What a message asks for: (capability or "", params, intent or None). A message whose
    metadata names a ``skill`` (what ``reach.adapters.A2AAgent`` sends, so one Reach can
    attach another) calls that capability with its data part as the params, or its text
    as ``{"text": ...}``."""
    capability, params, texts, whole = "", {}, [], None
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            data = plain(part.data)
            if isinstance(data, dict):
                whole = data if whole is None else whole
                if isinstance(data.get("capability"), str):
                    capability = data["capability"]
                if isinstance(data.get("params"), dict):
                    params = data["params"]
    intent = " ".join(t.strip() for t in texts if t.strip()) or None
    skill = message.metadata["skill"] if "skill" in message.metadata else None
    if isinstance(skill, str) and skill and not capability:
        return skill, whole if whole is not None else (
            {"text": intent} if intent is not None else {}), None
    if not capability and intent is None:
        raise InvalidParamsError(
            "the message names no work: send a data part {\"capability\": NAME, \"params\": "
            "{...}} or a text part (an intent)")
    return capability, params, None if capability else intent


def request(message: pb.Message, caller: str, schema: dict[str, Any] | None,
            headers: Headers) -> SubmitRequest:
    """The ``SubmitRequest`` for a message (``schema``: the named capability's params
    schema, if it is known here; ``headers``: the REST door's, as it checked them: the
    Idempotency-Key, else the message id, is the key; X-Reach-Timeout the timeout)."""
    capability, params, intent = ask(message)
    if schema is not None:
        params = coerce(params, schema)
    key = headers.idempotency_key
    if key is None and KEY.fullmatch(message.message_id):
        key = message.message_id
    return SubmitRequest(capability, params, caller, key, 5, headers.timeout,
                         traceparent=headers.traceparent, intent=intent)


def fault(error: dict[str, Any], task_id: str | None = None) -> A2AError:
    """The A2A error for a Reach error (its wire form); ``data`` carries Reach's ``code``,
    and the task id when there is one (a task accepted, then not finished: GetTask it)."""
    code = str(error.get("code", "reach_error"))
    data = {"code": code}
    details = error.get("details") or {}
    if isinstance(details, dict) and details.get("task_id"):
        data["task_id"] = str(details["task_id"])
    if task_id is not None:
        data["task_id"] = task_id
    return FAULTS.get(code, InternalError)(str(error.get("message", "the call failed")),
                                            data=data)


# ------------------------------------------------------------ listing


def reach_states(state: int) -> list[str]:
    """The Reach states an A2A state filter stands for (none: unknown or never Reach's)."""
    return sorted(s.value for s, a in STATES.items() if a == state)


def page_token(created_at: float, task_id: str) -> str:
    """The cursor after the task created at ``created_at`` with id ``task_id`` in a
    newest-first listing."""
    raw = json.dumps([created_at, task_id]).encode()
    return base64.urlsafe_b64encode(raw).decode()


def cursor(token: str) -> tuple[float, str] | None:
    """A page token read back (None: the first page); a malformed one is invalid params."""
    if not token:
        return None
    try:
        at, last = json.loads(base64.urlsafe_b64decode(token.encode()))
        return float(at), str(last)
    except (ValueError, TypeError) as exc:
        raise InvalidParamsError(f"page_token is not one this coordinator gave ({exc})") from None


# ------------------------------------------------------------ tasks out


def asked(task: Task) -> pb.Message:
    """The request a task was made from, as the user message that asked for it."""
    env = task.envelope
    return pb.Message(message_id=f"{task.task_id}-ask", context_id=env.trace_id,
                      task_id=task.task_id, role=pb.ROLE_USER,
                      parts=[pb.Part(data=value({"capability": env.capability,
                                                 "params": env.params}))])


def status(task: Task) -> pb.TaskStatus:
    """A task's status, stamped with the task's last change (what ListTasks'
    ``status_timestamp_after`` compares); a failed one's message says why (text, and the
    error as data)."""
    out = pb.TaskStatus(state=STATES[task.state])  # type: ignore[arg-type]
    out.timestamp.FromNanoseconds(int(task.updated_at * 1e9))
    if task.state in (TaskState.FAILED, TaskState.DEAD, TaskState.CANCELLED):
        error = task.error or {"code": "task_failed", "message": "task failed"}
        out.message.CopyFrom(pb.Message(
            message_id=f"{task.task_id}-error", context_id=task.envelope.trace_id,
            task_id=task.task_id, role=pb.ROLE_AGENT,
            parts=[pb.Part(text=str(error.get("message", ""))),
                   pb.Part(data=value(error))]))
    return out


def result_artifact(result: Any) -> pb.Artifact:
    return pb.Artifact(artifact_id=RESULT, name=RESULT, parts=[pb.Part(data=value(result))])


def a2a_task(task: Task, history: bool = True) -> pb.Task:
    """A Reach task as an A2A task."""
    out = pb.Task(id=task.task_id, context_id=task.envelope.trace_id, status=status(task))
    if history:
        out.history.append(asked(task))
    if task.state is TaskState.SUCCEEDED:
        out.artifacts.append(result_artifact(task.result))
    return out


def chunk_update(task: Task, seq: int, chunk: Any) -> pb.TaskArtifactUpdateEvent:
    """A streaming task's chunk: appended to the ``chunks`` artifact (the first one opens it)."""
    return pb.TaskArtifactUpdateEvent(
        task_id=task.task_id, context_id=task.envelope.trace_id, append=seq > 0,
        artifact=pb.Artifact(artifact_id=CHUNKS, name=CHUNKS, parts=[pb.Part(data=value(chunk))]))


def final_events(task: Task) -> list[pb.TaskArtifactUpdateEvent | pb.TaskStatusUpdateEvent]:
    """The last events of a stream: the result artifact (when it succeeded), then the
    terminal status."""
    ctx = task.envelope.trace_id
    out: list[pb.TaskArtifactUpdateEvent | pb.TaskStatusUpdateEvent] = []
    if task.state is TaskState.SUCCEEDED:
        out.append(pb.TaskArtifactUpdateEvent(task_id=task.task_id, context_id=ctx,
                                              artifact=result_artifact(task.result),
                                              last_chunk=True))
    out.append(pb.TaskStatusUpdateEvent(task_id=task.task_id, context_id=ctx,
                                        status=status(task)))
    return out
