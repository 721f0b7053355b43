"""Wire frames (reach/protocol.py): round trips and ProtocolError explanations."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach import protocol as p
from reach.errors import ProtocolError, ReachError

SCHEMA = {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}

EXAMPLES: dict[str, p.Frame] = {
    "register": p.Register(
        name="inv", token="tok", version="2.1", max_concurrency=7,
        capabilities=[p.CapabilitySpec(name="inventory.query", params=SCHEMA, scope="read",
                                       latency_ms=250, weight=10, idempotent=True,
                                       streaming=True, tags=["stock"], intents=["how many"],
                                       description="Query stock"),
                      p.CapabilitySpec(name="inventory.update", scope="write")]),
    "heartbeat": p.Heartbeat(inflight=3, queue_depth=2, load=0.75),
    "ack": p.Ack(task_id="t1", attempt=2),
    "result": p.Result(task_id="t1", attempt=1, id=9, trace_id="tr1", result={"qty": 3, "none": None}),
    "error": p.Error(task_id="t1", attempt=1, id=4, trace_id="tr1",
                     error=p.WireError(code="task_failed", message="out of stock",
                                       details={"answer": True, "sku": "A-1"})),
    "chunk": p.Chunk(task_id="t1", attempt=1, id=2, seq=5, data=["partial", 1]),
    "deregister": p.Deregister(),
    "welcome": p.Welcome(role="agent", agent_id="a1", heartbeat_interval=2.5,
                         capabilities=["inventory.query"], warnings=["renamed"]),
    "invoke": p.Invoke(task_id="t1", attempt=1, capability="inventory.query",
                       params={"sku": "A-1"}, idempotency_key="k1", trace_id="tr1",
                       parent_task_id="t0", traceparent="00-abc-def-01", deadline_ms=1500.0,
                       caller="alice"),
    "cancel": p.Cancel(task_id="t1", attempt=3),
    "hello": p.Hello(caller="alice", token="tok"),
    "submit": p.Submit(id=1, capability="inventory.query", params={"sku": "A-1"},
                       idempotency_key="k1", priority=9, timeout=2.5, max_retries=0,
                       trace_id="tr1", parent_task_id="t0", traceparent="00-abc-def-01",
                       intent="how many A-1 are in stock", wait=False),
    "status": p.Status(id=2, task_id="t1"),
    "accepted": p.Accepted(id=1, task_id="t1", trace_id="tr1", duplicate=True),
    "task": p.TaskInfo(id=2, task={"task_id": "t1", "state": "running", "error": None}),
    "admin": p.AdminHello(token="s3cret"),
    "command": p.Command(id=7, action="replay_filter", args={"capability": "orders.write"}),
}


def test_examples_cover_every_frame_type():
    assert set(EXAMPLES) == p.FRAME_TYPES
    assert all(frame.type == kind for kind, frame in EXAMPLES.items())


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_round_trip_every_frame_type(kind):
    frame = EXAMPLES[kind]
    text = p.dump(frame)
    obj = json.loads(text)
    assert obj["v"] == 1 and obj["type"] == kind
    back = p.parse(text)
    assert type(back) is type(frame)
    assert back == frame
    assert p.parse(text.encode()) == frame  # bytes as well as text
    assert p.dump(back) == text


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_round_trip_minimal_frames(kind):
    # The smallest valid frame of each type parses and survives a round trip with defaults.
    required = {
        "register": {"name": "a", "capabilities": [{"name": "x.get"}]},
        "ack": {"task_id": "t"}, "result": {"task_id": "t"},
        "error": {"error": {"code": "c", "message": "m"}}, "chunk": {"task_id": "t"},
        "invoke": {"task_id": "t", "capability": "x.get", "idempotency_key": "k",
                   "trace_id": "tr"},
        "cancel": {"task_id": "t"}, "submit": {"id": 1, "capability": "x.get"},
        "command": {"id": 1, "action": "trace"},
        "status": {"id": 1, "task_id": "t"},
        "accepted": {"id": 1, "task_id": "t", "trace_id": "tr"},
        "task": {"id": 1, "task": {}},
    }.get(kind, {})
    frame = p.parse(json.dumps({"type": kind, **required}))
    assert frame.type == kind and frame.v == 1
    assert p.parse(p.dump(frame)) == frame


def test_dump_is_compact_and_leaves_out_none():
    text = p.dump(p.Error(error=p.WireError(code="c", message="m")))
    assert " " not in text
    obj = json.loads(text)
    assert "task_id" not in obj and "id" not in obj
    assert obj == {"v": 1, "type": "error", "attempt": 0,
                   "error": {"code": "c", "message": "m", "details": {}}}


def test_none_inside_payloads_survives():
    frame = p.Result(task_id="t", result={"a": None, "b": [None]})
    assert p.parse(p.dump(frame)).result == {"a": None, "b": [None]}


def test_unknown_fields_are_ignored_for_forward_compatibility():
    frame = p.parse('{"v": 1, "type": "heartbeat", "inflight": 2, "gpu": "busy"}')
    assert frame == p.Heartbeat(inflight=2)


def test_missing_version_means_v1():
    assert p.parse('{"type": "deregister"}') == p.Deregister()


def test_capability_spec_defaults():
    spec = p.parse('{"type": "register", "name": "a", "capabilities": [{"name": "x"}]}'
                   ).capabilities[0]
    assert (spec.scope, spec.latency_ms, spec.weight, spec.idempotent, spec.streaming) == (
        "read", 1000.0, 50.0, False, False)
    assert spec.params == {} and spec.tags == [] and spec.intents == []


def test_oversize_looking_but_valid_frames_parse():
    blob = "x" * 1_000_000
    frame = p.parse(json.dumps({"type": "submit", "id": 1, "capability": "doc.summarize",
                                "params": {"text": blob, "n": 10**18, "f": 1e308,
                                           "list": list(range(10_000))}}))
    assert isinstance(frame, p.Submit)
    assert frame.params["text"] == blob and frame.params["n"] == 10**18
    assert len(frame.params["list"]) == 10_000
    beat = p.parse('{"type": "heartbeat", "inflight": 123456789012, "load": 1e300}')
    assert beat.inflight == 123456789012


# ------------------------------------------------------------------ helpful errors

def explain(raw) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        p.parse(raw)
    err = info.value
    assert isinstance(err, ReachError) and err.code == "protocol_error"
    return err


@pytest.mark.parametrize("raw", [
    b"\x00\xff\xfe garbage", b"\xff", "not json at all", "{", '{"type": "heartbeat"',
    "", "   ", '{"type": \'heartbeat\'}',
])
def test_invalid_json(raw):
    err = explain(raw)
    assert err.message == "frame is not valid JSON; send one JSON object per text message"


@pytest.mark.parametrize("raw", ["[1, 2]", '[{"type": "heartbeat"}]', '"hello"', "42", "null",
                                 "true"])
def test_not_an_object(raw):
    err = explain(raw)
    assert err.message == "frame must be a JSON object with 'v' and 'type'"


def test_missing_type_lists_the_types():
    err = explain('{"v": 1, "inflight": 2}')
    assert err.message.startswith("frame has no 'type'; expected one of [")
    for kind in p.FRAME_TYPES:
        assert repr(kind) in err.message


def test_unknown_type_names_it_and_lists_the_types():
    err = explain('{"v": 1, "type": "heartbeet"}')
    assert err.message.startswith("unknown frame type 'heartbeet'; expected one of [")
    assert "'heartbeat'" in err.message and "'submit'" in err.message


def test_type_is_case_sensitive():
    assert "unknown frame type 'Heartbeat'" in explain('{"type": "Heartbeat"}').message


@pytest.mark.parametrize(("v", "shown"), [(2, "2"), (0, "0"), ('"1"', "'1'"), ("null", "None")])
def test_wrong_version(v, shown):
    err = explain(f'{{"v": {v}, "type": "heartbeat"}}')
    assert err.message == f"unsupported protocol version {shown}; this coordinator speaks v1"
    assert err.details == {"supported": [1]}


def test_wrong_version_is_reported_before_unknown_type():
    assert "unsupported protocol version 2" in explain('{"v": 2, "type": "hyperdrive"}').message


@pytest.mark.parametrize(("raw", "message"), [
    ('{"type": "heartbeat", "inflight": "many"}',
     "invalid 'heartbeat' frame: inflight: Input should be a valid integer"),
    ('{"type": "ack"}', "invalid 'ack' frame: task_id: Field required"),
    ('{"type": "register", "name": "a", "capabilities": []}',
     "invalid 'register' frame: capabilities: List should have at least 1 item"),
    ('{"type": "register", "name": "a", "capabilities": [{"name": ""}]}',
     "invalid 'register' frame: capabilities.0.name: String should have at least 1 character"),
    ('{"type": "register", "name": "a", "capabilities": [{"name": "x", "scope": "admin"}]}',
     "invalid 'register' frame: capabilities.0.scope: Input should be 'read' or 'write'"),
    ('{"type": "submit", "id": 1, "capability": "x", "priority": 10}',
     "invalid 'submit' frame: priority: Input should be less than or equal to 9"),
    ('{"type": "submit", "id": 1, "capability": "x", "params": [1]}',
     "invalid 'submit' frame: params: Input should be an object"),
    ('{"type": "error", "error": {"message": "m"}}',
     "invalid 'error' frame: error.code: Field required"),
    ('{"type": "welcome", "role": "admin"}',
     "invalid 'welcome' frame: role: Input should be 'agent' or 'caller'"),
])
def test_invalid_field_names_the_frame_field_and_problem(raw, message):
    err = explain(raw)
    assert err.message.startswith(message), err.message
    assert err.details["type"] == json.loads(raw)["type"]


@pytest.mark.parametrize("raw", [
    '{"type": []}', '{"type": {"a": 1}}', '{"v": [], "type": "heartbeat"}',
    '{"v": {"x": 1}, "type": "ack"}',
])
def test_unhashable_version_or_type_is_a_protocol_error(raw):
    err = explain(raw)
    assert "type" in err.message or "version" in err.message


# ------------------------------------------------------------------ properties

@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=64), st.text(max_size=64)))
def test_parse_of_arbitrary_input_is_a_frame_or_a_protocol_error(raw):
    try:
        frame = p.parse(raw)
    except ProtocolError as exc:
        assert exc.message
    else:
        assert isinstance(frame, p.Frame)


_scalar = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False),
                    st.sampled_from(sorted(p.FRAME_TYPES)), st.text(max_size=8))


@settings(max_examples=200, deadline=None)
@given(v=st.one_of(st.just(1), _scalar), kind=_scalar,
       rest=st.dictionaries(st.sampled_from(["task_id", "id", "inflight", "capability",
                                             "name", "error", "params"]),
                            _scalar, max_size=4))
def test_parse_of_scalar_fields_is_a_frame_or_a_protocol_error(v, kind, rest):
    raw = json.dumps({"v": v, "type": kind, **rest})
    try:
        frame = p.parse(raw)
    except ProtocolError as exc:
        assert exc.message
    else:
        assert frame.type == kind


@settings(max_examples=100, deadline=None)
@given(
    id=st.integers(min_value=-2**53, max_value=2**53),
    capability=st.text(min_size=1, max_size=40),
    params=st.dictionaries(st.text(max_size=8), st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(-2**53, 2**53),
                  st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=10)),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5),
                                                                    inner, max_size=3),
        max_leaves=10), max_size=4),
    priority=st.integers(min_value=0, max_value=9),
    timeout=st.none() | st.floats(min_value=0.001, max_value=1e6),
    wait=st.booleans(),
)
def test_submit_round_trips(id, capability, params, priority, timeout, wait):
    frame = p.Submit(id=id, capability=capability, params=params, priority=priority,
                     timeout=timeout, wait=wait)
    assert p.parse(p.dump(frame)) == frame


@pytest.mark.parametrize("frame", [
    p.Invoke(task_id="t", attempt=2, capability="a.b", params={"x": [1, "é"]},
             idempotency_key="k", trace_id="tr", deadline_ms=12.5, caller="c"),
    p.Accepted(id=3, task_id="t", trace_id="tr", duplicate=True),
    p.Result(task_id="t", id=4, trace_id="tr", result={"deep": {"n": None}}),
    p.Error(task_id="t", id=5, error=p.WireError(code="timeout", message="late",
                                                  details={"a": 1})),
    p.Chunk(task_id="t", attempt=1, seq=7, data="tok"),
    p.Ack(task_id="t", attempt=1),
    p.Submit(id=9, capability="a.b", params={}, priority=7, wait=True),
])
def test_encode_is_the_same_json_as_dump(frame: p.Frame) -> None:
    import json

    fields = frame.model_dump(exclude={"v", "type"})
    encoded = p.encode(frame.type, **fields)  # type: ignore[attr-defined]
    assert json.loads(encoded) == json.loads(p.dump(frame))
    assert p.parse(encoded) == frame
