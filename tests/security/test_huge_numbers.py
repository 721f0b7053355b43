"""Numbers JSON cannot carry are refused at every door (issue 25, item 11).

``1e400`` in params decoded to inf, passed the capability's schema as a number and reached the
agent as ``null``; over the websocket even ``NaN`` and ``Infinity`` did. Now a submit, an
agent's result or chunk, and a REST body holding NaN, an infinity or a number past a double's
range is refused with ``protocol_error``, naming the payload (``details.field``) and the path
inside it (the message), and nothing is delivered or answered with it. The Python SDKs sent
``float("inf")`` as null too: a caller's params are refused before sending, and a handler's
result or chunk holding one is a fault that says where.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from conformance.rawpeer import agent as raw_agent
from conformance.rawpeer import answer, caller, submit
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic_core import from_json

from reach import Agent, Client, ProtocolError, Reach, TaskFailed
from reach.wire import peer
from reach.wire.numbers import finite, loads_finite, may_hold_nonfinite, nonfinite_path

CAP = [{"name": "num.take", "latency_ms": 200,
        "params": {"type": "object", "properties": {"x": {"type": "number"}}}}]
# The last: past a double's range with a two-digit exponent (the text search missed it once).
HUGE = ["1e400", "-1e400", "1E+999", "Infinity", "-Infinity", "NaN", "1" + "0" * 400 + ".0",
        "1" + "0" * 300 + "e10"]


def raw_submit(req_id: int, params: str) -> str:
    return (f'{{"v": 1, "type": "submit", "id": {req_id}, "capability": "num.take", '
            f'"params": {params}}}')


@pytest.mark.parametrize("number", HUGE, ids=lambda n: n if len(n) < 20 else f"{len(n)}-digits")
async def test_a_submit_with_a_number_json_cannot_carry_is_refused(number: str) -> None:
    async with Reach.start(heartbeat_interval=0.1) as reach:
        worker = await raw_agent(reach.url, "numbers", CAP)
        boss = await caller(reach.url)
        await boss.send(raw_submit(1, f'{{"x": {number}}}'))
        reply = await boss.recv()
        assert reply["type"] == "error" and reply["id"] == 1
        error = reply["error"]
        assert error["code"] == "protocol_error"
        assert error["details"] == {"type": "submit", "field": "params"}
        assert "params.x" in error["message"] and "1e400" in error["message"]
        # Deep inside, the path says where.
        await boss.send(raw_submit(2, f'{{"rows": [1, {{"y": [{number}]}}]}}'))
        assert "params.rows.1.y.0:" in (await boss.recv())["error"]["message"]
        # Nothing was delivered; a finite number at the edge of the range still is, intact.
        await boss.send(raw_submit(3, '{"x": 1.7e308}'))
        invoke = await worker.expect("invoke")
        assert invoke["params"] == {"x": 1.7e308}
        await answer(worker, invoke, "ok")
        assert (await boss.outcome(3))["result"] == "ok"
        await worker.close()
        await boss.close()


async def test_an_agents_result_or_chunk_with_one_is_refused_and_it_may_answer_again() -> None:
    async with Reach.start(heartbeat_interval=0.1) as reach:
        worker = await raw_agent(reach.url, "numbers", CAP)
        boss = await caller(reach.url)
        await boss.send(json.dumps(submit(1, "num.take", {"x": 1})))
        invoke = await worker.expect("invoke")
        head = (f'"v": 1, "task_id": "{invoke["task_id"]}", "attempt": {invoke["attempt"]}')
        await worker.send(f'{{{head}, "type": "chunk", "seq": 0, "data": {{"t": NaN}}}}')
        error = (await worker.expect("error"))["error"]
        assert error["code"] == "protocol_error"
        assert error["details"] == {"type": "chunk", "field": "data"} and "data.t" in error["message"]
        await worker.send(f'{{{head}, "type": "result", "result": {{"total": 1e400}}}}')
        error = (await worker.expect("error"))["error"]
        assert error["details"] == {"type": "result", "field": "result"}
        assert "result.total" in error["message"]
        # The caller was told nothing (no null result); a good answer still lands.
        await answer(worker, invoke, {"total": 2.5})
        outcome = await boss.outcome(1)
        assert outcome["type"] == "result" and outcome["result"] == {"total": 2.5}
        await worker.close()
        await boss.close()


@pytest.mark.parametrize("number", ["1e400", "-1e400", "Infinity", "NaN"])
async def test_a_rest_body_with_one_is_a_400(number: str) -> None:
    async with Reach.start(heartbeat_interval=0.1) as reach:
        worker = await raw_agent(reach.url, "numbers", CAP)
        assert reach.http_url is not None
        async with aiohttp.ClientSession() as http:
            async with http.post(reach.http_url + "/v1/call/num.take",
                                 data=f'{{"x": {number}}}'.encode(),
                                 headers={"Content-Type": "application/json"}) as r:
                body: dict[str, Any] = await r.json(content_type=None)
            assert r.status == 400 and body["code"] == "protocol_error", body
            await worker.silent(0.05)  # nothing delivered

            async def finite() -> tuple[int, Any]:
                async with http.post(reach.http_url + "/v1/call/num.take",
                                     json={"x": 1e308}) as r:
                    return r.status, await r.json(content_type=None)

            call = asyncio.ensure_future(finite())
            invoke = await worker.expect("invoke")
            assert invoke["params"] == {"x": 1e308}
            await answer(worker, invoke, "ok")
            status, body = await call
            assert status == 200, body
        await worker.close()


def test_a_peers_forward_with_one_is_refused_as_a_session_frame_is() -> None:
    head = ('"v": 1, "type": "forward", "task_id": "t1", "capability": "num.take", '
            '"idempotency_key": "k", "trace_id": "r1", "agent_id": "a1"')
    assert peer.parse_at_holder(f'{{{head}, "params": {{"x": 1e308}}}}').params == {"x": 1e308}
    with pytest.raises(ProtocolError) as caught:
        peer.parse_at_holder(f'{{{head}, "params": {{"x": [1e400]}}}}')
    assert caught.value.details == {"type": "forward", "field": "params"}
    assert "params.x.0:" in caught.value.message


async def test_the_python_sdks_refuse_them_rather_than_send_null() -> None:
    async with Reach.start(heartbeat_interval=0.1) as reach:
        seen: list[Any] = []
        worker = Agent("numbers", reconnect_base=0.02)

        @worker.capability("num.echo")
        async def echo(x: Any) -> Any:
            seen.append(x)
            return {"x": x, "ratio": float("inf")} if x == "ratio" else x

        @worker.capability("num.stream")
        async def stream() -> AsyncIterator[Any]:
            yield 1
            yield {"v": [float("nan")]}

        await worker.connect(reach.url)
        client = await Client.connect(reach.url, caller="planner")
        try:
            # A caller's params: refused before sending, as the coordinator would.
            for bad in (float("inf"), float("-inf"), float("nan"), [1.0, {"y": float("inf")}]):
                with pytest.raises(ProtocolError) as err:
                    await client.call("num.echo", {"x": bad}, timeout=5)
                assert err.value.details == {"type": "submit", "field": "params"}
                assert "params.x" in err.value.message
            assert seen == []
            # A handler's result or chunk: a fault saying where, not a null.
            with pytest.raises(TaskFailed) as failed:
                await client.call("num.echo", {"x": "ratio"}, timeout=5)
            assert failed.value.message.startswith("result.ratio: a number is NaN, Infinity")
            with pytest.raises(TaskFailed) as failed:
                await client.call("num.stream", {}, timeout=5)
            assert failed.value.message.startswith("chunk 1.v.0: a number is NaN")
            assert await client.call("num.echo", {"x": 1.5}, timeout=5) == 1.5
        finally:
            await client.close()
            await worker.close()


async def test_an_http_agent_answering_one_is_a_fault_not_null() -> None:
    """An attached service's JSON reply holding 1e400 or NaN is a fault that says so; before,
    it reached the caller as null (the adapters decode what their agents answer)."""
    from aiohttp import web

    from reach.adapters import HttpAgent

    async def reply(request: web.Request) -> web.Response:
        body = '{"x": 1e400}' if request.path == "/big" else '{"x": NaN}'
        return web.Response(text=body, content_type="application/json")

    app = web.Application()
    app.router.add_post("/big", reply)
    app.router.add_post("/nan", reply)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with Reach.start(max_retries=0) as reach:
            await reach.attach(HttpAgent("numbers", f"http://127.0.0.1:{port}", capabilities={
                "num.big": {"path": "/big"}, "num.nan": {"path": "/nan"}}))
            async with Client.connect(reach.url, caller="c") as client:
                for cap in ("num.big", "num.nan"):
                    with pytest.raises(TaskFailed, match="JSON cannot carry"):
                        await client.call(cap, {}, timeout=5)
    finally:
        await runner.cleanup()


NUMBER = r"-?(0|[1-9][0-9]{0,400})(\.[0-9]{1,40})?([eE][+-]?0{0,3}[0-9]{1,4})?"


@settings(max_examples=400, deadline=None)
@example(["1" + "0" * 300 + "e10"]).via("a long number with a short exponent, once missed")
@example(["1" + "0" * 209 + "9e99"])
@given(st.lists(st.one_of(st.from_regex(NUMBER, fullmatch=True),
                          st.sampled_from(["NaN", "Infinity", "-Infinity", '"NaN"', '"a1e400"'])),
                min_size=1, max_size=4))
def test_the_text_prefilter_never_lets_a_number_json_cannot_carry_through(
        literals: list[str]) -> None:
    """The doors walk a payload only when its text could hold such a number: whatever the
    wire's parser reads as NaN or an infinity, the text search flags first."""
    text = f'{{"v": 1, "rows": [{", ".join(literals)}]}}'
    value = from_json(text, allow_inf_nan=True)
    if not finite(value):
        assert may_hold_nonfinite(text) and may_hold_nonfinite(text.encode())


