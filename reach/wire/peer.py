"""The peer link's frames: one coordinator's session at another (docs/protocol.md §14).

Node A opens one websocket to node B and says ``hello`` with ``role: "peer"`` and a nonce;
B answers with a ``challenge`` (its node, its nonce, its proof of the peer secret), A with a
``proof`` of its own, and only then B with a ``welcome`` (reach.cluster.handshake: neither
side sends the secret). Over the link:

    B → A : welcome (role peer, node), agents (B's own agents: a snapshot, then changes),
            ack, chunk, result, error (of the attempts A forwarded)
    A → B : forward (an invoke naming one of B's agents), cancel

Everything but ``forward`` and ``agents`` is a frame of reach.wire.protocol, with the same
meaning as on an agent session: a forwarded attempt is answered as an agent answers an
invoke. Each side parses only what the other may send (``parse_at_holder`` at B,
``parse_at_caller`` at A), bounded as every other frame is.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from reach.errors import ProtocolError
from reach.wire import protocol as p
from reach.wire.bounds import FRAME_TYPES, MAX_COUNT, MAX_LOAD, Name
from reach.wire.explain import explain, not_an_object, starts_object
from reach.wire.numbers import check_parsed

__all__ = ["AgentRow", "Agents", "Challenge", "Forward", "MAX_ROWS", "Proof", "parse_answer",
           "parse_at_caller", "parse_at_holder", "parse_proof"]

#: Rows one ``agents`` frame may carry (the holder splits a larger snapshot).
MAX_ROWS = 10_000


Nonce = Annotated[str, Field(pattern=r"^[0-9a-f]{32,128}$")]
Mac = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class Challenge(p.Frame):
    """B → A, the answer to a peer hello: B's node id, B's nonce, and B's proof that it knows
    the peer secret (an HMAC over both nonces and both node ids; A checks it first)."""

    type: Literal["challenge"] = "challenge"
    node: Name = Field(max_length=200)
    nonce: Nonce
    proof: Mac


class Proof(p.Frame):
    """A → B, after checking B's challenge: A's proof that it knows the peer secret."""

    type: Literal["proof"] = "proof"
    proof: Mac


class Forward(p.Invoke):
    """A → B: run this attempt at B's agent ``agent_id`` (the invoke B passes on to it)."""

    type: Literal["forward"] = "forward"  # type: ignore[assignment]
    agent_id: Name = Field(max_length=200)


class AgentRow(BaseModel):
    """One of the holder's agents as its peers mirror it. ``capabilities`` comes when the
    peer has not seen this registration yet (null: unchanged since the last row); ``beat_age``
    is the seconds since its last heartbeat at the holder (ages, not times: no clock skew)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    agent_id: Name = Field(max_length=200)
    name: Name = Field(max_length=200)
    version: Name = Field(default="0", max_length=100)
    kind: Name = Field(default="websocket", max_length=100)
    instance: Name | None = Field(default=None, max_length=200)
    max_concurrency: int = Field(default=20, ge=1, le=100_000)
    capabilities: list[p.CapabilitySpec] | None = Field(default=None,
                                                        max_length=p.MAX_CAPABILITIES)
    heartbeat_interval: float = Field(default=10.0, gt=0, le=86_400)
    beat_age: float = Field(default=0.0, ge=0, le=1e9)
    connected: bool = True
    draining: bool = False
    held: bool = False  # suspected by its probes at the holder
    inflight: int = Field(default=0, ge=0, le=MAX_COUNT)
    load: float = Field(default=0.0, ge=0, le=MAX_LOAD)
    queue_depth: int = Field(default=0, ge=0, le=MAX_COUNT)


class Agents(p.Frame):
    """B → A: rows of B's own agents (never those B mirrors from others). ``synced`` ends a
    snapshot: an agent of B that A knows and the snapshot did not name is gone from B."""

    type: Literal["agents"] = "agents"
    rows: list[AgentRow] = Field(default_factory=list, max_length=MAX_ROWS)
    synced: bool = False


AtHolder = Annotated[Forward | p.Cancel, Field(discriminator="type")]
AtCaller = Annotated[Agents | p.Ack | p.Chunk | p.Result | p.Error, Field(discriminator="type")]
Answer = Annotated[Challenge | p.Welcome | p.Error, Field(discriminator="type")]
_AT_HOLDER: TypeAdapter[Any] = TypeAdapter(AtHolder)
_AT_CALLER: TypeAdapter[Any] = TypeAdapter(AtCaller)
_ANSWER: TypeAdapter[Any] = TypeAdapter(Answer)
_PROOF: TypeAdapter[Proof] = TypeAdapter(Proof)
# the frames only a peer link carries
PEER_TYPES = frozenset(("forward", "agents", "challenge", "proof"))
HOLDER_TAKES = ("forward", "cancel")
ANSWER_TAKES = ("challenge", "welcome", "error")
CALLER_TAKES = ("agents", "ack", "chunk", "result", "error")


def _parse(adapter: TypeAdapter[Any], raw: str | bytes) -> Any:
    if not starts_object(raw):
        raise not_an_object(raw)
    try:
        frame = adapter.validate_json(raw)
    except ValidationError as exc:
        raise _explained(raw, exc, adapter) from None
    check_parsed(frame, raw)  # NaN, Infinity or 1e400 in a payload, as on the session wire
    return frame


def _explained(raw: str | bytes, exc: ValidationError, adapter: TypeAdapter[Any]) -> Exception:
    err = explain(raw, exc)
    takes = (HOLDER_TAKES if adapter is _AT_HOLDER else CALLER_TAKES if adapter is _AT_CALLER
             else ANSWER_TAKES if adapter is _ANSWER else ("proof",))
    kind = err.details.get("type")
    errors = exc.errors(include_url=False)
    if kind in PEER_TYPES and kind in takes and errors[0].get("type") != "union_tag_invalid":
        # explain() knows the session frames only; a peer frame's own fields are said here
        where = ".".join(str(x) for x in errors[0].get("loc", ())[1:])[:200] or "frame"
        return ProtocolError(f"invalid {kind!r} frame: {where}: {errors[0]['msg']}",
                             type=kind, field=where)
    if (kind in FRAME_TYPES or kind in PEER_TYPES) and kind not in takes:
        err.message = (f"frame type {kind!r} is not accepted on a peer link here; it takes "
                       f"{', '.join(takes)}")
        err.details.pop("field", None)
        err.details["expected"] = list(takes)
    return err


def parse_at_holder(raw: str | bytes) -> Any:
    """A frame from a peer that forwards work here (``forward`` or ``cancel``), or raise
    ``ProtocolError`` saying what is wrong with it."""
    return _parse(_AT_HOLDER, raw)


def parse_at_caller(raw: str | bytes) -> Any:
    """A frame from the node holding agents (``agents`` or an answer to a forward)."""
    return _parse(_AT_CALLER, raw)


def parse_answer(raw: str | bytes) -> Any:
    """What a dialled node answers a peer hello with: ``challenge`` (a node of this version),
    ``error`` (a refusal) or ``welcome`` (one that proved nothing: never linked)."""
    return _parse(_ANSWER, raw)


def parse_proof(raw: str | bytes) -> Proof:
    """The dialer's ``proof``, the one frame a holder takes after its challenge."""
    result: Proof = _parse(_PROOF, raw)
    return result
