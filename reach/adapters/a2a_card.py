"""What an A2A agent's card and tasks mean to Reach: plain functions, no I/O.

- ``capability_table``: each skill of a card → one capability entry (``declare``'s table);
- ``message_for``: one call's params → the A2A ``Message`` that carries them, under the
  ``message_id`` every attempt of one Reach task repeats;
- ``updated``: the task as known after one event of ``SendMessage``'s answer or stream;
- ``outcome``: a finished A2A task (or a direct ``Message`` reply) → a result, or the
  ``AdapterAnswer`` that makes it a ``TaskError`` at the caller.

A skill's params schema: A2A 1.0's ``AgentSkill`` has no field for one, so a card may carry
them in an extension of its capabilities (``SKILL_EXTENSION``, params ``{skill id: {"params":
schema, "returns": schema, "idempotent": bool, "scope": "read"|"write", "streaming": bool,
…}}``, the fields ``DECLARABLE`` names);
a skill it does not name takes params ``{"type": "object"}``, is not idempotent (a fault is
dead-lettered, never run twice) and is a ``write``. The constructor's ``skills=`` overrides
either, per skill id.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from a2a.helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types.a2a_pb2 import AgentCard, Message, Part, Role, StreamResponse, Task, TaskState
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
from pydantic import TypeAdapter, ValidationError

from reach.adapters.base import AdapterAnswer
from reach.wire.bounds import Intent, Tag, Text

SKILL_EXTENSION = "https://agent-reach.dev/a2a/skills/v1"
OBJECT: dict[str, Any] = {"type": "object"}
# What a skill's extension entry (and ``skills=``) may set; the rest of a spec is Reach's.
DECLARABLE = frozenset({"params", "returns", "idempotent", "scope", "latency_ms", "hedge",
                        "weight", "fallback", "warmup_s", "max_concurrency", "streaming"})
TERMINAL = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED,
                      TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_CANCELED,
                      TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
_TAG, _INTENT, _TEXT = TypeAdapter(Tag), TypeAdapter(Intent), TypeAdapter(Text)


def _fitting(adapter: TypeAdapter[str], values: Iterable[str], most: int) -> list[str]:
    """The values Reach's bounds accept (a remote card's odd tag is left out, not fatal)."""
    out: list[str] = []
    for value in values:
        try:
            out.append(adapter.validate_python(value))
        except ValidationError:
            continue
        if len(out) == most:
            break
    return out


def declared_by_card(card: AgentCard) -> dict[str, dict[str, Any]]:
    """The per-skill declarations the card's ``SKILL_EXTENSION`` carries (empty: none)."""
    for extension in card.capabilities.extensions:
        if extension.uri == SKILL_EXTENSION and extension.HasField("params"):
            table = MessageToDict(extension.params)
            return {sid: {k: v for k, v in entry.items() if k in DECLARABLE}
                    for sid, entry in table.items() if isinstance(entry, dict)}
    return {}


def capability_table(agent: str, card: AgentCard, overrides: Mapping[str, Mapping[str, Any]],
                     strict: bool = True) -> dict[str, dict[str, Any]]:
    """``declare``'s table for ``card``: capability ``agent.<skill id>`` per skill, carrying
    the skill id (``skill``) for the call. Raises ``ValueError`` for a card with no skills,
    and (``strict``) for ``overrides`` naming a skill the card does not list."""
    from_card = declared_by_card(card)
    table: dict[str, dict[str, Any]] = {}
    for skill in card.skills:
        declared = {**from_card.get(skill.id, {}), **overrides.get(skill.id, {})}
        for key in ("params", "returns"):  # protobuf Struct numbers come back as floats
            if isinstance(declared.get(key), dict):
                declared[key] = whole(declared[key])
        description = skill.description or skill.name
        try:
            description = _TEXT.validate_python(description[:5000])
        except ValidationError:
            description = ""
        table[f"{agent}.{skill.id}"] = {
            "params": dict(OBJECT), "scope": "write", "idempotent": False, **declared,
            "skill": skill.id, "description": description,
            "tags": _fitting(_TAG, skill.tags, 100),
            "intents": _fitting(_INTENT, skill.examples, 100)}
    if not table:
        raise ValueError(f"agent {agent!r}: the A2A agent's card lists no skills")
    unknown = sorted(set(overrides) - {s.id for s in card.skills})
    if unknown and strict:
        raise ValueError(f"agent {agent!r}: skills= names {unknown}, which the card does "
                         f"not list")
    return table


