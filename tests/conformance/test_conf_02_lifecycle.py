"""docs/protocol.md §2, connection lifecycle: the first frame decides the role, a refusal is
one ``error`` frame then close 1008, a silent connection is closed at ``hello_timeout``, bad
frames later are answered and the session goes on, replacement closes the old connection
with 4000, identity survives reconnects, and the close codes of the table."""

from __future__ import annotations

from rawpeer import Peer, agent, caller

from reach import Reach

CAP = [{"name": "conf.life"}]


async def test_a_refused_first_frame_is_one_error_then_1008(reach: Reach) -> None:
    for first, code in [({"v": 1, "type": "submit", "id": 1}, "protocol_error"),
                        ({"v": 2, "type": "hello"}, "protocol_error"),
                        ("not json", "protocol_error"),
                        ({"v": 1, "type": "register", "name": "x",
                          "capabilities": [{"name": "a.b", "params": {"type": "nope"}}]},
                         "invalid_params")]:
        peer = await Peer.open(reach.url)
        await peer.send(first)
        error = await peer.recv()
        assert error["type"] == "error" and error["error"]["code"] == code, (first, error)
        assert "id" not in error and "task_id" not in error
        closed, reason = await peer.closed()
        assert closed == 1008
        assert reason and len(reason.encode()) <= 120
        assert error["error"]["message"].startswith(reason)


async def test_no_first_frame_within_hello_timeout_closes_with_1000() -> None:
    async with Reach.start(hello_timeout=0.05) as reach:
        peer = await Peer.open(reach.url)
        code, _ = await peer.closed()
        assert code == 1000 and peer.held == []  # no error frame


async def test_a_bad_frame_later_is_answered_and_the_session_goes_on(reach: Reach) -> None:
    boss = await caller(reach.url)
    await boss.send("{broken")
    assert (await boss.recv())["error"]["code"] == "protocol_error"
    await boss.send({"v": 1, "type": "status", "id": 5})  # invalid: no task_id
    reply = await boss.recv()
    assert reply["id"] == 5 and reply["error"]["code"] == "protocol_error"
    await boss.send({"v": 1, "type": "status", "id": 6, "task_id": "0" * 32})
    assert (await boss.recv())["id"] == 6


async def test_welcome_of_an_agent(reach: Reach) -> None:
    worker = await agent(reach.url, "welcomed", [{"name": "SalesQuery"}], beat=False)
    w = worker.welcome
    assert w["role"] == "agent" and w["agent_id"].startswith("ag-")
    assert w["capabilities"] == ["sales.query"]
    assert w["warnings"] == ["capability 'SalesQuery' registered as 'sales.query'"]
    assert w["heartbeat_interval"] > 0 and w["max_frame_bytes"] == 1 << 20


async def test_same_instance_replaces_with_4000_other_instance_is_unavailable(
        reach: Reach) -> None:
    """§2.7: the same process (same ``instance``) takes its name back and the older
    connection is closed with 4000; another process is refused ``unavailable`` + 1008."""
    old = await agent(reach.url, "twin", CAP, instance="p-1")
    stranger = await Peer.open(reach.url)
    await stranger.send({"v": 1, "type": "register", "name": "twin", "capabilities": CAP,
                         "instance": "p-2"})
    refused = await stranger.recv()
    assert refused["error"]["code"] == "unavailable"
    assert (await stranger.closed())[0] == 1008
    new = await agent(reach.url, "twin", CAP, instance="p-1")
    assert new.welcome["agent_id"] == old.welcome["agent_id"]
    code, reason = await old.closed()
    assert code == 4000 and "replaced" in reason


async def test_identity_survives_a_reconnect(reach: Reach) -> None:
    """§2.8: the same name gets the same agent_id after its connection is gone."""
    first = await agent(reach.url, "phoenix", CAP)
    agent_id = first.welcome["agent_id"]
    await first.close()
    second = await agent(reach.url, "phoenix", CAP)
    assert second.welcome["agent_id"] == agent_id


async def test_with_tokens_register_and_hello_need_one() -> None:
    """§2.5: with tokens configured, the token names the principal."""
    async with Reach.start(tokens={"t-a": "tok-agent", "t-c": "tok-caller"},
                           serves={"tok-agent": ["conf.*"]}) as reach:
        peer = await Peer.open(reach.url)
        await peer.send({"v": 1, "type": "hello", "caller": "tok-caller"})
        assert (await peer.recv())["error"]["code"] == "unauthorized"
        assert (await peer.closed())[0] == 1008
        await caller(reach.url, "tok-caller", token="t-c")
        await agent(reach.url, "tok-agent", CAP, token="t-a")


async def test_a_stopping_coordinator_closes_with_1001() -> None:
    reach = await Reach.start()
    try:
        worker = await agent(reach.url, "stayer", CAP, beat=False)
        boss = await caller(reach.url)
    finally:
        await reach.stop()
    assert (await worker.closed())[0] == 1001
    assert (await boss.closed())[0] == 1001
