"""What an A2A card and task mean to Reach (reach.adapters.a2a_card): plain calls on the
SDK's own types, no server."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.helpers import new_data_part, new_text_message, new_text_part
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentSkill,
    Artifact,
    Message,
    Task,
    TaskState,
    TaskStatus,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Struct

from reach.adapters.a2a_card import (
    SKILL_EXTENSION,
    capability_table,
    message_for,
    message_id,
    outcome,
    reply_result,
    whole,
)
from reach.adapters.base import AdapterAnswer
from reach.server.a2a_tasks import KEY


def _card(*skills: AgentSkill, declared: dict[str, Any] | None = None) -> AgentCard:
    extensions = [] if declared is None else [
        AgentExtension(uri=SKILL_EXTENSION, params=ParseDict(declared, Struct()))]
    return AgentCard(name="c", skills=list(skills),
                     capabilities=AgentCapabilities(extensions=extensions))


def _task(state: int, *parts: Any, said: str | None = None) -> Task:
    status = TaskStatus(state=state)  # type: ignore[arg-type]
    if said is not None:
        status.message.CopyFrom(new_text_message(said))
    return Task(id="t1", status=status,
                artifacts=[Artifact(artifact_id="a", parts=list(parts))] if parts else [])


def test_each_skill_is_a_capability_with_the_card_s_declarations() -> None:
    card = _card(AgentSkill(id="lookup", name="Lookup", description="finds",
                            tags=["a", "bad\ntag", ""], examples=["find x", "two\nlines"]),
                 AgentSkill(id="write-it", name="Write it"),
                 declared={"lookup": {"params": {"type": "object", "maxProperties": 3},
                                      "idempotent": True, "scope": "read", "bogus": 1}})
    table = capability_table("r", card, {})
    assert set(table) == {"r.lookup", "r.write-it"}
    lookup = table["r.lookup"]
    assert lookup["params"] == {"type": "object", "maxProperties": 3}  # 3, not 3.0
    assert lookup["idempotent"] and lookup["scope"] == "read" and "bogus" not in lookup
    assert lookup["tags"] == ["a"] and lookup["intents"] == ["find x"]
    assert lookup["skill"] == "lookup" and lookup["description"] == "finds"
    plain = table["r.write-it"]
    assert plain["params"] == {"type": "object"} and not plain["idempotent"]
    assert plain["scope"] == "write" and plain["description"] == "Write it"
    # the constructor's word wins over the card's
    assert not capability_table("r", card, {"lookup": {"idempotent": False}})[
        "r.lookup"]["idempotent"]


def test_a_card_without_skills_or_overrides_of_unknown_skills_is_refused() -> None:
    with pytest.raises(ValueError, match="lists no skills"):
        capability_table("r", _card(), {})
    with pytest.raises(ValueError, match="'nope'"):
        capability_table("r", _card(AgentSkill(id="a")), {"nope": {}})


def test_params_go_as_a_data_part_and_a_lone_text_as_a_text_part() -> None:
    data = message_for("s", {"x": 1, "text": "t"}, {"task_id": "k"})
    assert [p.WhichOneof("content") for p in data.parts] == ["data"]
    assert MessageToDict(data.metadata) == {"skill": "s", "reach": {"task_id": "k"}}
    text = message_for("s", {"text": "hello"}, {})
    assert [p.text for p in text.parts] == ["hello"]
    assert message_for("s", {"text": 3}, {}).parts[0].HasField("data")


def test_every_attempt_of_a_task_sends_one_message_id() -> None:
    first = message_id("t-1", "alice/k-1")
    assert message_id("t-1", "alice/k-1") == first  # a retry: the same message again
    assert len({first, message_id("t-2", "alice/k-1"), message_id("t-1", "alice/k-1.r2"),
                message_id("t-1", "bob/k-1")}) == 4
    assert KEY.fullmatch(first)  # a Reach A2A door takes it as the idempotency key
    assert message_for("s", {}, {}, first).message_id == first
    assert message_for("s", {}, {}).message_id != message_for("s", {}, {}).message_id


def test_whole_numbers_come_back_as_integers() -> None:
    assert whole({"a": [1.0, 2.5, {"b": 3.0}], "c": True, "d": 1e300}) == {
        "a": [1, 2.5, {"b": 3}], "c": True, "d": 1e300}


def test_a_completed_task_s_result_is_its_artifacts() -> None:
    assert outcome(_task(TaskState.TASK_STATE_COMPLETED, new_data_part({"n": 2}))) == {"n": 2}
    assert outcome(_task(TaskState.TASK_STATE_COMPLETED, new_data_part(1),
                         new_data_part(2))) == [1, 2]
    assert outcome(_task(TaskState.TASK_STATE_COMPLETED, new_text_part("a"),
                         new_text_part("b"))) == "a\nb"
    assert outcome(_task(TaskState.TASK_STATE_COMPLETED, said="done")) == "done"
    assert outcome(_task(TaskState.TASK_STATE_COMPLETED)) is None
    assert reply_result(Message(parts=[new_data_part({"m": 1.0})])) == {"m": 1}


@pytest.mark.parametrize(("state", "label"), [
    (TaskState.TASK_STATE_FAILED, "failed"), (TaskState.TASK_STATE_REJECTED, "rejected"),
    (TaskState.TASK_STATE_CANCELED, "canceled"),
    (TaskState.TASK_STATE_INPUT_REQUIRED, "input-required"),
    (TaskState.TASK_STATE_AUTH_REQUIRED, "auth-required")])
def test_other_ends_are_answers_in_the_agent_s_words(state: int, label: str) -> None:
    with pytest.raises(AdapterAnswer, match="why not") as said:
        outcome(_task(state, said="why not"))
    assert said.value.details == {"a2a_state": label, "a2a_task": "t1"}
    with pytest.raises(AdapterAnswer, match=f"ended {label}"):
        outcome(_task(state))


def test_streamed_updates_fold_into_the_task() -> None:
    from a2a.types.a2a_pb2 import StreamResponse, TaskArtifactUpdateEvent, TaskStatusUpdateEvent

    from reach.adapters.a2a_card import updated

    def chunk(aid: str, value: Any, append: bool = False) -> StreamResponse:
        return StreamResponse(artifact_update=TaskArtifactUpdateEvent(
            task_id="t1", artifact=Artifact(artifact_id=aid, parts=[new_text_part(value)]),
            append=append))

    task = updated(None, chunk("a", "one"))  # an update before the task: its id is enough
    assert task.id == "t1"
    for event in (chunk("a", "two", append=True), chunk("b", "x"), chunk("b", "y"),
                  StreamResponse(status_update=TaskStatusUpdateEvent(
                      task_id="t1", status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED)))):
        task = updated(task, event)
    assert outcome(task) == "one\ntwo\ny"  # b was replaced, a appended to
    fresh = updated(task, StreamResponse(task=Task(id="t2")))
    assert fresh.id == "t2" and task.id == "t1"
