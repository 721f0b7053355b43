"""The POST rules webhooks share with A2A pushes and alert webhooks (reach.server.outbound):
a redirect is an answer, never followed; 429 is retried, 400 is not; the body is bounded (a
result past it is left out, read with status). And a chain notifies once, at its end (its last
step's outcome, or the step that failed), signed as its head's submit was; its dead letter is
the head's and a replay sends it again. Loopback receivers."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from aiohttp import web
from notify_rig import FAST, LOOPBACK, QUICK, receiver, verifier, working

from reach import Admin, Agent, Client, Reach
from reach.server import outbound

TOKEN = "notify-rules-adm1n"
PLANNER = "planner-t0ken-0123456789"


async def test_a_redirect_is_not_followed_and_refusals_are_final() -> None:
    async with receiver() as target, receiver([429, 400]) as refusing:
        async def bounce(request: web.Request) -> web.Response:
            raise web.HTTPFound(target.url)

        app = web.Application()
        app.router.add_post("/hook", bounce)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        bouncer = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
        try:
            async with Reach.start(**FAST, notify_allow=LOOPBACK, admin_token=TOKEN) as reach, \
                    working(reach.url):
                reach.pusher.backoff = QUICK
                async with Client.connect(reach.url, caller="planner") as client:
                    for url in (bouncer, refusing.url):
                        await (await client.submit("echo.run", {}, notify=url)).result(5)
                await asyncio.wait_for(reach.pusher.settled(), 5)
                async with Admin.connect(reach.url, token=TOKEN) as admin:
                    letters = await admin.push_dead_letters()
        finally:
            await runner.cleanup()
    assert sorted(d["reason"] for d in letters) == ["HTTP 302", "HTTP 400"]
    assert target.tries == 0  # the redirect's target was never asked
    assert refusing.tries == 2  # 429 tried again, 400 final


async def test_a_chain_notifies_once_at_its_end() -> None:
    verify = verifier()
    tokens = {PLANNER: "planner", "worker-t0ken-0123456789": "worker"}
    async with receiver() as hook, \
            Reach.start(**FAST, notify_allow=LOOPBACK, tokens=tokens) as reach, \
            working(reach.url, token="worker-t0ken-0123456789"):
        async with Client.connect(reach.url, caller="planner", token=PLANNER) as client:
            head = await client.submit("echo.run", {"n": 1}, notify=hook.url,
                                       then=["echo.run", "echo.run"])
            last = await head.result(timeout=5)  # (the chain's end: the last step's result)
            delivery = await hook.one()
            await asyncio.wait_for(reach.pusher.settled(), 5)
            view = await client.status(head.task_id)
    assert last == {"echo": {"echo": {"echo": {"n": 1}}}}
    assert len(hook.got) == 1 and hook.tries == 1  # one delivery for the chain
    body = delivery.json
    assert body["state"] == "succeeded" and body["result"] == last
    assert body["chain"] == {"head": head.task_id, "step": 3, "of": 3}
    assert body["task_id"] != head.task_id and body["trace_id"] == head.trace_id
    assert view["chain"]["next"]  # (the head passed its result on)
    assert delivery.headers["X-Reach-Signer"] == "token"
    assert verify(PLANNER, delivery.headers, delivery.body)


async def test_a_chain_whose_step_fails_says_which_and_its_letter_is_the_heads() -> None:
    async with receiver([404]) as hook, \
            Reach.start(**FAST, notify_allow=LOOPBACK, admin_token=TOKEN) as reach, \
            working(reach.url):
        async with Client.connect(reach.url, caller="planner") as client:
            head = await client.submit("echo.run", {"order": "x9"}, notify=hook.url,
                                       then=[{"capability": "orders.cancel",
                                              "map": {"order": "/echo/order"}}])
            async with asyncio.timeout(5):
                while not reach.pusher.dead:  # a 404 is final: a dead letter at once
                    await asyncio.sleep(0.005)
        async with Admin.connect(reach.url, token=TOKEN) as admin:
            [letter] = await admin.push_dead_letters()
            assert (letter["task_id"], letter["kind"], letter["state"]) == (
                head.task_id, "webhook", "failed")
            assert await admin.replay_pushes(head.task_id) == [head.task_id]
            delivery = await hook.one()
    body = delivery.json
    assert body["state"] == "failed" and body["error"]["code"] == "task_failed"
    assert "step 2 of 2 (orders.cancel)" in body["error"]["message"]
    assert body["chain"] == {"head": head.task_id, "step": 2, "of": 2}


async def test_a_result_past_the_body_bound_is_left_out_and_read_with_status() -> None:
    big = "x" * (1 << 20)  # the result alone fills the 1 MiB a webhook body may take
    async with receiver() as hook, Reach.start(**FAST, notify_allow=LOOPBACK,
                                               max_frame_bytes=4 << 20) as reach:
        worker = Agent("big", reconnect_base=0.02, max_frame_bytes=4 << 20)

        @worker.capability("big.read")
        async def read() -> dict[str, str]:
            return {"text": big}

        await worker.connect(reach.url)
        try:
            async with Client.connect(reach.url, caller="planner",
                                      max_frame_bytes=4 << 20) as client:
                handle = await client.submit("big.read", {}, notify=hook.url)
                assert (await handle.result(timeout=5))["text"] == big
                delivery = await hook.one()
                view = await client.status(handle.task_id)
        finally:
            await worker.close(drain=0.1)
    body = delivery.json
    assert len(delivery.body) < 1 << 20 and "result" not in body
    assert body["state"] == "succeeded" and "status()" in body["result_omitted"]
    assert view["result"] == {"text": big}  # the task keeps it


async def test_a_name_that_turns_inward_after_the_check_is_not_connected() -> None:
    """DNS rebinding: the URL's check and aiohttp's own look-up are two look-ups, and a name
    may answer a public address to the first and an inside one to the second. The sender's
    client checks the addresses again as it connects: ``localhost`` (loopback) is refused
    there even when the check before the try is skipped, and admitted under an allow rule."""
    async with receiver() as hook:
        inside = hook.url.replace("127.0.0.1", "localhost")
        rules: dict[str, Any] = dict(tries=2, backoff=QUICK, timeout=5.0,
                                     rng=random.Random(1), sleep=asyncio.sleep)
        async with outbound.session(outbound.Allow()) as guarded:
            reason = await outbound.post(guarded, inside, b"{}", {}, **rules)  # no pre-check
        assert reason is not None and "loopback" in reason and "not connected" in reason
        assert hook.tries == 0  # refused before any byte left
        async with outbound.session(outbound.Allow.of(LOOPBACK)) as admitted:
            assert await outbound.post(admitted, inside, b"{}", {}, **rules) is None
        assert hook.tries == 1


async def test_a_call_sends_its_webhook_too() -> None:
    """``call`` folds its acknowledgement into the answer (one frame each way): its webhook
    is kept and sent all the same, with the outcome the call answered."""
    async with receiver() as hook, Reach.start(**FAST, notify_allow=LOOPBACK) as reach, \
            working(reach.url):
        async with Client.connect(reach.url, caller="planner") as client:
            answer = await client.call("echo.run", {"a": 1}, notify=hook.url, timeout=5)
            delivery = await hook.one()
    assert delivery.json["state"] == "succeeded" and delivery.json["result"] == answer
    assert hook.tries == 1
