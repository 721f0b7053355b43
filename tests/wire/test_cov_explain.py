"""Explaining bad frames at the edges: a frame's own "deep" key, a too-deep frame with text
that is not even encodable, and a parser message that gives no position."""

from __future__ import annotations

import re

import pytest

from reach.errors import ProtocolError
from reach.wire import explain as ex
from reach.wire import protocol as p
from reach.wire.bounds import MAX_DEPTH


def why(raw: str | bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        p.parse(raw)
    return caught.value


def test_a_frames_own_deep_key_does_not_make_it_too_deep() -> None:
    # The flag that says "too deep" used to be read from the frame itself.
    err = why('{"v": 1, "type": "submit", "id": 1, "deep": true, "priority": "high"}')
    assert err.message.startswith("invalid 'submit' frame: priority:")
    assert err.details.get("field") == "priority"


def test_a_too_deep_frame_with_a_lone_surrogate_is_not_json() -> None:
    # Refused as text that is not unicode before its nesting is even read.
    raw = '{"type": "submit", "a": ' + "[" * (MAX_DEPTH + 50) + '"\ud800"' \
        + "]" * (MAX_DEPTH + 50) + "}"
    assert why(raw).message == ("frame is not valid JSON; send one JSON object per text "
                                "message")
    assert p.request_id(raw) is None


def test_a_parser_message_without_a_position_still_says_too_deep(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ex, "_COLUMN", re.compile(r"(?!)"))  # a parser that names no column
    raw = '{"v": 1, "type": "submit", "id": 7, "params": ' + "[" * (MAX_DEPTH + 50) \
        + "]" * (MAX_DEPTH + 50) + "}"
    err = why(raw)
    assert err.message == f"frame nests JSON more than {MAX_DEPTH} levels deep; flatten it"
    assert p.request_id(raw) is None  # the head could not be read either
