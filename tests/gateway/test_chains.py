"""Result chains (``then``) end to end on a real coordinator, real agents and a real client
over loopback websockets (reach.gateway.chaining, docs/chains.md): each step a task of its own
in one trace, results mapped by JSON pointers, a failing step named, replayed and carried on,
and a bad chain refused at submit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from reach import Admin, Agent, Client, Context, Reach, TaskError
from reach.errors import Cancelled, InvalidParams, NoRoute, ReachError, Unauthorized
from reach.testing import wait_until

FAST = {"heartbeat_interval": 0.05, "recovery_grace": 0.5, "drain_timeout": 0.2}
ADMIN = "admin-token"


class Stack:
    """A coordinator, two agents (the analyst and the writer) and a caller."""

    def __init__(self, reach: Reach, client: Client, agents: list[Agent]) -> None:
        self.reach, self.client, self.agents = reach, client, agents
        self.runs: list[tuple[str, dict[str, Any]]] = []
        self.broken = False  # the writer's report.build fails while set
        self.held = asyncio.Event()  # set once report.hold runs (it runs until cancelled)


def _analyst(stack_runs: list[tuple[str, dict[str, Any]]]) -> Agent:
    agent = Agent("analyst", reconnect_base=0.005, reconnect_cap=0.02)

    @agent.capability("data.fetch", params={"type": "object"}, idempotent=True)
    async def fetch(region: str) -> dict[str, Any]:
        stack_runs.append(("data.fetch", {"region": region}))
        return {"region": region, "rows": [3, 4, 5], "meta": {"a/b": "slash", "n": 3}}

    @agent.capability("data.sum", params={"type": "object"}, idempotent=True)
    async def total(region: str, rows: list[int], meta: dict[str, Any]) -> dict[str, Any]:
        stack_runs.append(("data.sum", {"region": region}))
        return {"region": region, "total": sum(rows)}

    @agent.capability("data.count", params={"type": "object"}, idempotent=True)
    async def count(region: str, rows: list[int], meta: dict[str, Any]) -> int:
        stack_runs.append(("data.count", {}))
        return len(rows)

    return agent


def _writer(stack: Stack) -> Agent:
    agent = Agent("writer", reconnect_base=0.005, reconnect_cap=0.02)

    @agent.capability("report.build", params={"type": "object"}, idempotent=True)
    async def build(**params: Any) -> dict[str, Any]:
        stack.runs.append(("report.build", params))
        if stack.broken:
            raise RuntimeError("the template is missing")
        return {"report": f"{params.get('region')}: {params.get('total')}", "in": params}

    @agent.capability("report.hold", params={"type": "object"})
    async def hold(**params: Any) -> None:
        stack.held.set()
        await asyncio.Event().wait()

    @agent.capability("report.reject", params={"type": "object"})
    async def reject(**params: Any) -> None:
        raise TaskError("not this one")

    return agent


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    reach = await Reach.start(max_retries=0, admin_token=ADMIN, **FAST)
    client = await Client.connect(reach.url, caller="planner")
    s = Stack(reach, client, [])
    s.agents = [_analyst(s.runs), _writer(s)]
    for agent in s.agents:
        await agent.connect(reach.url)
    try:
        yield s
    finally:
        await client.close()
        for agent in s.agents:
            await agent.close()
        await reach.stop()


async def test_a_three_step_chain_across_two_agents_is_one_trace_ending_in_the_last_result(
        stack: Stack) -> None:
    handle = await stack.client.submit("data.fetch", {"region": "east"},
                                       then=["data.sum", "report.build"])
    assert await handle.result(timeout=5) == {
        "report": "east: 12", "in": {"region": "east", "total": 12}}
    assert [c for c, _ in stack.runs] == ["data.fetch", "data.sum", "report.build"]
    head = await stack.client.status(handle.task_id)
    assert head["state"] == "succeeded" and head["result"]["rows"] == [3, 4, 5]
    assert head["then"] == ["data.sum", "report.build"]
    assert head["chain"]["head"] == handle.task_id and head["chain"]["step"] == 1
    assert head["chain"]["of"] == 3
    second = await stack.client.status(head["chain"]["next"])
    third = await stack.client.status(second["chain"]["next"])
    assert second["parent_task_id"] == handle.task_id
    assert third["parent_task_id"] == second["task_id"]
    assert {v["trace_id"] for v in (head, second, third)} == {handle.trace_id}
    assert {v["caller"] for v in (head, second, third)} == {"planner"}
    assert (second["chain"]["step"], third["chain"]["step"]) == (2, 3)
    assert "next" not in third["chain"] and third["result"]["report"] == "east: 12"
    # Each step's key derives from the chain's (the head's: the SDK gives each submit one).
    assert second["idempotency_key"] == f"{head['idempotency_key']}#2"
    assert third["idempotency_key"] == f"{head['idempotency_key']}#3"
    # One trace, each step nested under the one before (as the dashboard's timeline draws it).
    timeline = stack.reach.trace(handle.trace_id).tasks
    assert [(t["task_id"], t["depth"], t["state"]) for t in timeline] == [
        (handle.task_id, 0, "succeeded"), (second["task_id"], 1, "succeeded"),
        (third["task_id"], 2, "succeeded")]
    hops = stack.reach.trace(handle.trace_id).hops
    assert [h["task_id"] for h in hops if h["phase"] == "done"] == [
        handle.task_id, second["task_id"], third["task_id"]]  # one end each: a link is a note


async def test_a_call_with_then_answers_with_the_chains_last_result(stack: Stack) -> None:
    """``call`` (one frame each way, its ack folded into the answer) follows a chain as
    ``submit``'s handle does; a step that fails is the call's error, naming the step."""
    done = await stack.client.call("data.fetch", {"region": "north"},
                                   then=["data.sum", "report.build"], timeout=5)
    assert done == {"report": "north: 12", "in": {"region": "north", "total": 12}}
    stack.broken = True
    with pytest.raises(ReachError) as failed:
        await stack.client.call("data.fetch", {"region": "south"}, then="report.build",
                                timeout=5)
    assert failed.value.message.startswith("step 2 of 2 (report.build): ")
    assert failed.value.details["chain"]["step"] == 2


async def test_a_map_takes_each_param_from_a_json_pointer(stack: Stack) -> None:
    handle = await stack.client.submit(
        "data.fetch", {"region": "west"}, idempotency_key="weekly",
        then=[{"capability": "report.build",
               "map": {"region": "/region", "total": "/rows/2", "odd": "/meta/a~1b",
                       "all": ""}}])
    out = await handle.result(timeout=5)
    assert out["in"] == {"region": "west", "total": 5, "odd": "slash",
                         "all": {"region": "west", "rows": [3, 4, 5],
                                 "meta": {"a/b": "slash", "n": 3}}}
    head = await stack.client.status(handle.task_id)
    last = await stack.client.status(head["chain"]["next"])
    assert last["idempotency_key"] == "weekly#2"  # the chain's key is the caller's own


async def test_a_pointer_that_finds_nothing_stops_the_chain_naming_the_step(
        stack: Stack) -> None:
    stopped: list[Any] = []
    stack.reach.gateway.chains.on_stop = stopped.append  # (what the webhooks listen to)
    handle = await stack.client.submit(
        "data.fetch", {"region": "north"},
        then=["data.sum", {"capability": "report.build", "map": {"x": "/missing"}}])
    with pytest.raises(InvalidParams) as caught:
        await handle.result(timeout=5)
    assert caught.value.message.startswith("step 3 of 3 (report.build): ")
    assert "'/missing'" in caught.value.message
    assert caught.value.details["chain"] == {"head": handle.task_id, "step": 3, "of": 3}
    head = await stack.client.status(handle.task_id)
    second = await stack.client.status(head["chain"]["next"])
    assert second["state"] == "succeeded"
    assert second["chain"]["stopped"]["code"] == "invalid_params"
    assert [c for c, _ in stack.runs] == ["data.fetch", "data.sum"]  # nothing else ran
    assert [(t.task_id, t.state.value, t.error["message"]) for t in stopped] == [
        (second["task_id"], "failed", caught.value.message)]


async def test_a_result_that_is_not_an_object_is_not_params(stack: Stack) -> None:
    handle = await stack.client.submit("data.fetch", {"region": "s"},
                                       then=["data.count", "report.build"])
    with pytest.raises(InvalidParams, match=r"^step 3 of 3 \(report.build\): .*a number, "
                                            r"not a JSON object"):
        await handle.result(timeout=5)
    # ... though a map can take it whole.
    handle = await stack.client.submit(
        "data.fetch", {"region": "s"},
        then=["data.count", {"capability": "report.build", "map": {"total": ""}}])
    assert (await handle.result(timeout=5))["in"] == {"total": 3}


async def test_step_two_fails_its_letter_names_it_and_replaying_it_finishes_the_chain(
        stack: Stack) -> None:
    stack.broken = True
    handle = await stack.client.submit(
        "data.fetch", {"region": "east"},
        then=["report.build", {"capability": "data.sum",
                               "map": {"region": "/in/region", "rows": "/in/rows",
                                       "meta": "/in/meta"}}])
    with pytest.raises(ReachError) as caught:
        await handle.result(timeout=5)
    assert caught.value.message.startswith("step 2 of 3 (report.build): ")
    assert "the template is missing" in caught.value.message
    assert caught.value.details["chain"] == {"head": handle.task_id, "step": 2, "of": 3}
    async with Admin.connect(stack.reach.url, token=ADMIN) as admin:  # the operator's view
        letters = await admin.dead_letters()
    assert len(letters) == 1
    letter = letters[0]
    assert letter["capability"] == "report.build"
    assert letter["error"]["message"].startswith("step 2 of 3 (report.build): ")
    assert letter["envelope"]["chain"] == {"head": handle.task_id, "step": 2, "of": 3}
    head = await stack.client.status(handle.task_id)
    assert head["chain"]["next"] == letter["task_id"]
    stack.broken = False
    async with Admin.connect(stack.reach.url, token=ADMIN) as admin:  # `reach replay ID`
        view = await admin.replay(letter["task_id"])
    assert view["state"] == "succeeded"
    # The chain went on from the replayed step: asked again, the handle follows it on.
    assert await handle.result(timeout=5) == {"region": "east", "total": 12}
    assert await stack.client.result(handle.task_id, timeout=5) == {"region": "east",
                                                                     "total": 12}
    step2 = await stack.client.status(letter["task_id"])
    step3 = await stack.client.status(step2["chain"]["next"])
    assert step3["state"] == "succeeded" and step3["chain"]["step"] == 3
    assert step3["parent_task_id"] == letter["task_id"]
    assert [c for c, _ in stack.runs] == ["data.fetch", "report.build", "report.build",
                                          "data.sum"]
    assert stack.reach.dead_letters() == []


async def test_a_bad_then_is_refused_at_submit(stack: Stack) -> None:
    client = stack.client
    for bad, error, words in [
        (["..."], InvalidParams, "then, step 2: capability name .* has no words"),
        ([{"capability": "report.build", "map": {"x": "no-slash"}}], InvalidParams,
         "JSON pointer"),
        ([{"capability": "report.build", "map": {"x": "/a~2"}}], InvalidParams, "~0 or ~1"),
        ([{"capability": "report.build", "extra": 1}], InvalidParams, "unknown field"),
        (["report.build"] * 9, InvalidParams, "at most 8"),
        (["nobody.declares"], NoRoute, "then, step 2: no agent declares"),
    ]:
        with pytest.raises(error, match=words):
            await client.submit("data.fetch", {"region": "e"}, then=bad)
    assert stack.runs == []


async def test_a_step_the_caller_may_not_call_is_refused_at_submit() -> None:
    reach = await Reach.start(tokens={"t-p": "planner", "t-a": "analyst", "t-w": "writer"},
                              permissions={"planner": ("data.*",)}, **FAST)
    runs: list[tuple[str, dict[str, Any]]] = []
    s = Stack(reach, await Client.connect(reach.url, caller="planner", token="t-p"), [])
    s.agents = [_analyst(runs), _writer(s)]
    try:
        s.agents[0].token, s.agents[1].token = "t-a", "t-w"
        for agent in s.agents:
            await agent.connect(reach.url)
        with pytest.raises(Unauthorized, match=r"then, step 3: caller 'planner' may not use "
                                               r"'report.build'"):
            await s.client.submit("data.fetch", {"region": "e"},
                                  then=["data.sum", "report.build"])
        handle = await s.client.submit("data.fetch", {"region": "e"}, then="data.sum")
        assert await handle.result(timeout=5) == {"region": "e", "total": 12}
        assert [c for c, _ in runs] == ["data.fetch", "data.sum"]
    finally:
        await s.client.close()
        for agent in s.agents:
            await agent.close()
        await reach.stop()


async def test_a_task_error_in_a_step_fails_the_chain_without_a_letter(stack: Stack) -> None:
    handle = await stack.client.submit("data.fetch", {"region": "e"},
                                       then=["report.reject", "report.build"])
    with pytest.raises(TaskError, match=r"^step 2 of 3 \(report.reject\): not this one"):
        await handle.result(timeout=5)
    head = await stack.client.status(handle.task_id)
    failed = await stack.client.status(head["chain"]["next"])
    assert failed["state"] == "failed" and "next" not in failed["chain"]
    assert stack.reach.dead_letters() == []
    assert [c for c, _ in stack.runs] == ["data.fetch"]


async def test_a_task_without_then_shows_no_chain(stack: Stack) -> None:
    handle = await stack.client.submit("data.fetch", {"region": "e"})
    await handle.result(timeout=5)
    view = await stack.client.status(handle.task_id)
    assert "chain" not in view and "then" not in view


async def test_a_cancelled_step_stops_the_chain_and_says_so(stack: Stack) -> None:
    handle = await stack.client.submit("data.fetch", {"region": "e"},
                                       then=["report.hold", "report.build"])
    await wait_until(lambda: stack.held.is_set(), timeout=5, interval=0.001)
    head = await stack.client.status(handle.task_id)
    await stack.client.cancel(head["chain"]["next"])
    with pytest.raises(Cancelled, match=r"^step 2 of 3 \(report.hold\): "):
        await handle.result(timeout=5)
    assert [c for c, _ in stack.runs] == ["data.fetch"]  # report.build never ran


async def test_a_chain_started_by_a_nested_call_joins_its_callers_trace(stack: Stack) -> None:
    nested = Agent("nester", reconnect_base=0.005, reconnect_cap=0.02)

    @nested.capability("plan.run", params={"type": "object"})
    async def plan(region: str, ctx: Context) -> Any:
        inner = await Client.connect(stack.reach.url, caller="nester")
        try:
            handle = await inner.submit("data.fetch", {"region": region}, then="data.sum",
                                        trace_id=ctx.trace_id, parent_task_id=ctx.task_id)
            return await handle.result(timeout=5)
        finally:
            await inner.close()

    await nested.connect(stack.reach.url)
    try:
        handle = await stack.client.submit("plan.run", {"region": "n"})
        assert await handle.result(timeout=5) == {"region": "n", "total": 12}
        timeline = stack.reach.trace(handle.trace_id).tasks
        assert [(t["capability"], t["depth"]) for t in timeline] == [
            ("plan.run", 0), ("data.fetch", 1), ("data.sum", 2)]
    finally:
        await nested.close()


async def test_a_next_step_refused_for_now_is_submitted_again() -> None:
    """The caller's limit of one unfinished task refuses the next step while its head is
    still finishing (``rejected``): it is tried again a moment later, and the chain ends."""
    reach = await Reach.start(max_caller_tasks=1, **FAST)
    runs: list[tuple[str, dict[str, Any]]] = []
    agent = _analyst(runs)
    await agent.connect(reach.url)
    client = await Client.connect(reach.url, caller="planner")
    try:
        handle = await client.submit("data.fetch", {"region": "e"}, then="data.sum")
        assert await handle.result(timeout=5) == {"region": "e", "total": 12}
        assert [c for c, _ in runs] == ["data.fetch", "data.sum"]
    finally:
        await client.close()
        await agent.close()
        await reach.stop()
