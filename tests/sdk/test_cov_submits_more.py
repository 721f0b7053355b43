"""A submit the coordinator would refuse is refused by the client first (reach/sdk/submits.py),
over a real loopback coordinator: the call raises at once with the stable code, nothing reaches
the coordinator (no task, the agent never runs), and the connection carries on."""

from __future__ import annotations

from typing import Any

import pytest

from reach import InvalidParams, ReachError, ReachTimeout
from reach.testing import Cluster


@pytest.mark.parametrize(("params", "kind"), [("region=east", "str"), ([1, 2], "list")])
async def test_params_that_are_not_a_dict_are_refused_before_sending(
        reach_cluster: Cluster, params: Any, kind: str) -> None:
    runs: list[dict[str, Any]] = []

    async def echo(**kw: Any) -> dict[str, Any]:
        runs.append(kw)
        return kw

    await reach_cluster.add_agent("echoer", {"echo.run": echo})
    client = await reach_cluster.client()
    with pytest.raises(InvalidParams) as err:
        await client.call("echo.run", params)
    assert err.value.code == "invalid_params"
    assert err.value.message == (f"params must be a dict of name: value (a JSON object), not "
                                 f"{kind}: call(capability, {{'name': value}})")
    with pytest.raises(InvalidParams, match="params must be a dict"):
        await client.submit("echo.run", params)
    assert runs == [] and reach_cluster.reach.traces() == []  # no task was made
    assert await client.call("echo.run", {"x": 1}) == {"x": 1}  # the connection carries on
    assert len(reach_cluster.reach.traces()) == 1


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"priority": 10}, InvalidParams, "priority must be 0..9 (9 highest), not 10"),
    ({"max_retries": 101}, InvalidParams, "max_retries must be 0..100, not 101"),
    ({"idempotency_key": "k" * 401}, InvalidParams,
     "capability names are at most 200 characters, keys at most 400"),
    ({"timeout": 0}, ReachTimeout, "the deadline has already passed (timeout=0)"),
])
async def test_out_of_range_options_are_refused_before_sending(
        reach_cluster: Cluster, options: dict[str, Any], error: type[ReachError],
        message: str) -> None:
    client = await reach_cluster.client()
    with pytest.raises(error) as err:
        await client.submit("echo.run", {}, **options)
    assert err.value.message == message
    assert reach_cluster.reach.traces() == []  # no task was made
