"""``returns`` passes through every way of declaring a capability: an adapter's table (a dict
or a pydantic model, as the SDK takes), a ``reach serve --agents`` TOML file, and
``reach.testing``'s ``add_agent``."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from reach import TaskFailed
from reach.adapters.base import declare
from reach.adapters.config import parse_agents
from reach.testing import Cluster

RETURNS = {"type": "object", "required": ["total"], "properties": {"total": {"type": "number"}}}


class Quote(BaseModel):
    total: float


def test_an_adapter_table_takes_a_schema_or_a_model() -> None:
    got = declare("shop", {"a.quote": {"returns": RETURNS}, "b.quote": {"returns": Quote},
                           "c.quote": {}}, frozenset())
    assert got["a.quote"].spec.returns == RETURNS
    model = got["b.quote"].spec.returns
    assert model is not None and model["required"] == ["total"]
    assert got["c.quote"].spec.returns is None


def test_an_adapter_table_with_a_returns_of_the_wrong_kind_names_it() -> None:
    with pytest.raises(ValueError, match=r"capability 'a.quote': returns: returns must be"):
        declare("shop", {"a.quote": {"returns": 42}}, frozenset())


def test_an_agents_file_declares_returns_as_a_table() -> None:
    [http] = parse_agents('''
[[agent]]
kind = "http"
name = "orders"
url = "http://127.0.0.1:9"

[agent.capabilities."orders.total"]
path = "/total"
returns = { type = "object", required = ["total"] }
''')
    [spec] = http.specs
    assert spec.returns == {"type": "object", "required": ["total"]}


async def test_add_agent_passes_returns_to_every_capability() -> None:
    cluster = await Cluster.start()
    try:
        await cluster.add_agent("shop", {"x.quote": lambda: {"amount": 1}}, returns=RETURNS)
        client = await cluster.client()
        with pytest.raises(TaskFailed) as failed:
            await client.call("x.quote", {}, timeout=5)
        assert failed.value.details["remote"]["code"] == "bad_result"
    finally:
        await cluster.close()
