"""The POST rules webhooks share with A2A pushes and alert webhooks (reach.server.outbound):
a redirect is an answer, never followed; 429 is retried, 400 is not; the body is bounded (a
result past it is left out, read with status). And a chain notifies once, at its end: a link
that succeeded with steps to go sends nothing, and its next step, carrying the same
``notify``, sends signed as the head was. Loopback receivers."""

from __future__ import annotations

import asyncio

from aiohttp import web
from notify_rig import FAST, LOOPBACK, QUICK, receiver, verifier, working

from reach import Admin, Agent, Client, Reach
from reach.core.chains import Link
from reach.core.tasks import SubmitRequest

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
            head = await client.submit("echo.run", {"n": 1}, notify=hook.url, then="echo.run")
            await head.result(timeout=5)
            await asyncio.wait_for(reach.pusher.settled(), 5)
            assert not any(d.json["task_id"] == head.task_id for d in hook.got)
            assert head.task_id not in reach.pusher.configs and not reach.pusher.dead
            # The chain's next step (as the chain runner starts it) carries the webhook on.
            step, _ = await reach.gateway.submit(SubmitRequest(
                "echo.run", {"n": 2}, "planner", notify=hook.url,
                link=Link(head.task_id, 2, 2), trace_id=head.trace_id))
            await reach.notify.carry(step)
            delivery = await hook.one()
    assert delivery.json["task_id"] == step.task_id
    assert delivery.json["chain"] == {"head": head.task_id, "step": 2, "of": 2}
    assert delivery.headers["X-Reach-Signer"] == "token"
    assert verify(PLANNER, delivery.headers, delivery.body)


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
