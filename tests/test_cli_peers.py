"""``reach serve``'s peer-link flags: ``--node-id``, ``--peer-token`` and ``--peer``. Two
real ``reach serve`` processes named as each other's peers behave as one Reach, and a bad
flag is refused in one line before anything starts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from subprocs import Proc, free_port, start_coordinator

from reach import Agent, Client
from reach.cli import main
from reach.errors import ReachError

TOKEN = "shared-peer-secret"


@pytest.mark.parametrize(("flags", "message"), [
    (["--peer", "http://127.0.0.1:8765"], "give another coordinator's websocket URL"),
    (["--peer", "ws://127.0.0.1"], "with its port"),
    (["--peer", "ws://127.0.0.1:notaport"], "with its port"),
    (["--peer", "ws://127.0.0.1:9"], "--peer needs --peer-token"),
    (["--peer-token", " "], "--peer-token must not be empty"),
    (["--node-id", "node one"], "--node-id 'node one': give a short name without spaces"),
    (["--node-id", ""], "--node-id '': give a short name"),
])
def test_a_bad_peer_flag_is_refused_in_one_line_before_it_binds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str],
        message: str) -> None:
    db = tmp_path / "r.db"
    assert main(["serve", "--port", "0", "--no-http", "--store", f"sqlite:///{db}",
                 *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("reach: ") and message in err and err.count("\n") == 1
    assert not db.exists()


def test_the_peer_flags_are_explained_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for flag in ("--node-id ID", "--peer-token TOKEN", "--peer URL", "peer links",
                 "repeat for each peer", "same one on every node"):
        assert flag in out


async def _call_until_routed(client: Client, timeout: float = 20.0) -> Any:
    """The first call that finds the agent: the caller's node mirrors it once linked."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                return await client.call("job.run", {"n": 41}, timeout=5)
            except ReachError as exc:
                if exc.code not in ("no_route", "unavailable"):
                    raise
                await asyncio.sleep(0.05)


async def test_two_serve_processes_named_as_peers_reach_each_others_agents(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    pa, pb = free_port(), free_port()
    a = start_coordinator(spawn, "A", pa, tmp_path / "a.db", "--no-http", "--node-id", "A",
                          "--peer-token", TOKEN, "--peer", f"ws://127.0.0.1:{pb}")
    b = start_coordinator(spawn, "B", pb, tmp_path / "b.db", "--no-http", "--node-id", "B",
                          "--peer-token", TOKEN, "--peer", f"ws://127.0.0.1:{pa}",
                          "--peer", f"ws://127.0.0.1:{pb}")  # (itself: skipped)
    assert "node A; peers: ws://127.0.0.1:" in await a.wait_for("reach: node")
    await b.wait_for("listening on")
    agent = Agent("far", reconnect_base=0.02)

    @agent.capability("job.run", idempotent=True)
    async def job(n: int) -> dict[str, Any]:
        return {"n": n + 1}

    await agent.connect(f"ws://127.0.0.1:{pb}")
    try:
        async with Client.connect(f"ws://127.0.0.1:{pa}", caller="bob") as client:
            assert await _call_until_routed(client) == {"n": 42}
            task = await client.submit("job.run", {"n": 1})
            assert await task.result(timeout=5) == {"n": 2}
    finally:
        await agent.close(drain=1.0)
