"""A chain over REST: ``then`` in ``POST /v1/tasks``, the head's view naming where its chain
went (``chain.next``), ``?wait=`` waiting for the task it names, and a bad ``then`` refused
before anything is accepted (docs/http-api.md, docs/chains.md)."""

from __future__ import annotations

from conftest import Front


async def test_a_chain_submitted_over_rest_is_followed_by_its_views(front: Front) -> None:
    status, accepted, _ = await front.post("/v1/tasks", {
        "capability": "echo.run", "params": {"region": "east", "quarter": "Q3"},
        "then": [{"capability": "sales.query",
                  "map": {"region": "/echo/region", "quarter": "/echo/quarter"}}]})
    assert status == 202
    head_id = accepted["task_id"]
    # ?wait= waits for the task it names: the head, whose view then names the next step.
    status, head, _ = await front.get(f"/v1/tasks/{head_id}?wait=5")
    assert status == 200 and head["state"] == "succeeded"
    assert head["result"] == {"echo": {"region": "east", "quarter": "Q3"}}
    assert head["then"] == [{"capability": "sales.query",
                             "map": {"region": "/echo/region", "quarter": "/echo/quarter"}}]
    assert head["chain"]["head"] == head_id and head["chain"]["of"] == 2
    status, last, _ = await front.get(f"/v1/tasks/{head['chain']['next']}?wait=5")
    assert status == 200 and last["state"] == "succeeded"
    assert last["result"] == {"region": "east", "quarter": "Q3", "total": 42}
    assert last["chain"] == {"head": head_id, "step": 2, "of": 2}
    assert last["trace_id"] == head["trace_id"] and last["parent_task_id"] == head_id
    assert last["caller"] == head["caller"] == "http"


async def test_a_bad_then_is_refused_with_nothing_accepted(front: Front) -> None:
    for then, code in [
        ([{"capability": "sales.query", "map": {"region": "east"}}], "invalid_params"),
        (["no.such"], "no_route"),
        (["echo.run"] * 9, "invalid_params"),
    ]:
        status, body, _ = await front.post("/v1/tasks", {"capability": "echo.run",
                                                         "then": then})
        assert (status, body["code"]) == ({"no_route": 404}.get(code, 422), code), body
    assert front.reach.gateway.live == {}