_MESSAGE_IDS = uuid.uuid5(uuid.NAMESPACE_URL, "https://agent-reach.dev/a2a/message-id/v1")


def message_id(task_id: str, idempotency_key: str) -> str:
    """The message id of every attempt of one Reach task: a retry sends the same message
    again, so an agent that keys on the message id (a Reach A2A door does: docs/a2a.md)
    joins the run under way, or answers the finished one, instead of running it twice. The
    key is in it too: a task replayed with new params carries a revised key, so a new id."""
    return str(uuid.uuid5(_MESSAGE_IDS, f"{task_id}\n{idempotency_key}"))


def message_for(skill: str, params: Mapping[str, Any], meta: Mapping[str, Any],
                message_id: str | None = None) -> Message:
    """The user message of one call (``message_id``: a random one when not given). Params
    that are just ``{"text": "..."}`` go as a text part (what a conversational agent
    reads); any other params go as one data part. The skill id and Reach's ids ride in the
    message's metadata (``skill``, ``reach``)."""
    text = params.get("text")
    part: Part = (new_text_part(text) if len(params) == 1 and isinstance(text, str)
                  else new_data_part(dict(params)))
    message = Message(role=Role.ROLE_USER, message_id=message_id or str(uuid.uuid4()),
                      parts=[part])
    message.metadata.update({"skill": skill, "reach": dict(meta)})
    return message


def whole(value: Any) -> Any:
    """``value`` with every float that is a whole number made an int again: a data part is a
    protobuf ``Value``, whose numbers are all doubles (``3`` arrives as ``3.0``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole(v) for v in value]
    return value


def content(parts: Iterable[Part]) -> Any:
    """The value of some parts: one data part's data (several: a list of them); else their
    text joined by newlines; None when there is neither."""
    parts = list(parts)
    data = get_data_parts(parts)
    if data:
        return whole(data[0] if len(data) == 1 else data)
    texts = get_text_parts(parts)
    return "\n".join(texts) if texts else None


def updated(task: Task | None, event: StreamResponse) -> Task:
    """The task as known after ``event`` (a task, a status update or an artifact update,
    as ``SendMessage`` answers and ``SendStreamingMessage`` streams them): artifacts are
    gathered by id, a chunk marked ``append`` extends its artifact's parts."""
    kind = event.WhichOneof("payload")
    if kind == "task":
        fresh = Task()
        fresh.CopyFrom(event.task)
        return fresh
    if task is None:  # an update before the task itself: start from its id
        update = event.status_update if kind == "status_update" else event.artifact_update
        task = Task(id=update.task_id, context_id=update.context_id)
    if kind == "status_update":
        task.status.CopyFrom(event.status_update.status)
    elif kind == "artifact_update":
        chunk = event.artifact_update
        for artifact in task.artifacts:
            if artifact.artifact_id == chunk.artifact.artifact_id:
                if chunk.append:
                    artifact.parts.extend(chunk.artifact.parts)
                else:
                    artifact.CopyFrom(chunk.artifact)
                break
        else:
            task.artifacts.append(chunk.artifact)
    return task


def reply_result(message: Message) -> Any:
    """The result of an agent that answered with a message and no task."""
    return content(message.parts)


def _said(task: Task) -> str:
    said = content(task.status.message.parts) if task.status.HasField("message") else None
    return said if isinstance(said, str) else ("" if said is None else repr(said))


def outcome(task: Task) -> Any:
    """The result of a task in a terminal (or interrupted) state, or raise the answer.

    COMPLETED → its artifacts' content (all their parts, in order), else the content of its
    final status message. FAILED, REJECTED, CANCELED (not by Reach), INPUT_REQUIRED and
    AUTH_REQUIRED → ``AdapterAnswer``: the agent's own word, final and not retried (Reach
    cannot hold a conversation for its caller)."""
    state = task.status.state
    if state == TaskState.TASK_STATE_COMPLETED:
        parts = [part for artifact in task.artifacts for part in artifact.parts]
        if parts:
            return content(parts)
        return content(task.status.message.parts) if task.status.HasField("message") else None
    label = TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")
    said = _said(task)
    raise AdapterAnswer(said or f"the A2A agent's task ended {label}", a2a_state=label,
                        a2a_task=task.id)
