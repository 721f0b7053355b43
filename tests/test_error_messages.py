"""Errors that say what they know (issue 14, item 4), through a real coordinator: ``NoRoute``
shows what the caller typed and "did you mean"; ``unavailable`` says what holds each agent
back (a drained agent is "drained by an operator", not "not online") and names no method a
remote client lacks."""

from __future__ import annotations

import pytest

from reach.errors import NoRoute, Unavailable
from reach.testing import Cluster


async def test_a_misspelled_name_is_shown_as_typed_with_the_closest_names() -> None:
    cluster = await Cluster.start()
    try:
        async def query(region: str) -> str:
            return region

        await cluster.add_agent("sales", {"sales.query": query})
        client = await cluster.client("planner")
        with pytest.raises(NoRoute) as err:
            await client.call("Sales.Querry", {"region": "east"})
        assert err.value.message == ("no agent declares 'Sales.Querry' (read as "
                                     "'sales.querry'); did you mean 'sales.query'?")
        assert err.value.suggestions == ["sales.query"]
        with pytest.raises(NoRoute) as err:
            await client.call("weather.forecast", {})
        assert err.value.message == ("no agent declares 'weather.forecast'; check the name or "
                                     "connect an agent that offers it")
    finally:
        await cluster.close()


async def test_a_drained_agent_is_reported_as_drained() -> None:
    cluster = await Cluster.start()
    try:
        async def write(entry: str) -> str:
            return entry

        await cluster.add_agent("ledger-writer", {"ledger.write": write})
        client = await cluster.client("planner")
        cluster.reach.drain("ledger-writer")
        with pytest.raises(Unavailable) as err:
            await client.call("ledger.write", {"entry": "x"})
        assert err.value.message == ("1 agent(s) declare 'ledger.write' but none can take it "
                                     "now: ledger-writer drained by an operator; retry shortly")
        assert "reach.agents" not in err.value.message
    finally:
        await cluster.close()
