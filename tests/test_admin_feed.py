"""The admin feed (docs/admin-feed.md) over a real loopback websocket: token, snapshot, deltas,
and every command."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from reach import ReachError, TaskFailed
from reach.testing import Cluster
from reach.wire import admin
from reach.wire import protocol as p

TOKEN = "s3cret"


class Feed:
    """A minimal admin-feed client: frames in arrival order, commands answered by id. Every
    frame it reads must also parse as the models of reach.wire.admin (the dashboard's)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    async def read(self) -> dict[str, Any]:
        raw = await self.ws.recv()
        admin.parse_admin(raw)
        frame: dict[str, Any] = json.loads(raw)
        return frame

    @classmethod
    async def open(cls, url: str, token: str = TOKEN) -> tuple[Feed, dict[str, Any]]:
        ws = await websockets.connect(url, max_size=None)
        await ws.send(json.dumps({"v": 1, "type": "admin", "token": token}))
        feed = cls(ws)
        return feed, await feed.read()

    async def next(self, kind: str, timeout: float = 3.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                frame = await self.read()
                if frame["type"] == kind:
                    return frame

    async def until(self, predicate: Any, timeout: float = 3.0) -> dict[str, Any]:
        """The first delta that satisfies ``predicate``."""
        async with asyncio.timeout(timeout):
            while True:
                frame = await self.read()
                if frame["type"] == "delta" and predicate(frame):
                    return frame

    async def command(self, action: str, **args: Any) -> dict[str, Any]:
        cid = next(self.ids)
        await self.ws.send(json.dumps({"v": 1, "type": "command", "id": cid, "action": action,
                                       "args": args}))
        async with asyncio.timeout(5):
            while True:
                frame = await self.read()
                if frame["type"] == "reply" and frame["id"] == cid:
                    return frame


@pytest.fixture
async def cluster() -> Any:
    c = await Cluster.start(admin_token=TOKEN, max_retries=0)
    yield c
    await c.close()


async def test_a_wrong_token_is_refused_clearly(cluster: Cluster) -> None:
    ws = await websockets.connect(cluster.url)
    await ws.send(json.dumps({"v": 1, "type": "admin", "token": "nope"}))
    frame = json.loads(await ws.recv())
    assert frame["type"] == "error" and frame["error"]["code"] == "unauthorized"
    assert "admin token" in frame["error"]["message"]
    with pytest.raises(ConnectionClosed) as info:
        await ws.recv()
    assert info.value.rcvd is not None and info.value.rcvd.code == 1008


async def test_without_a_configured_token_a_random_one_is_required() -> None:
    c = await Cluster.start()
    try:
        assert len(c.reach.admin_token) >= 20
        ws = await websockets.connect(c.url)
        await ws.send(json.dumps({"v": 1, "type": "admin"}))
        assert json.loads(await ws.recv())["error"]["code"] == "unauthorized"
        await ws.close()
        feed, snap = await Feed.open(c.url, c.reach.admin_token)
        assert snap["type"] == "snapshot"
        await feed.ws.close()
    finally:
        await c.close()


async def test_snapshot_then_live_deltas(cluster: Cluster) -> None:
    async def echo(n: int) -> int:
        return n

    async def broken() -> None:
        raise RuntimeError("bad deploy")

    await cluster.add_agent("one", {"x.echo": echo, "x.broken": broken})
    client = await cluster.client("planner")
    await client.call("x.echo", {"n": 1})
    feed, snap = await Feed.open(cluster.url)
    assert snap["type"] == "snapshot"
    assert snap["coordinator"]["url"] == cluster.url
    assert [a["name"] for a in snap["agents"]] == ["one"]
    agent = snap["agents"][0]
    for field in ("state", "inflight", "max_concurrency", "p95_ms", "faults", "breaker",
                  "breaker_detail", "since_heartbeat_s", "last_beat", "capabilities"):
        assert field in agent
    assert len(snap["traces"]) == 1 and snap["traces"][0]["state"] == "succeeded"
    assert snap["dead_letters"] == [] and snap["metrics"]["totals"]["calls"] == 1

    with pytest.raises(TaskFailed):
        await client.call("x.broken", {})
    delta = await feed.until(lambda d: d["dead_letters"])
    letter = delta["dead_letters"][0]
    assert (letter["capability"], letter["agent"], letter["caller"]) == ("x.broken", "one",
                                                                        "planner")
    assert "bad deploy" in letter["error"]["message"] and len(letter["attempts"]) == 1
    assert delta["metrics"]["capabilities"]["x.broken"]["faults"] == 1
    # the task's last transition and its dead letter are published together: one delta
    assert [t["state"] for t in delta["traces"]] == ["dead"]

    # with nothing happening, a delta still comes about once a second (heartbeat ages)
    quiet = await feed.next("delta", timeout=2.5)
    assert [a["name"] for a in quiet["agents"]] == ["one"]
    await feed.ws.close()


async def test_replay_commands_and_outcomes(cluster: Cluster) -> None:
    broken = {"on": True}

    async def write(n: int) -> int:
        if broken["on"]:
            raise RuntimeError("bad deploy")
        return n

    await cluster.add_agent("one", {"x.write": write})
    client = await cluster.client()
    for n in range(4):
        with pytest.raises(TaskFailed):
            await client.call("x.write", {"n": n})
    feed, snap = await Feed.open(cluster.url)
    ids = [d["task_id"] for d in snap["dead_letters"]]
    assert len(ids) == 4

    reply = await feed.command("replay", task_id=ids[0], wait=5)
    assert reply["ok"] and reply["result"]["state"] == "dead"  # still broken

    broken["on"] = False
    # five faults opened the agent's breaker: the operator closes it after the fix
    assert (await feed.command("reset_breaker", agent="one"))["result"]["breaker"] == "closed"
    reply = await feed.command("replay", task_id=ids[0], wait=5)
    assert reply["ok"] and reply["result"]["state"] == "succeeded"
    await feed.until(lambda d: ids[0] in d["resolved"])

    reply = await feed.command("replay_filter", capability="x.write", error="BAD DEPLOY")
    assert reply["ok"] and sorted(reply["result"]["replayed"]) == sorted(ids[1:])
    resolved: set[str] = set()
    await feed.until(lambda d: resolved.update(d["resolved"]) or resolved >= set(ids[1:]))
    assert cluster.reach.dead_letters() == []

    bad = await feed.command("replay", task_id="nope")
    assert not bad["ok"] and bad["error"]["code"] == "invalid_params"
    bad = await feed.command("replay_filter", colour="red")
    assert not bad["ok"] and "colour" in bad["error"]["message"]
    bad = await feed.command("launch")
    assert not bad["ok"] and "unknown admin action" in bad["error"]["message"]
    bad = await feed.command("replay")  # missing task_id
    assert not bad["ok"] and bad["error"]["code"] == "invalid_params"
    await feed.ws.close()


async def test_drain_undrain_reset_breaker_and_trace(cluster: Cluster) -> None:
    async def echo(n: int) -> int:
        return n

    async def broken() -> None:
        raise RuntimeError("boom")

    await cluster.add_agent("one", {"x.echo": echo, "x.broken": broken})
    client = await cluster.client()
    feed, _ = await Feed.open(cluster.url)

    reply = await feed.command("drain", agent="one")
    assert reply["ok"] and reply["result"]["draining"] and reply["result"]["state"] != "online"
    with pytest.raises(Exception) as info:
        await client.call("x.echo", {"n": 1})
    assert getattr(info.value, "code", "") == "unavailable"
    reply = await feed.command("undrain", agent="one")
    assert reply["ok"] and reply["result"]["state"] == "online"
    assert await client.call("x.echo", {"n": 2}) == 2

    for _ in range(4):  # with the success before: 4 faults in 5 calls
        with pytest.raises(TaskFailed):
            await client.call("x.broken", {})
    assert cluster.reach.agents()[0]["breaker"] == "open"
    await feed.until(lambda d: any(a["breaker"] == "open" for a in d["agents"]))
    reply = await feed.command("reset_breaker", agent="one")
    assert reply["ok"] and reply["result"]["breaker"] == "closed"
    assert await client.call("x.echo", {"n": 3}) == 3

    handle = await client.submit("x.echo", {"n": 4})
    await handle.result(timeout=5)
    reply = await feed.command("trace", trace_id=handle.trace_id)
    assert reply["ok"]
    line = reply["result"]
    assert admin.Timeline.model_validate(line).hops[-1].phase == "done"
    assert line["tasks"][0]["task_id"] == handle.task_id
    assert [h["phase"] for h in line["hops"]][-1] == "done"

    bad = await feed.command("drain", agent="ghost")
    assert not bad["ok"] and "ghost" in bad["error"]["message"]
    await feed.ws.close()


async def test_a_slow_reader_gets_a_fresh_snapshot_instead_of_stalling_routing(
        cluster: Cluster) -> None:
    async def echo(n: int) -> int:
        return n

    await cluster.add_agent("one", {"x.echo": echo})
    client = await cluster.client()
    feed, _ = await Feed.open(cluster.url)
    sub = next(iter(cluster.reach.events._subs))
    sub._maxsize = 5  # a reader this far behind loses events, never the coordinator's time
    await asyncio.gather(*(client.call("x.echo", {"n": n}) for n in range(20)))
    snap = await feed.next("snapshot")
    assert snap["metrics"]["totals"]["calls"] == 20
    await feed.ws.close()


async def test_commands_are_refused_before_the_admin_hello(cluster: Cluster) -> None:
    ws = await websockets.connect(cluster.url)
    await ws.send(json.dumps({"v": 1, "type": "command", "id": 1, "action": "drain",
                              "args": {"agent": "one"}}))
    frame = json.loads(await ws.recv())
    assert frame["error"]["code"] == "protocol_error"
    assert "'admin'" in frame["error"]["message"]


def test_the_admin_models_read_the_documented_shapes() -> None:
    """The snapshot of docs/admin-feed.md, as the coordinator writes it (None kept inside)."""
    view = {"name": "a", "agent_id": "ag-1", "state": "online", "p95_ms": None,
            "breaker_detail": {"state": "closed", "fault_rate": 0.0, "window": 0,
                               "window_size": 10, "next_probe_in_s": None}}
    snap = p.unchecked(admin.Snapshot)(
        at=1.0, coordinator={"url": "ws://x", "version": "0", "started_at": 0.0, "store": "s"},
        agents=[view], traces=[], dead_letters=[], metrics={"capabilities": {}, "agents": {},
                                                            "totals": {"calls": 1}})
    text = admin.dump_admin(snap)
    assert json.loads(text)["agents"][0]["p95_ms"] is None  # documented as null, not absent
    back = admin.parse_admin(text)
    assert isinstance(back, admin.Snapshot) and back.agents[0].agent_id == "ag-1"
    assert back.metrics.totals.calls == 1
    reply = admin.parse_admin(admin.dump_admin(p.unchecked(admin.Reply)(id=3, ok=True,
                                                                        result={"x": 1})))
    assert isinstance(reply, admin.Reply) and reply.result == {"x": 1} and reply.error is None
    with pytest.raises(ReachError):
        admin.parse_admin('{"v": 1, "type": "invoke"}')
