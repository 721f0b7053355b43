"""docs/protocol.md §7 (``returns``), §6 and §8: a capability may declare the schema of its
results; a result that breaks it reaches the caller as the agent's fault (``bad_result``),
never as a result. Also: every field of the capability spec is in §7's table."""

from __future__ import annotations

import re

from docpage import section
from rawpeer import Peer, agent, answer, caller, submit

from reach import Reach
from reach.wire.protocol import CapabilitySpec

RETURNS = {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}


def test_the_capability_spec_table_lists_every_field() -> None:
    table = section("## 7. The capability spec", "**Name normalization.**")
    documented = set(re.findall(r"^\| `(\w+)` \|", table, flags=re.M))
    assert documented == set(CapabilitySpec.model_fields)


async def test_a_result_that_breaks_returns_is_a_bad_result_fault(reach: Reach) -> None:
    worker = await agent(reach.url, "renamer", [{"name": "conf.quote", "returns": RETURNS}],
                         version="2")
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.quote"))
    await answer(worker, await worker.expect("invoke"), {"amount": 3})
    error = (await boss.outcome(1))["error"]
    assert error["code"] == "task_failed"
    remote = error["details"]["remote"]
    assert remote["code"] == "bad_result" and remote["agent"] == "renamer"
    assert remote["details"]["answer"] is False and remote["details"]["version"] == "2"
    assert remote["details"]["capability"] == "conf.quote"
    assert remote["details"]["errors"] == [
        {"path": "$", "message": "result must contain ['total'] properties"}]


async def test_a_result_that_fits_returns_is_the_answer(reach: Reach) -> None:
    worker = await agent(reach.url, "fitter", [{"name": "conf.fit", "returns": RETURNS}])
    boss = await caller(reach.url)
    await boss.send(submit(1, "conf.fit"))
    await answer(worker, await worker.expect("invoke"), {"total": 3})
    assert (await boss.outcome(1))["result"] == {"total": 3}


async def test_an_unsafe_returns_schema_refuses_the_registration(reach: Reach) -> None:
    peer = await Peer.open(reach.url)
    await peer.send({"v": 1, "type": "register", "name": "fetcher", "capabilities": [
        {"name": "conf.remote", "returns": {"$ref": "https://example.com/r.json"}}]})
    refusal = await peer.expect("error")
    assert refusal["error"]["code"] == "invalid_params"
    assert refusal["error"]["details"]["capability"] == "conf.remote"
    assert "only local" in refusal["error"]["details"]["reason"]
    code, _ = await peer.closed()
    assert code == 1008