def test_an_exponent_inside_a_hex_id_is_not_taken_for_a_number() -> None:
    """Ids are hex: "3e412f" looks like 3e412 until its number would end. Such text is not
    walked (a walk of a big payload costs as much as the payload is long); a real exponent
    ends at a comma, bracket, brace, space or the end, and is."""
    assert not may_hold_nonfinite('{"task_id": "3e412f", "trace": "9e999"}')
    assert not may_hold_nonfinite(b'{"task_id": "3e412"}')
    for text in ('[3e412]', '{"x": 3e412}', '{"x": 3E+412 }', '3e412', '[1, 2e300,3]'):
        assert may_hold_nonfinite(text) and may_hold_nonfinite(text.encode()), text


_JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**400, max_value=10**400),
              st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e308, -1e308]),
              st.text(max_size=3)),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=4),
    max_leaves=30)


@settings(max_examples=500, deadline=None)
@example([1e308, 1e308]).via("a sum that overflows, of finite numbers")
@example([1, 10**400, float("nan")]).via("an int past a double before a NaN")
@example([1.5, "x", float("inf")]).via("numbers first, then a string, then an infinity")
@example({"e": [0.5] * 384 + [float("-inf")]}).via("an embedding with one infinity last")
@given(_JSONISH)
def test_finite_finds_every_nan_and_infinity_at_any_depth(value: Any) -> None:
    """The quick test the doors and both SDKs use agrees with a walk of every number."""
    assert finite(value) is (nonfinite_path(value) is None)


@settings(max_examples=300, deadline=None)
@example('{"price": 1e400}').via("past a double: read as an infinity by both parsers")
@example('\ufeff{"a": 1}').via("a byte-order mark, which only json.loads reads")
@example('"\\ud800"').via("a lone surrogate, which only json.loads reads")
@given(_JSONISH.map(json.dumps))
def test_an_adapters_answer_is_read_as_json_reads_it_unless_it_holds_nan_or_infinity(
        text: str) -> None:
    """What an HTTP or command agent answers is read as ``json.loads`` reads it, and refused
    with the rule's words when it holds a number JSON cannot carry (the fast parser is only a
    shortcut to the same answer)."""
    for form in (text, text.encode()):
        try:
            expected = json.loads(form)
        except ValueError:  # not JSON to json.loads either (a str that starts with a BOM)
            with pytest.raises(ValueError):
                loads_finite(form)
            continue
        if nonfinite_path(expected) is None:
            assert loads_finite(form) == expected
        else:
            with pytest.raises(ValueError, match="JSON cannot carry|out of a double's range"):
                loads_finite(form)
