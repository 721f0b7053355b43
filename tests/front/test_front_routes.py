"""Each route of the REST front door, on its happy path, through a real coordinator and a
real websocket agent (reach.Agent): what a caller that is not Python gets."""

from __future__ import annotations

import asyncio

from front.conftest import Front

from reach import Client, Reach

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE}-00f067aa0ba902b7-01"


async def test_http_url_is_a_second_port_beside_the_websocket_one(front: Front) -> None:
    reach = front.reach
    assert reach.http_url == f"http://127.0.0.1:{reach.front.port}"  # type: ignore[union-attr]
    assert reach.front is not None and reach.front.port not in (0, reach.port)
    status, body, _ = await front.get("/healthz")
    assert (status, body) == (200, {"status": "ok", "agents": 1, "capabilities": 6})


async def test_http_port_none_disables_the_front_door() -> None:
    async with Reach.start(heartbeat_interval=0.05, http_port=None) as reach:
        assert reach.http_url is None and reach.front is None


async def test_call_answers_the_result_with_its_task_and_trace(front: Front) -> None:
    status, body, r = await front.post("/v1/call/echo.run", {"text": "hi"},
                                       headers={"traceparent": PARENT})
    assert status == 200
    assert body["result"] == {"echo": {"text": "hi"}} and body["capability"] == "echo.run"
    assert body["trace_id"] == TRACE  # the caller's W3C trace names the task's trace
    assert r.headers["X-Reach-Task-Id"] == body["task_id"]
    # The traceparent returned names this task as the parent span, in the caller's trace.
    assert r.headers["traceparent"] == f"00-{TRACE}-{body['task_id'][:16]}-01"
    assert front.reach.trace(TRACE)[0]["task_id"] == body["task_id"]


async def test_call_without_a_body_sends_empty_params_and_a_name_is_normalized(
        front: Front) -> None:
    status, body, _ = await front.post("/v1/call/EchoRun")
    assert (status, body["result"], body["capability"]) == (200, {"echo": {}}, "echo.run")


async def test_submit_is_202_once_stored_then_status_gives_the_result(front: Front) -> None:
    status, accepted, r = await front.post("/v1/tasks", {"capability": "slow.run",
                                                         "params": {"seconds": 0.2}})
    assert status == 202 and accepted["duplicate"] is False
    task_id = accepted["task_id"]
    assert r.headers["Location"] == f"/v1/tasks/{task_id}" == accepted["status_url"]
    # Acknowledged means stored: the row is in the store already.
    assert await front.reach.store.get(task_id) is not None
    status, view, _ = await front.get(f"/v1/tasks/{task_id}")
    assert status == 200 and view["state"] in ("pending", "dispatched", "running")
    status, view, _ = await front.get(f"/v1/tasks/{task_id}?wait=5")  # long-poll
    assert status == 200 and view["state"] == "succeeded"
    assert view["result"] == {"slept": 0.2} and view["caller"] == "http"
    assert view["attempts"][0]["agent"] == "worker"


async def test_idempotency_key_returns_the_first_task(front: Front) -> None:
    key = {"Idempotency-Key": "order-77"}
    first = await front.post("/v1/tasks", {"capability": "echo.run", "params": {"n": 1}},
                             headers=key)
    again = await front.post("/v1/tasks", {"capability": "echo.run", "params": {"n": 1}},
                             headers=key)
    assert first[0] == again[0] == 202
    assert again[1]["task_id"] == first[1]["task_id"] and again[1]["duplicate"] is True
    # A synchronous call with the same key is answered with that task's result, not run.
    status, body, _ = await front.post("/v1/call/echo.run", {"n": 2}, headers=key)
    assert status == 200 and body["task_id"] == first[1]["task_id"]
    assert body["result"] == {"echo": {"n": 1}}
    assert front.reach.agents()[0]["calls"] == 1
    # The key is the caller's own: another caller's same key is another task.
    other = await front.post("/v1/tasks", {"capability": "echo.run", "params": {"n": 1}},
                             headers={**key, "X-Reach-Caller": "someone-else"})
    assert other[1]["task_id"] != first[1]["task_id"] and other[1]["duplicate"] is False


async def test_concurrent_duplicates_run_once(front: Front) -> None:
    key = {"Idempotency-Key": "burst-1"}
    answers = await asyncio.gather(*(front.post("/v1/call/slow.run", {"seconds": 0.1},
                                                headers=key) for _ in range(8)))
    assert {a[0] for a in answers} == {200}
    assert len({a[1]["task_id"] for a in answers}) == 1
    assert front.reach.agents()[0]["calls"] == 1


async def test_intent_routes_to_the_capability_it_names(front: Front) -> None:
    status, body, _ = await front.post("/v1/intent", {"intent": "please echo this back",
                                                      "params": {"w": "x"}})
    assert status == 200 and body["capability"] == "echo.run"
    assert body["result"] == {"echo": {"w": "x"}}


async def test_capabilities_list_schemas_and_who_serves_them(front: Front) -> None:
    status, body, _ = await front.get("/v1/capabilities")
    assert status == 200 and body["caller"] == "http"
    caps = {c["name"]: c for c in body["capabilities"]}
    assert set(caps) == {"boom.run", "echo.run", "refuse.run", "sales.query", "slow.run",
                         "text.generate"}
    sales = caps["sales.query"]
    assert sales["params"]["required"] == ["region", "quarter"]
    assert sales["agents"] == [{"name": "worker", "kind": "websocket", "state": "online",
                                "node": front.reach.node.node_id}]
    assert caps["text.generate"]["streaming"] is True and caps["echo.run"]["idempotent"]


async def test_openapi_document_names_every_route(front: Front) -> None:
    status, spec, _ = await front.get("/openapi.json")
    assert status == 200 and spec["openapi"] == "3.1.0"
    assert set(spec["paths"]) == {"/v1/call/{capability}", "/v1/intent", "/v1/tasks",
                                  "/v1/tasks/{task_id}", "/v1/tasks/{task_id}/stream",
                                  "/v1/capabilities", "/healthz", "/openapi.json"}
    assert {"SubmitBody", "TaskStatus", "Problem"} <= set(spec["components"]["schemas"])


async def test_a_websocket_caller_and_an_http_caller_share_tasks_by_key_and_caller(
        front: Front) -> None:
    """Same gateway, same rules: a task submitted over HTTP as caller 'planner' is the
    websocket caller 'planner''s own task (its status, its key)."""
    status, accepted, _ = await front.post(
        "/v1/tasks", {"capability": "echo.run", "params": {"a": 1}},
        headers={"X-Reach-Caller": "planner", "Idempotency-Key": "k"})
    assert status == 202
    async with Client.connect(front.reach.url, caller="planner") as client:
        handle = await client.submit("echo.run", {"a": 1}, idempotency_key="k")
        assert handle.task_id == accepted["task_id"]
        assert await handle.result(timeout=5) == {"echo": {"a": 1}}


def test_reach_serve_flags_set_or_disable_the_http_port() -> None:
    from reach.cli import _parser, _settings

    def port(*argv: str) -> int | None:
        return _settings(_parser().parse_args(["serve", *argv])).http_port

    assert port() == 8766  # beside the default websocket port
    assert port("--port", "9000") == 0  # beside another: any free one (printed at start)
    assert port("--http-port", "9001") == 9001
    assert port("--no-http") is None
