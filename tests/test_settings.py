"""``Settings`` refuses every number it cannot run by, naming the field, and only binds beyond
loopback without tokens when told the network is trusted (reach/config.py)."""

from __future__ import annotations

from typing import Any

import pytest

from reach import Reach
from reach.config import Settings, loopback

POSITIVE = ("heartbeat_interval", "ack_timeout", "max_frame_bytes", "max_capabilities",
            "max_schema_bytes", "max_connections", "max_pending_per_address", "hello_timeout",
            "max_outbox_bytes", "max_caller_tasks", "recent_bytes", "dead_letters_max",
            "dead_letter_retention", "idempotency_keys_max")


def test_the_defaults_are_valid() -> None:
    s = Settings()
    assert s.host == "127.0.0.1" and s.tokens is None and not s.insecure


@pytest.mark.parametrize("name", POSITIVE)
@pytest.mark.parametrize("value", [0, -1])
def test_a_bound_that_is_not_positive_is_refused_by_name(name: str, value: int) -> None:
    with pytest.raises(ValueError, match=f"^{name} must be positive$"):
        Settings(**{name: value})


@pytest.mark.parametrize("fields", [{"retry_budget": -0.1}, {"retry_budget": 100.5},
                                    {"retry_budget_min": -1}])
def test_a_retry_budget_out_of_range_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="retry_budget must be in 0..100"):
        Settings(**fields)


@pytest.mark.parametrize("fields", [{"retry_budget": 0}, {"retry_budget": 100},
                                    {"retry_budget_min": 0}])
def test_the_retry_budget_edges_are_accepted(fields: dict[str, Any]) -> None:
    s = Settings(**fields)
    assert all(getattr(s, k) == v for k, v in fields.items())


@pytest.mark.parametrize("fields", [{"queue_wait": -0.001}, {"max_retries": -1}])
def test_negative_queue_wait_or_retries_are_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="queue_wait and max_retries must not be negative"):
        Settings(**fields)


def test_zero_queue_wait_and_retries_are_allowed() -> None:
    s = Settings(queue_wait=0, max_retries=0)
    assert (s.queue_wait, s.max_retries) == (0, 0)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "::", "example.com"])
def test_an_open_bind_beyond_loopback_is_refused(host: str) -> None:
    with pytest.raises(ValueError, match=f"refusing to bind {host!r} without tokens"):
        Settings(host=host)


@pytest.mark.parametrize("host", ["0.0.0.0", "example.com"])
def test_a_bind_beyond_loopback_is_allowed_with_tokens_or_insecure(host: str) -> None:
    assert Settings(host=host, tokens={"t": "p"}).host == host
    assert Settings(host=host, insecure=True).insecure


@pytest.mark.parametrize(("host", "expected"), [
    ("localhost", True), ("127.0.0.1", True), ("127.9.9.9", True), ("::1", True),
    ("0.0.0.0", False), ("192.168.0.1", False), ("::", False), ("localhost.evil", False),
    ("", False)])
def test_loopback_names_only_this_machine(host: str, expected: bool) -> None:
    assert loopback(host) is expected


def test_reach_start_refuses_unknown_options_and_mixing_settings_with_options() -> None:
    with pytest.raises(TypeError, match=r"unknown Reach option\(s\): \['heartbeat'\]"):
        Reach.start(heartbeat=1.0)
    with pytest.raises(TypeError, match="either a Settings object or keyword options"):
        Reach.start(Settings(), port=0)
    with pytest.raises(ValueError, match="ack_timeout must be positive"):
        Reach.start(ack_timeout=0)
