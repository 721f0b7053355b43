"""The client SDK builds one ``SubmitRequest`` per call and the ``submit`` frame from it.

No coordinator here: the layer under the public method is replaced by a recorder, so each test
sees exactly the request that ``call``/``submit``/``stream``/``call_intent``/``ctx.submit`` built.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from reach import Client, Context, InvalidParams, ProtocolError, ReachTimeout
from reach.core.tasks import SubmitRequest
from reach.wire import protocol as p


class Stop(Exception):
    """Raised by the recorders: the request has been seen, go no further."""


def recording(client: Client) -> list[tuple[SubmitRequest, dict[str, Any]]]:
    seen: list[tuple[SubmitRequest, dict[str, Any]]] = []

    async def _submit(request: SubmitRequest, **kw: Any) -> Any:
        seen.append((request, kw))
        raise Stop

    def _submit_frame(req_id: int, request: SubmitRequest, defer_ack: bool) -> str:
        seen.append((request, {"defer_ack": defer_ack}))
        raise Stop

    client._submit = _submit  # type: ignore[method-assign]
    client._submit_frame = _submit_frame  # type: ignore[method-assign]
    client._connected.set()  # call() waits for a connection before building its frame
    return seen


async def test_submit_builds_one_request_from_its_arguments() -> None:
    client = Client("ws://unused", caller="planner")
    seen = recording(client)
    with pytest.raises(Stop):
        await client.submit("sales.query", {"region": "east"}, idempotency_key="k1",
                            priority=7, timeout=3.0, max_retries=1, trace_id="tr",
                            parent_task_id="t0", traceparent="00-" + "a" * 32 + "-" + "b" * 16
                            + "-01", hedge=False)
    assert seen == [(SubmitRequest(
        "sales.query", {"region": "east"}, idempotency_key="k1", priority=7, timeout=3.0,
        max_retries=1, trace_id="tr", parent_task_id="t0",
        traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01", hedge=False), {})]
    assert seen[0][0].caller == ""  # the coordinator sets it from the connection


async def test_call_builds_the_same_request_and_defers_the_ack() -> None:
    client = Client("ws://unused")
    seen = recording(client)
    with pytest.raises(Stop):
        await client.call("x.run", None, timeout=2.0, priority=9, hedge=True)
    assert seen == [(SubmitRequest("x.run", {}, priority=9, timeout=2.0, hedge=True),
                     {"defer_ack": True})]
    assert client._outcomes == {}  # nothing left behind by a call that did not go out


async def test_stream_reads_its_options_into_the_request() -> None:
    client = Client("ws://unused")
    seen = recording(client)
    with pytest.raises(Stop):
        async for _ in client.stream("text.generate", {"n": 2}, timeout=4.0,
                                     idempotency_key="s1", priority=2, trace_id="tr"):
            pass  # pragma: no cover - the submit stops first
    assert seen == [(SubmitRequest("text.generate", {"n": 2}, idempotency_key="s1",
                                   priority=2, timeout=4.0, trace_id="tr"), {"stream": True})]


async def test_call_intent_names_no_capability() -> None:
    client = Client("ws://unused")
    seen = recording(client)
    with pytest.raises(Stop):
        await client.call_intent("查一下销售额", {"q": 3}, timeout=1.0)
    assert seen == [(SubmitRequest("", {"q": 3}, timeout=1.0, intent="查一下销售额"), {})]


async def test_a_context_submits_a_child_of_its_task_in_its_trace() -> None:
    client = Client("ws://unused")
    seen = recording(client)

    async def get_client() -> Client:
        return client

    ctx = Context(task_id="t-parent", trace_id="tr-1", idempotency_key="k",
                  capability="outer.run", traceparent="00-" + "c" * 32 + "-" + "d" * 16 + "-01",
                  _client=get_client)
    with pytest.raises(Stop):
        await ctx.call("inner.run", {"a": 1}, timeout=5.0, priority=8)
    assert seen == [(SubmitRequest("inner.run", {"a": 1}, priority=8, timeout=5.0,
                                   trace_id="tr-1", parent_task_id="t-parent",
                                   traceparent=ctx.traceparent), {})]


async def test_a_context_caps_the_timeout_at_its_deadline() -> None:
    import time

    client = Client("ws://unused")
    seen = recording(client)

    async def get_client() -> Client:
        return client

    ctx = Context(task_id="t", trace_id="tr", idempotency_key="k", capability="c.run",
                  deadline=time.monotonic() + 0.5, _client=get_client)
    with pytest.raises(Stop):
        await ctx.submit("inner.run", timeout=30.0)
    timeout = seen[0][0].timeout
    assert timeout is not None and 0 < timeout <= 0.5


# ---------------------------------------------------------------- the frame


def test_the_frame_carries_the_request_and_a_made_up_key() -> None:
    client = Client("ws://unused", caller="planner")
    request = SubmitRequest("x.run", {"a": 1}, priority=3, timeout=2.5, trace_id="tr",
                            intent=None, hedge=True)
    text = client._submit_frame(41, request, defer_ack=True)
    frame = p.parse(text)
    assert isinstance(frame, p.Submit)
    assert (frame.id, frame.capability, frame.params, frame.priority, frame.timeout,
            frame.trace_id, frame.hedge, frame.defer_ack, frame.wait) == (
        41, "x.run", {"a": 1}, 3, 2.5, "tr", True, True, True)
    assert frame.idempotency_key is not None and len(frame.idempotency_key) == 32
    assert "caller" not in json.loads(text)
    assert client._submits[41] == text  # kept to be sent again after a reconnect


def test_a_given_key_is_kept_and_the_ack_is_asked_for_by_default() -> None:
    client = Client("ws://unused")
    frame = p.parse(client._submit_frame(1, SubmitRequest("x.run", idempotency_key="mine"),
                                         defer_ack=False))
    assert frame.idempotency_key == "mine"
    assert frame.defer_ack is False


@pytest.mark.parametrize(("request_", "error"), [
    (SubmitRequest(""), InvalidParams),
    (SubmitRequest("x.run", priority=10), InvalidParams),
    (SubmitRequest("x.run", max_retries=101), InvalidParams),
    (SubmitRequest("x" * 201), InvalidParams),
    (SubmitRequest("x.run", timeout=0), ReachTimeout),
])
def test_a_bad_request_raises_before_any_frame(request_: SubmitRequest,
                                               error: type[Exception]) -> None:
    client = Client("ws://unused")
    with pytest.raises(error):
        client._submit_frame(1, request_, defer_ack=False)
    assert client._submits == {}


def test_an_oversize_submit_is_refused_locally() -> None:
    client = Client("ws://unused", max_frame_bytes=1000)
    with pytest.raises(ProtocolError, match="over the 1000-byte frame limit"):
        client._submit_frame(1, SubmitRequest("x.run", {"blob": "x" * 2000}), defer_ack=False)
    assert client._submits == {}
