"""Admission over several scopes that share a params schema: the params are validated once,
and invalid params are refused whichever scope the caller may use."""

from __future__ import annotations

from typing import Any

import pytest

from reach.core import routing
from reach.core.liveness import LivenessPolicy
from reach.core.registry import Registry
from reach.core.routing import Router
from reach.errors import InvalidParams
from reach.wire.protocol import CapabilitySpec

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_one_schema_shared_by_two_scopes_is_checked_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reg = Registry(LivenessPolicy())
    for name, scope in (("reader", "read"), ("writer", "write")):
        reg.register(agent_id=f"id-{name}", name=name, version="1", max_concurrency=2,
                     specs=[CapabilitySpec(name="x.work", params=SCHEMA, scope=scope)],
                     link=None, now=0.0)
    declaring = reg.declaring("x.work")
    assert len(declaring.groups) == 2  # one group per scope, the same compiled validator
    calls: list[Any] = []
    check = routing.check

    def counting(validator: Any, params: Any) -> str | None:
        calls.append(params)
        return check(validator, params)

    monkeypatch.setattr(routing, "check", counting)
    router = Router()
    with pytest.raises(InvalidParams, match="params for 'x.work' are invalid"):
        router.admit("x.work", {"n": "one"}, "caller", declaring, reg.names)
    assert calls == [{"n": "one"}]  # the second scope reused the first verdict
    calls.clear()
    router.admit("x.work", {"n": 1}, "caller", declaring, reg.names)
    assert calls == [{"n": 1}]
