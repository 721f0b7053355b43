"""Wire frames (reach/protocol.py): round trips and ProtocolError explanations."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.errors import ProtocolError, ReachError
from reach.wire import protocol as p

TRACEPARENT = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
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
                       parent_task_id="t0", traceparent=TRACEPARENT, deadline_ms=1500.0,
                       caller="alice"),
    "cancel": p.Cancel(task_id="t1", attempt=3),
    "hello": p.Hello(caller="alice", token="tok"),
    "submit": p.Submit(id=1, capability="inventory.query", params={"sku": "A-1"},
                       idempotency_key="k1", priority=9, timeout=2.5, max_retries=0,
                       trace_id="tr1", parent_task_id="t0", traceparent=TRACEPARENT,
                       intent="how many A-1 are in stock", wait=False),
    "status": p.Status(id=2, task_id="t1"),
    "accepted": p.Accepted(id=1, task_id="t1", trace_id="tr1", duplicate=True),
    "task": p.TaskInfo(id=2, task={"task_id": "t1", "state": "running", "error": None}),
    "admin": p.AdminHello(token="s3cret"),
    "command": p.Command(id=7, action="replay_filter", args={"capability": "orders.write"}),
    "probe": p.Probe(id=41),
    "probe_result": p.ProbeResult(id=41, ok=False, detail="database unreachable"),
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
        "probe": {"id": 1}, "probe_result": {"id": 1},
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
        "read", None, 50.0, False, False)  # latency_ms: not declared
    assert spec.params == {} and spec.tags == [] and spec.intents == []


def test_oversize_looking_but_valid_frames_parse():
    blob = "x" * 1_000_000
    frame = p.parse(json.dumps({"type": "submit", "id": 1, "capability": "doc.summarize",
                                "params": {"text": blob, "n": 10**18, "f": 1e308,
                                           "list": list(range(10_000))}}))
    assert isinstance(frame, p.Submit)
    assert frame.params["text"] == blob and frame.params["n"] == 10**18
    assert len(frame.params["list"]) == 10_000
    beat = p.parse('{"type": "heartbeat", "inflight": 10000000, "load": 1000}')
    assert (beat.inflight, beat.load) == (10_000_000, 1000.0)


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
    assert err.details == {"supported": [1], "type": "heartbeat"}


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
    ('{"type": "invoke", "task_id": "t", "capability": "x", "params": [1], '
     '"idempotency_key": "k", "trace_id": "t"}',  # a submit's is invalid_params (conformance §5)
     "invalid 'invoke' frame: params: Input should be an object"),
    ('{"type": "error", "error": {"message": "m"}}',
     "invalid 'error' frame: error.code: Field required"),
    ('{"type": "welcome", "role": "admin"}',
     "invalid 'welcome' frame: role: Input should be 'agent', 'caller' or 'peer'"),
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
    id=st.integers(min_value=-p.MAX_ID, max_value=p.MAX_ID),
    capability=st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Zl", "Zp")),
                       min_size=1, max_size=40),
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


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_an_unchecked_frame_is_the_same_model_and_json_as_a_validated_one(kind: str) -> None:
    frame = EXAMPLES[kind]
    fields = {name: getattr(frame, name) for name in frame.model_fields_set}
    built = p.unchecked(type(frame))(**fields)
    assert p.dump(built) == p.dump(frame)  # same fields, same order
    assert built == frame


def test_oversize_counts_bytes_only_when_a_frame_may_not_fit() -> None:
    assert p.oversize("x" * 250, 1000) is None  # at most limit // 4 characters: fits
    assert p.oversize("x" * 1000, 1000) is None
    assert p.oversize("x" * 1001, 1000) == 1001
    assert p.oversize("é" * 400, 1000) is None  # 800 bytes
    assert p.oversize("é" * 501, 1000) == 1002


# ------------------------------------------------------------------ bounded input

def _submit(**fields) -> str:
    return json.dumps({"type": "submit", "id": 1, "capability": "x.get", **fields})


def _deep(depth: int, opener: str = "[", closer: str = "]") -> str:
    return opener * depth + closer * depth


@pytest.mark.parametrize("depth", [p.MAX_DEPTH + 1, 1000, 100_000, 500_000])
@pytest.mark.parametrize("shape", ["list", "object"])
def test_deep_nesting_is_a_protocol_error_that_still_names_the_frame(depth, shape):
    inner = _deep(depth) if shape == "list" else '{"a":' * depth + "1" + "}" * depth
    raw = '{"v": 1, "type": "submit", "id": 42, "capability": "x.get", "params": {"a": ' \
          + inner + "}}"
    err = explain(raw)
    assert err.message == (f"invalid 'submit' frame: it nests JSON more than {p.MAX_DEPTH} "
                           f"levels deep; flatten it")
    assert err.details == {"type": "submit"}
    assert p.request_id(raw) == 42
    assert p.request_id(raw.encode()) == 42


@pytest.mark.parametrize("raw", [
    _deep(500_000), '{"a":' * 300_000, "[" * 1_000_000, "\n".join(["{\"a\":"] * 300_000),
    '{"type": "submit", "params":' + "[" * 300 + "\n" * 1000 + "]" * 300 + ', "id": 1}',
], ids=["list", "objects", "open-list", "objects-by-line", "newlines"])
def test_deep_nesting_without_a_readable_head(raw):
    err = explain(raw)  # whatever can be read of the head decides the message
    assert err.message.startswith(("invalid 'submit' frame: it nests JSON more than 200 levels",
                                   "frame has no 'type'", "frame must be a JSON object"))
    assert err.details.get("type", "submit") == "submit"
    assert p.request_id(raw) in (None, 1)


def test_nesting_at_the_limit_still_parses():
    frame = p.parse(_submit(params={"a": json.loads(_deep(p.MAX_DEPTH - 3))}))
    assert isinstance(frame, p.Submit)


@pytest.mark.parametrize("raw", ["[" + ",".join(["{}"] * 300_000) + "]",
                                 '"' + "x" * 1_000_000 + '"', " " * 1_000_000 + "7"],
                         ids=["list", "string", "number"])
def test_a_large_non_object_is_refused_without_decoding_it(raw):
    assert explain(raw).message == "frame must be a JSON object with 'v' and 'type'"
    assert p.request_id(raw) is None


@pytest.mark.parametrize(("raw", "message"), [
    ('{"type": "nope", "id": 3}', "unknown frame type 'nope'"),
    ('{"v": 9, "type": "submit", "id": 3}', "unsupported protocol version 9"),
])
def test_details_name_the_type_when_known(raw, message):
    err = explain(raw)
    assert err.message.startswith(message)
    assert err.details["type"] == json.loads(raw)["type"]


def test_huge_type_and_version_values_are_shown_shortened():
    err = explain(json.dumps({"type": "x" * 100_000}))
    assert len(err.message) < 600 and len(err.details["type"]) == 100
    err = explain(json.dumps({"v": "y" * 100_000, "type": "ack"}))
    assert len(err.message) < 200


@pytest.mark.parametrize(("raw", "field", "words"), [
    ('{"type": "heartbeat", "inflight": -5}', "inflight", "greater than or equal to 0"),
    ('{"type": "heartbeat", "queue_depth": 10000001}', "queue_depth", "less than or equal"),
    ('{"type": "heartbeat", "load": 1e308}', "load", "less than or equal to 1000"),
    ('{"type": "heartbeat", "load": -0.1}', "load", "greater than or equal to 0"),
    ('{"type": "heartbeat", "load": NaN}', "load", "finite number"),
    ('{"type": "heartbeat", "load": Infinity}', "load", "finite number"),
    ('{"type": "heartbeat", "load": -Infinity}', "load", "finite number"),
    ('{"type": "heartbeat", "load": 1e999}', "load", "finite number"),
    ('{"type": "ack", "task_id": "t", "attempt": -1}', "attempt", "greater than or equal"),
    ('{"type": "ack", "task_id": "t", "attempt": 1000001}', "attempt", "less than or equal"),
    ('{"type": "chunk", "task_id": "t", "seq": -1}', "seq", "greater than or equal"),
    ('{"type": "status", "id": 9007199254740992, "task_id": "t"}', "id", "less than"),
    ('{"type": "status", "id": -9007199254740992, "task_id": "t"}', "id", "greater than"),
    (_submit(timeout=0), "timeout", "greater than 0"),
    (_submit(timeout=1e300), "timeout", "less than or equal"),
    (_submit().replace("}", ', "timeout": Infinity}'), "timeout", "finite number"),
    (_submit().replace("}", ', "timeout": NaN}'), "timeout", "finite number"),
    (_submit(priority=-1), "priority", "greater than or equal"),
    (_submit(max_retries=101), "max_retries", "less than or equal"),
    ('{"type": "register", "name": "a", "max_concurrency": 0, "capabilities": [{"name": "x"}]}',
     "max_concurrency", "greater than or equal to 1"),
    ('{"type": "register", "name": "a", "capabilities": [{"name": "x", "latency_ms": 1e10}]}',
     "capabilities.0.latency_ms", "less than or equal"),
    ('{"type": "register", "name": "a", "capabilities": [{"name": "x", "latency_ms": NaN}]}',
     "capabilities.0.latency_ms", "finite number"),
    ('{"type": "register", "name": "a", "capabilities": [{"name": "x", "weight": Infinity}]}',
     "capabilities.0.weight", "finite number"),
    ('{"type": "invoke", "task_id": "t", "capability": "x", "idempotency_key": "k", '
     '"trace_id": "t", "deadline_ms": -1}', "deadline_ms", "greater than or equal"),
    ('{"type": "welcome", "heartbeat_interval": NaN}', "heartbeat_interval", "finite"),
])
def test_numbers_are_bounded_and_finite(raw, field, words):
    err = explain(raw)
    assert err.details["field"] == field, err.message
    assert err.message.startswith(f"invalid {err.details['type']!r} frame: {field}: ")
    assert err.details["type"] in raw
    assert words in err.message, err.message


BAD_CHARACTERS = ["\x00", "\x1b", "\x7f", "\x85", "\x9b", "\r", "\n", "\t", "\u202e",
                  "\u202a", "\u2066", "\u2069", "\u200e", "\u200f", "\u061c", "\u2028",
                  "\u2029", "\u200b", "\ufeff", "\u00ad", "\U000e0041"]


def _frames_with_name(bad: str) -> list[tuple[str, str]]:
    reg = {"type": "register", "name": "ok", "capabilities": [{"name": "x.get"}]}
    cap = {"name": "x.get"}
    return [
        (json.dumps({**reg, "name": f"a{bad}b"}), "name"),
        (json.dumps({**reg, "version": f"1{bad}"}), "version"),
        (json.dumps({**reg, "instance": f"{bad}i"}), "instance"),
        (json.dumps({**reg, "capabilities": [{**cap, "name": f"x{bad}.get"}]}),
         "capabilities.0.name"),
        (json.dumps({**reg, "capabilities": [{**cap, "tags": ["ok", f"t{bad}"]}]}),
         "capabilities.0.tags.1"),
        (json.dumps({"type": "hello", "caller": f"alice{bad}"}), "caller"),
        (_submit(idempotency_key=f"k{bad}"), "idempotency_key"),
        (_submit(capability=f"x{bad}"), "capability"),
        (_submit(trace_id=f"t{bad}"), "trace_id"),
        (_submit(parent_task_id=f"t{bad}"), "parent_task_id"),
        (json.dumps({"type": "ack", "task_id": f"t{bad}"}), "task_id"),
        (json.dumps({"type": "status", "id": 1, "task_id": f"t{bad}"}), "task_id"),
        (json.dumps({"type": "result", "task_id": "t", "trace_id": f"t{bad}"}), "trace_id"),
        (json.dumps({"type": "command", "id": 1, "action": f"trace{bad}"}), "action"),
        (json.dumps({"type": "error", "error": {"code": f"c{bad}", "message": "m"}}),
         "error.code"),
    ]


@pytest.mark.parametrize("bad", BAD_CHARACTERS, ids=[f"U+{ord(c):04X}" for c in BAD_CHARACTERS])
def test_names_refuse_control_bidi_separator_and_invisible_characters(bad):
    for raw, field in _frames_with_name(bad):
        err = explain(raw)
        assert err.details["field"] == field, (raw, err.message)
        assert err.message.startswith(
            f"invalid {json.loads(raw)['type']!r} frame: {field}: must not contain control "
            f"characters, bidi controls, line separators or invisible characters (found "
            f"U+{ord(bad):04X} at index "), err.message


@pytest.mark.parametrize("name", [
    "QueryInventory", "inventory.query", "query_inventory", "text-gen/v2", "Sales Query",
    "order-analysis", "probe.echo", "订单分析", "ag-1f2e3d4c5b6a7988", "données.lire", "a:b@c+d",
])
def test_ordinary_names_stay_valid(name):
    frame = p.parse(json.dumps({"type": "register", "name": name, "version": name,
                                "instance": name,
                                "capabilities": [{"name": name, "tags": [name]}]}))
    assert frame.name == frame.capabilities[0].name == frame.capabilities[0].tags[0] == name
    assert p.parse(json.dumps({"type": "hello", "caller": name})).caller == name


def test_free_text_keeps_printable_unicode():
    spec = p.parse(json.dumps({"type": "register", "name": "a", "capabilities": [{
        "name": "sales.query", "intents": ["查一下销售额", "sales figures", "मदद\u200dकरो"],
        "description": "Quarterly sales.\n\tBy region: 华东, west — ok ✓ 👩\u200d💻"}]})
    ).capabilities[0]
    assert spec.intents[0] == "查一下销售额" and "\n\t" in spec.description
    submit = p.parse(_submit(intent="查一下上季度华东区的销售额\n谢谢"))
    assert submit.intent.startswith("查一下")


@pytest.mark.parametrize("bad", ["\x1b", "\r", "\x00", "\u202e", "\u2028", "\x85"])
def test_free_text_refuses_control_and_bidi_characters(bad):
    base = {"type": "register", "name": "a", "capabilities": [{"name": "x"}]}
    err = explain(json.dumps({**base, "capabilities": [{"name": "x", "description": f"d{bad}"}]}))
    assert err.details["field"] == "capabilities.0.description"
    assert "must not contain control characters other than \\n and \\t" in err.message
    err = explain(json.dumps({**base, "capabilities": [{"name": "x", "intents": [f"i{bad}"]}]}))
    assert err.details["field"] == "capabilities.0.intents.0"
    assert "must not contain control characters (not even \\n or \\t)" in err.message
    err = explain(_submit(intent=f"find{bad}"))
    assert err.details["field"] == "intent"


def test_intents_refuse_newlines_but_description_keeps_them():
    base = {"type": "register", "name": "a"}
    err = explain(json.dumps({**base, "capabilities": [{"name": "x", "intents": ["a\nb"]}]}))
    assert "found U+000A at index 1" in err.message


def test_error_messages_are_cleaned_not_refused():
    frame = p.parse(json.dumps({"type": "error", "task_id": "t", "attempt": 1, "error": {
        "code": "task_failed", "message": "boom\x1b[31m red\r\nline2\ttab \u202eevil"}}))
    assert frame.error.message == "boom\\u001b[31m red\\u000d\nline2\ttab \\u202eevil"
    long = p.parse(json.dumps({"type": "error", "error": {"code": "c", "message": "é" * 50_000}}))
    assert len(long.error.message) == p.MAX_MESSAGE and long.error.message.endswith("…")


@pytest.mark.parametrize("value", [
    "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01", "00-" + "AB" * 16 + "-" + "CD" * 8 + "-00",
    " 00-" + "ab" * 16 + "-" + "cd" * 8 + "-01 ", "ff-" + "0" * 32 + "-" + "0" * 16 + "-ff",
])
def test_traceparents_that_traces_reads_are_accepted(value):
    assert p.parse(_submit(traceparent=value)).traceparent == value


@pytest.mark.parametrize("value", ["00-abc-def-01", "x", "", "00-" + "ab" * 16 + "-" + "cd" * 8
                                   + "-01\n", "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01-extra"])
def test_malformed_traceparents_are_refused(value):
    err = explain(_submit(traceparent=value))
    assert err.message == ("invalid 'submit' frame: traceparent: must be a W3C traceparent: "
                           "00-<32 hex>-<16 hex>-<2 hex>")


@pytest.mark.parametrize(("spec", "field", "words"), [
    ({"tags": ["t"] * 101}, "capabilities.0.tags", "at most 100 items"),
    ({"tags": ["t" * 101]}, "capabilities.0.tags.0", "at most 100 characters"),
    ({"tags": [""]}, "capabilities.0.tags.0", "at least 1 character"),
    ({"intents": ["i"] * 101}, "capabilities.0.intents", "at most 100 items"),
    ({"intents": ["i" * 501]}, "capabilities.0.intents.0", "at most 500 characters"),
    ({"description": "d" * 5001}, "capabilities.0.description", "at most 5000 characters"),
])
def test_lists_and_free_text_are_bounded(spec, field, words):
    err = explain(json.dumps({"type": "register", "name": "a",
                              "capabilities": [{"name": "x", **spec}]}))
    assert err.details["field"] == field and words in err.message, err.message


def test_capabilities_have_a_hard_upper_bound():
    caps = [{"name": f"c{i}.get"} for i in range(p.MAX_CAPABILITIES)]
    assert len(p.parse(json.dumps({"type": "register", "name": "a", "capabilities": caps}))
               .capabilities) == p.MAX_CAPABILITIES
    err = explain(json.dumps({"type": "register", "name": "a",
                              "capabilities": caps + [{"name": "one.more"}]}))
    assert err.message.startswith("invalid 'register' frame: capabilities: List should have "
                                  "at most 10000 items")


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                       st.text(max_size=20))
_json = st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(base=st.sampled_from(sorted(EXAMPLES)), key=st.text(max_size=12) | st.sampled_from(
    ["v", "type", "id", "task_id", "attempt", "inflight", "load", "name", "capabilities",
     "timeout", "traceparent", "error", "seq", "caller", "params"]), value=_json,
    depth=st.integers(0, 600))
def test_mutated_frames_are_a_frame_or_a_protocol_error(base, key, value, depth):
    obj = json.loads(p.dump(EXAMPLES[base]))
    obj[key] = value
    raw = json.dumps(obj)  # allow_nan: NaN and Infinity go out as bare words, as peers send
    if depth:
        raw = raw[:-1] + ', "zz": ' + _deep(depth) + "}"
    try:
        frame = p.parse(raw)
    except ProtocolError as exc:
        assert exc.message and len(exc.message) < 1000
        rid = p.request_id(raw)
        assert rid is None or isinstance(rid, int)
    else:
        assert isinstance(frame, p.Frame)
