"""What the REST door shows of a cluster: a node's ``GET /v1/capabilities`` lists its peers'
agents beside its own, each with the node holding it."""

from __future__ import annotations

import aiohttp
from peering import Nodes, echo_agent, link, until


async def test_the_rest_capability_list_names_each_agents_node(nodes: Nodes) -> None:
    a, b = await nodes.node("A", http_port=0), await nodes.node("B")
    await nodes.serve(echo_agent("near"), a.url)
    await nodes.serve(echo_agent("far"), b.url)
    await link(a, b)
    await until(lambda: len(a.registry.by_id) == 2)
    assert a.http_url is not None
    async with aiohttp.ClientSession() as http, \
            http.get(a.http_url + "/v1/capabilities") as response:
        assert response.status == 200
        body = await response.json()
    (echo,) = body["capabilities"]
    assert echo["agent_count"] == 2
    assert sorted((o["name"], o["kind"], o["node"]) for o in echo["agents"]) == [
        ("far", "peer", "B"), ("near", "websocket", "A")]
