"""``reach serve``'s failure and shutdown paths: unreadable and ill-shaped rules files, a bad
``--agents`` file, an agent that cannot attach, a taken port (each refused in one line, no
traceback), JSON logs on stdout, and SIGTERM/SIGINT draining to a clean exit."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from rich.console import Console
from subprocs import free_port, start_coordinator

from reach import Agent, Client, demo_adapters
from reach.cli import main
from reach.cli_inputs import rules as _rules
from reach.demo import run_demo


@pytest.fixture
def taken() -> Iterator[int]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        yield int(s.getsockname()[1])
    finally:
        s.close()


def test_rules_files_are_read_as_objects_of_principals_or_patterns(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"t1": "alice"}))
    calls = tmp_path / "calls.json"
    calls.write_text(json.dumps({"alice": ["sales.*", "scope:read"]}))
    assert _rules(None, str) is None
    assert _rules(tokens, str) == {"t1": "alice"}
    assert _rules(calls, list) == {"alice": ("sales.*", "scope:read")}


@pytest.mark.parametrize(("content", "kind", "message"), [
    (None, str, "cannot read"),
    ("{not json", str, "cannot read"),
    ('["t1", "alice"]', str, "must be a JSON object of name -> principal"),
    ('{"t1": ["alice"]}', str, "must be a JSON object of name -> principal"),
    ('{"alice": "sales.*"}', list, "must be a JSON object of name -> list of patterns"),
])
def test_a_rules_file_that_cannot_be_used_stops_serve_before_it_binds(
        tmp_path: Path, content: str | None, kind: type, message: str) -> None:
    path = tmp_path / "rules.json"
    if content is not None:
        path.write_text(content)
    flag = "--tokens-file" if kind is str else "--permissions-file"
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", "0", "--store", "sqlite://", flag, str(path)])
    assert str(exited.value).startswith(f"reach: {path}" if "must" in message
                                        else f"reach: cannot read {path}")
    assert message in str(exited.value)


def test_invalid_settings_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--port", "0", "--store", "sqlite://", "--ack-timeout", "0"]) == 2
    err = capsys.readouterr().err
    assert err == "reach: ack_timeout must be positive\n"


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot read it"),
    ("[[agent]\n", "not valid TOML"),
    ("[other]\nx = 1\n", "unknown top-level key(s) ['other']"),
])
def test_a_bad_agents_file_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None,
        message: str) -> None:
    path = tmp_path / "agents.toml"
    if content is not None:
        path.write_text(content)
    assert main(["serve", "--port", "0", "--store", "sqlite://", "--agents", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"reach: {path}") and message in err and len(err.splitlines()) == 1


def test_an_agent_that_cannot_attach_stops_serve_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dead = free_port()  # nothing listens there: its OpenAPI document cannot be read
    agents = tmp_path / "agents.toml"
    agents.write_text(f'[[agent]]\nkind = "http"\nname = "legacy"\n'
                      f'url = "http://127.0.0.1:{dead}"\nopenapi_url = "/openapi.json"\n')
    assert main(["serve", "--port", "0", "--no-http", "--store", "sqlite://",
                 "--agents", str(agents)]) == 2
    out = capsys.readouterr()
    assert out.err.startswith("reach: agent 'legacy': could not read its OpenAPI document")
    assert len(out.err.splitlines()) == 1 and "listening on" not in out.out


def test_a_taken_port_is_one_line_exit_2_and_creates_no_database(
        taken: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 14: a second server on a taken port printed a traceback and had already created
    its database file. Now: one line naming the port and the flag to change, nothing made."""
    db = tmp_path / "second.db"
    for flags, flag in ((["--port", str(taken), "--no-http"], "--port"),  # the websocket port
                        (["--port", "0", "--http-port", str(taken)], "--http-port")):
        assert main(["serve", "--store", f"sqlite:///{db}", *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"reach: port {taken} on 127.0.0.1 is taken (another `reach "
                              f"serve`?)") and f"with {flag} PORT ({flag} 0 picks" in err
        assert len(err.splitlines()) == 1
        assert not db.exists()


@pytest.mark.parametrize(("sig", "http"), [(signal.SIGTERM, True), (signal.SIGINT, False)])
async def test_a_signal_drains_in_flight_work_and_exits_0(
        spawn: Any, tmp_path: Path, sig: signal.Signals, http: bool) -> None:
    port = free_port()
    agents = tmp_path / "agents.toml"  # an agent that does not speak Reach, attached at start
    tool = Path(__file__).parent / "adapters" / "tools" / "cli_tool.py"
    agents.write_text(f'[[agent]]\nkind = "process"\nname = "echo-tool"\n'
                      f'argv = [{json.dumps(sys.executable)}, {json.dumps(str(tool))}]\n'
                      f'[agent.capabilities."tool.echo"]\nargs = ["echo"]\n')
    coord = start_coordinator(spawn, "coord", port, tmp_path / "r.db",
                              *(["--http-port", "0"] if http else ["--no-http"]),
                              "--agents", agents, "--json-logs", "--log-level", "WARNING")
    await coord.wait_for("listening on")
    attached = await coord.wait_for("reach: attached")
    assert attached == "reach: attached process agent echo-tool (online): tool.echo"
    if http:
        assert "/openapi.json" in await coord.wait_for("REST front door at http://127.0.0.1:")
    else:
        assert "REST front door" not in coord.output()
    url = f"ws://127.0.0.1:{port}"
    agent = Agent("w", reconnect_base=0.02)
    started = asyncio.Event()

    @agent.capability("job.run")
    async def job(n: int) -> int:
        started.set()
        await asyncio.sleep(0.1)
        return n + 1

    await agent.connect(url)
    try:
        async with Client.connect(url, caller="bob") as client:
            call = asyncio.ensure_future(client.call("job.run", {"n": 1}))
            await asyncio.wait_for(started.wait(), 5)
            coord.send(sig)  # while the call is in flight
            # issue 29: the operator is told how many tasks are in flight and how long the
            # drain may take (it said only "draining in-flight tasks", then nothing)
            said = await coord.wait_for("reach: stopping: draining")
            assert said == "reach: stopping: draining 1 task… (up to 5 s)"
            assert await call == 2  # drained: answered before the coordinator went
    finally:
        await agent.close(drain=0.5)
    assert coord.popen.wait(timeout=15) == 0
    out = coord.output()
    lines = [line for line in out.splitlines() if line.startswith("reach: st")]
    assert lines[-2:] == [said, "reach: stopped"]  # and when it is gone, it says so
    assert "Traceback" not in out
    # --json-logs: each task transition is one bare JSON line on stdout
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert events and any(e.get("caller") == "bob" and e.get("capability") == "job.run"
                          for e in events), out[-2000:]


async def test_demo_plain_with_no_traffic_prints_an_empty_summary() -> None:
    """``reach demo --plain`` with no time to send work: no live table, no calls, no trace,
    and the summary still says so; the dead-letter story is told all the same (issue 29: the
    demo ended with "dead letters: 0", so a newcomer never saw one replayed)."""
    out = io.StringIO()
    assert await run_demo(seconds=0, live=False, console=Console(file=out, width=120)) == 0
    lines = out.getvalue().splitlines()
    assert lines[:3] == ["", "outcomes: ", "dead letters: 1"]
    assert lines[3].startswith("  invoice.send ") and lines[3].endswith(
        ": ConnectionError: payment gateway unreachable (1 attempt; not idempotent, so not "
        "retried)")
    assert lines[4] == ("  the gateway is back; await reach.replay(id): succeeded → "
                        "{'order': 'A-1042', 'invoice': 'INV-1042', 'sent': True}")
    assert lines[5] == "dead letters after the replay: 0"
    # the library's log lines, kept off the terminal while it ran, come last: the failing
    # handler of the story and the coordinator's open-mode warning
    assert lines[6] == "log lines: 2, the latest:"
    assert lines[7].startswith("  agent billing: handler for invoice.send failed")
    assert lines[8].startswith("  open mode: ")
    assert lines[9:] == ["Next: `reach serve` for a standalone coordinator; see README.md."]


async def test_the_demo_pricing_service_is_busy_now_and_then() -> None:
    class Always:
        def random(self) -> float:
            return 0.0  # below the 10 % busy share every time

    async with TestClient(TestServer(demo_adapters.pricing_app(Always()))) as http:  # type: ignore[arg-type]
        r = await http.post("/quote", json={"sku": "A-1", "units": 2})
        assert (r.status, await r.text()) == (503, "pricing backend busy")


async def test_ctrl_c_while_an_agent_attaches_stops_quietly_and_exits_0(
        spawn: Any, tmp_path: Path, taken: int) -> None:
    """Before the coordinator listens, Ctrl-C is Python's KeyboardInterrupt (the drain
    handlers are not installed yet): what was started is stopped, and the exit is clean."""
    agents = tmp_path / "agents.toml"  # its OpenAPI service accepts and never answers
    agents.write_text(f'[[agent]]\nkind = "http"\nname = "slow"\n'
                      f'url = "http://127.0.0.1:{taken}"\nopenapi_url = "/openapi.json"\n')
    coord = start_coordinator(spawn, "coord", free_port(), tmp_path / "r.db", "--no-http",
                              "--agents", agents, "--log-level", "WARNING")
    await coord.wait_for("open mode")  # started; now waiting on the attach
    coord.send(signal.SIGINT)
    rc = coord.popen.wait(timeout=15)
    out = coord.output()
    assert rc == 0, out  # (rc 2 is a StartFailed: its one line says which)
    assert "Traceback" not in out and "listening on" not in out
