"""Completion webhooks are delivered once, signed, and verifiable with the ten-line verifier
of docs/webhooks.md (this test runs that very block): a receiver that fails twice (503) gets
exactly one accepted delivery; the secret is the caller's token when it proved itself with
one, else the coordinator's notify secret, kept in the store across restarts. Real loopback
receivers, a real websocket agent, the SDK and the REST door."""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp
from notify_rig import FAST, LOOPBACK, QUICK, receiver, verifier, working

from reach import Client, Reach

PLANNER, WORKER = "planner-t0ken-0123456789", "worker-t0ken-0123456789"


async def test_a_receiver_that_fails_twice_gets_one_signed_delivery() -> None:
    verify = verifier()
    async with receiver([503, 503]) as hook, \
            Reach.start(**FAST, notify_allow=LOOPBACK) as reach, working(reach.url):
        reach.pusher.backoff = QUICK
        async with Client.connect(reach.url, caller="planner") as client:
            handle = await client.submit("echo.run", {"n": 1}, notify=hook.url)
            assert await handle.result(timeout=5) == {"echo": {"n": 1}}
        delivery = await hook.one()
        await reach.pusher.settled()
        secret = reach.notify_secret
    assert hook.tries == 3 and len(hook.got) == 1
    assert secret is not None and verify(secret, delivery.headers, delivery.body)
    assert delivery.headers["X-Reach-Signer"] == "coordinator"
    body = delivery.json
    assert body["task_id"] == handle.task_id and body["trace_id"] == handle.trace_id
    assert (body["state"], body["result"], body["capability"], body["attempts"]) == (
        "succeeded", {"echo": {"n": 1}}, "echo.run", 1)
    assert body["caller"] == "planner" and "error" not in body
    # What is not Reach's, or not recent, fails the same verifier.
    assert not verify(secret, delivery.headers, delivery.body.replace(b"1", b"2"))
    assert not verify("another-secret-0123456789", delivery.headers, delivery.body)
    stale = dict(delivery.headers, **{"X-Reach-Timestamp": str(int(time.time()) - 3600)})
    assert not verify(secret, stale, delivery.body)


async def test_a_caller_with_a_token_gets_deliveries_signed_with_it() -> None:
    verify = verifier()
    tokens = {PLANNER: "planner", WORKER: "worker"}
    async with receiver() as hook, \
            Reach.start(**FAST, notify_allow=LOOPBACK, tokens=tokens) as reach, \
            working(reach.url, token=WORKER):
        assert reach.http_url is not None
        async with aiohttp.ClientSession() as http:  # the REST door
            async with http.post(f"{reach.http_url}/v1/tasks", json={
                    "capability": "echo.run", "params": {"via": "rest"}, "notify": hook.url},
                    headers={"Authorization": f"Bearer {PLANNER}"}) as answer:
                assert answer.status == 202, await answer.text()
                rest_id = (await answer.json())["task_id"]
        first = await hook.one()
        hook.arrived.clear()
        async with Client.connect(reach.url, caller="planner", token=PLANNER) as client:
            handle = await client.submit("echo.run", {"via": "sdk"}, notify=hook.url)
            await handle.result(timeout=5)
        second = await hook.one()
    assert first.json["task_id"] == rest_id and second.json["task_id"] == handle.task_id
    for delivery in (first, second):
        assert delivery.headers["X-Reach-Signer"] == "token"
        assert verify(PLANNER, delivery.headers, delivery.body)
        assert not verify(WORKER, delivery.headers, delivery.body)


async def test_the_coordinator_secret_is_made_once_and_kept(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'reach.db'}"
    async with Reach.start(**FAST, store=store, http_port=None) as reach:
        made = reach.notify_secret
    async with Reach.start(**FAST, store=store, http_port=None) as again:
        assert again.notify_secret == made and made is not None and len(made) >= 32
    given = "an-operator-chosen-secret"
    async with Reach.start(**FAST, store=store, http_port=None, notify_secret=given) as third:
        assert third.notify_secret == given
