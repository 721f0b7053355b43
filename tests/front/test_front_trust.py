"""Callers over HTTP are held to the websocket's trust rules (core/trust.py): a bearer token
names the principal, call rules say what it may call, and a task is private to its caller."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from front.conftest import Front, open_front
from front.test_front_errors import is_problem

from reach import Client

TOKENS = {"t-worker": "worker", "t-alice": "alice", "t-bob": "bob", "t-service": "*"}
CALLS = {"alice": ("echo.*", "slow.*", "text.*"), "bob": ("echo.*",), "*": ("echo.*",)}


def bearer(token: str, **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **more}


@pytest_asyncio.fixture
async def secured() -> AsyncIterator[Front]:
    async for front in open_front(tokens=TOKENS, permissions=CALLS, agent_token="t-worker"):
        yield front


async def test_a_token_names_the_caller(secured: Front) -> None:
    status, body, _ = await secured.post("/v1/tasks", {"capability": "echo.run"},
                                         headers=bearer("t-alice"))
    assert status == 202
    _, view, _ = await secured.get(f"/v1/tasks/{body['task_id']}?wait=5",
                                   headers=bearer("t-alice"))
    assert view["caller"] == "alice" and view["state"] == "succeeded"


async def test_no_token_or_a_wrong_one_is_401_with_a_bearer_challenge(secured: Front) -> None:
    for headers in ({}, bearer("t-nobody"), {"Authorization": "Basic YTpi"},
                    {"Authorization": "Bearer "}):
        _, body, r = await secured.post("/v1/call/echo.run", {}, headers=headers)
        is_problem(r, body, 401, "unauthorized")
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
    _, body, r = await secured.get("/v1/capabilities")
    is_problem(r, body, 401, "unauthorized")
    # What needs no caller answers without a token.
    assert (await secured.get("/healthz"))[0] == 200
    assert (await secured.get("/openapi.json"))[0] == 200


async def test_a_token_cannot_speak_for_another_caller(secured: Front) -> None:
    _, body, r = await secured.post("/v1/call/echo.run", {},
                                    headers=bearer("t-alice", **{"X-Reach-Caller": "bob"}))
    is_problem(r, body, 403, "unauthorized")
    assert "belongs to 'alice'" in body["detail"]


async def test_a_service_token_names_its_caller_with_a_header(secured: Front) -> None:
    _, body, r = await secured.post("/v1/call/echo.run", {}, headers=bearer("t-service"))
    is_problem(r, body, 403, "unauthorized")
    assert "X-Reach-Caller" in body["detail"]
    status, body, _ = await secured.post(
        "/v1/tasks", {"capability": "echo.run"},
        headers=bearer("t-service", **{"X-Reach-Caller": "gateway-7"}))
    assert status == 202
    _, view, _ = await secured.get(f"/v1/tasks/{body['task_id']}",
                                   headers=bearer("t-service", **{"X-Reach-Caller": "gateway-7"}))
    assert view["caller"] == "gateway-7"


async def test_call_rules_refuse_with_403_and_capabilities_show_only_what_is_allowed(
        secured: Front) -> None:
    _, body, r = await secured.post("/v1/call/slow.run", {"seconds": 0}, headers=bearer("t-bob"))
    is_problem(r, body, 403, "unauthorized")
    assert (await secured.post("/v1/call/slow.run", {"seconds": 0},
                               headers=bearer("t-alice")))[0] == 200
    _, alice, _ = await secured.get("/v1/capabilities", headers=bearer("t-alice"))
    _, bob, _ = await secured.get("/v1/capabilities", headers=bearer("t-bob"))
    assert [c["name"] for c in alice["capabilities"]] == ["echo.run", "slow.run",
                                                          "text.generate"]
    assert [c["name"] for c in bob["capabilities"]] == ["echo.run"]


def without_ids(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("detail", "details", "task_id")}


async def test_another_callers_task_is_answered_as_an_unknown_id(secured: Front) -> None:
    _, mine, _ = await secured.post("/v1/tasks", {"capability": "echo.run",
                                                  "params": {"secret": 1}},
                                    headers=bearer("t-alice"))
    tid = mine["task_id"]
    for path in (f"/v1/tasks/{tid}", f"/v1/tasks/{tid}/stream"):
        _, theirs, r = await secured.get(path, headers=bearer("t-bob"))
        _, unknown, r2 = await secured.get(path.replace(tid, "f" * 32), headers=bearer("t-bob"))
        is_problem(r, theirs, 404, "invalid_params")
        assert without_ids(theirs) == without_ids(unknown) and r2.status == 404
        assert "secret" not in str(theirs)
    # Its caller reads it; so does the agent that ran it (may_read, as over the websocket).
    assert (await secured.get(f"/v1/tasks/{tid}?wait=5", headers=bearer("t-alice")))[0] == 200
    assert (await secured.get(f"/v1/tasks/{tid}", headers=bearer("t-worker")))[0] == 200


async def test_an_http_task_is_private_from_websocket_callers_too(secured: Front) -> None:
    _, mine, _ = await secured.post("/v1/tasks", {"capability": "echo.run"},
                                    headers=bearer("t-alice"))
    async with Client.connect(secured.reach.url, caller="bob", token="t-bob") as bob:
        try:
            await bob.status(mine["task_id"])
        except Exception as exc:
            assert getattr(exc, "code", None) == "invalid_params"
        else:
            raise AssertionError("bob read alice's task")
    async with Client.connect(secured.reach.url, caller="alice", token="t-alice") as alice:
        assert (await alice.status(mine["task_id"]))["caller"] == "alice"


async def test_idempotency_keys_are_per_caller(secured: Front) -> None:
    key = {"Idempotency-Key": "same"}
    _, a, _ = await secured.post("/v1/tasks", {"capability": "echo.run"},
                                 headers=bearer("t-alice", **key))
    _, b, _ = await secured.post("/v1/tasks", {"capability": "echo.run"},
                                 headers=bearer("t-bob", **key))
    assert a["task_id"] != b["task_id"] and not b["duplicate"]
