"""What a newcomer trips over at the command line (issue 14): a store URL this version cannot
open, and ``reach serve | tee log`` stopped with Ctrl-C (the tee dies first, stdout is a broken
pipe): the coordinator must still drain and exit 0."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from subprocs import free_port

from reach import Agent, Client, Reach
from reach.cli import main


def test_a_store_url_this_version_cannot_open_is_one_line_and_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A URL of a database the store does not drive ended in a traceback. Now it is refused
    before anything starts, saying which URLs work (PostgreSQL is one: docs/cluster.md)."""
    for url in ("mysql://x", "oracle://u@127.0.0.1/db"):
        assert main(["serve", "--port", "0", "--no-http", "--store", url]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"reach: store {url!r} is not supported: use sqlite:///FILE.db")
        assert len(err.splitlines()) == 1


async def test_reach_start_refuses_such_a_store_with_the_same_words() -> None:
    with pytest.raises(ValueError, match=r"use sqlite:///FILE\.db .* or postgresql://"):
        await Reach.start(store="mysql://u@127.0.0.1/db")


def test_help_shows_the_recovery_grace_default_and_how_to_get_the_postgresql_driver(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "reconnect before failing over (default 10)" in text
    assert "postgresql://USER@HOST/DB (pip install 'agent-reach[postgres]'" in text


async def test_a_broken_stdout_pipe_at_ctrl_c_still_drains_and_exits_0(tmp_path: Path) -> None:
    """``reach serve ... | tee log`` and Ctrl-C: the terminal's SIGINT ends tee too, so the
    "stopping" line hit a broken pipe, ``_serve`` raised BrokenPipeError before
    ``reach.stop()``, the in-flight call was lost and the exit status was 1."""
    port = free_port()
    reader, writer = os.pipe()  # the coordinator's stdout: the "tee" we close before Ctrl-C
    proc = subprocess.Popen(
        [sys.executable, "-m", "reach.cli", "serve", "--port", str(port), "--no-http",
         "--store", f"sqlite:///{tmp_path / 'r.db'}", "--heartbeat-interval", "0.05",
         "--log-level", "WARNING"],
        stdout=writer, stderr=subprocess.PIPE, cwd=tmp_path)
    os.close(writer)
    try:
        with os.fdopen(reader, "rb") as tee:
            first = await asyncio.to_thread(tee.readline)
            assert b"listening on" in first
        # the pipe's only reader is gone: the next line the coordinator prints breaks it
        agent = Agent("w", reconnect_base=0.02)
        started = asyncio.Event()

        @agent.capability("job.run")
        async def job(n: int) -> int:
            started.set()
            await asyncio.sleep(0.1)
            return n + 1

        url = f"ws://127.0.0.1:{port}"
        await agent.connect(url)
        try:
            async with Client.connect(url, caller="bob") as client:
                call = asyncio.ensure_future(client.call("job.run", {"n": 1}))
                await asyncio.wait_for(started.wait(), 5)
                proc.send_signal(signal.SIGINT)  # while the call is in flight
                assert await call == 2  # drained: answered before the coordinator went
        finally:
            await agent.close(drain=0.5)
        rc = await asyncio.to_thread(proc.wait, 15)
        err = proc.stderr.read().decode() if proc.stderr else ""
        assert rc == 0, err
        assert "Traceback" not in err and "BrokenPipeError" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


@pytest.mark.parametrize("case", ["taken port", "store url"])
def test_as_a_subprocess_each_refusal_is_one_line_on_stderr_and_exit_2(
        tmp_path: Path, case: str) -> None:
    """The same refusals as a newcomer meets them: ``reach serve`` in a shell, one line on
    stderr, exit status 2, no traceback, no database file left behind."""
    db = tmp_path / "r.db"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        args = (["--port", str(port), "--store", f"sqlite:///{db}"] if case == "taken port"
                else ["--port", "0", "--store", "mysql://u@127.0.0.1/db"])
        done = subprocess.run([sys.executable, "-m", "reach.cli", "serve", "--no-http", *args],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("reach: ") and "Traceback" not in done.stderr
    assert ("is taken" if case == "taken port" else "is not supported") in lines[0]
    assert not db.exists() and done.stdout == ""
