"""In a cluster, a call prefers an agent of its own node among equally good ones (issue 29
item 5). The weighted strategy broke ties at random, so a call on A went over the peer link to
B's agent about half the time while A's own, as idle and as good, stood free: a hop each way
for nothing. Now a tie goes to the local agent; a clearly better one elsewhere still wins.

Real coordinators linked by ``reach.peers.add``, real agents and clients over loopback; the
pure rule under them is in tests/core/test_routing_local_first.py."""

from __future__ import annotations

from collections import Counter

from peering import Nodes, echo_agent, link, view


async def calls_by(nodes: Nodes, url: str, n: int = 20) -> Counter[str]:
    client = await nodes.client(url)
    return Counter([(await client.call("text.echo", {"text": str(i)}, timeout=5))["by"]
                    for i in range(n)])  # one at a time: each finds both agents idle


async def test_idle_agents_on_both_nodes_each_node_calls_its_own(nodes: Nodes) -> None:
    a, b = await nodes.node("A"), await nodes.node("B")
    await nodes.serve(echo_agent("echo-a"), a.url)
    await nodes.serve(echo_agent("echo-b"), b.url)
    await link(a, b)
    assert (view(a, "echo-b")["node"], view(b, "echo-a")["node"]) == ("B", "A")
    # 20 fair coin flips all landing on one side: about 1e-6 before the change
    assert await calls_by(nodes, a.url) == {"echo-a": 20}
    assert await calls_by(nodes, b.url) == {"echo-b": 20}
    assert view(a, "echo-b")["calls"] == 0  # no attempt of A's rode the peer link


async def test_a_clearly_better_agent_on_the_other_node_still_wins(nodes: Nodes) -> None:
    a, b = await nodes.node("A"), await nodes.node("B")
    await nodes.serve(echo_agent("echo-a"), a.url)
    await nodes.serve(echo_agent("echo-b", weight=150.0), b.url)
    await link(a, b)
    assert await calls_by(nodes, a.url, 10) == {"echo-b": 10}
