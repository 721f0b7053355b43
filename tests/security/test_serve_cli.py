"""`reach serve` takes the trust rules from files, says how open it is, and refuses an open bind
beyond loopback in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from subprocs import free_port, start_coordinator

from reach import Agent, Client, Unauthorized


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reach.cli", "serve", *args],
                          capture_output=True, text=True, timeout=30)


def test_an_open_bind_beyond_loopback_is_refused_in_one_line() -> None:
    done = serve("--host", "0.0.0.0", "--port", "0", "--store", "sqlite://")
    assert done.returncode == 2
    assert done.stderr.startswith("reach: refusing to bind '0.0.0.0' without tokens")
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_a_rules_file_that_is_not_an_object_of_lists_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "serves.json"
    bad.write_text(json.dumps({"sales": "sales.*"}))
    done = serve("--port", "0", "--store", "sqlite://", "--serves-file", str(bad))
    assert done.returncode != 0 and "must be a JSON object of name -> list of patterns" \
        in done.stderr


async def test_serve_enforces_the_rules_files(spawn: Any, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"t-sales": "sales", "t-evil": "evil", "t-bob": "bob"}))
    serves = tmp_path / "serves.json"
    serves.write_text(json.dumps({"sales": ["sales.*"]}))
    calls = tmp_path / "calls.json"
    calls.write_text(json.dumps({"bob": ["sales.*"]}))
    port = free_port()
    coord = start_coordinator(spawn, "coord", port, tmp_path / "r.db", "--tokens-file",
                              str(tokens), "--serves-file", str(serves), "--permissions-file",
                              str(calls), "--log-level", "INFO")
    await coord.wait_for("listening on")
    url = f"ws://127.0.0.1:{port}"
    sales = Agent("sales", token="t-sales")
    sales.capability("sales.query")(lambda: 42)
    await sales.connect(url)
    try:
        evil = Agent("evil", token="t-evil")
        evil.capability("sales.query")(lambda: "forged")
        with pytest.raises(Unauthorized, match="no serve rule names it"):
            await evil.connect(url)
        async with Client.connect(url, caller="bob", token="t-bob") as bob:
            assert await bob.call("sales.query") == 42
    finally:
        await sales.close(drain=0.5)
    assert "open mode" not in coord.output()


async def test_serve_says_open_mode_in_its_banner(spawn: Any, tmp_path: Path) -> None:
    coord = start_coordinator(spawn, "coord", free_port(), tmp_path / "r.db")
    out = await coord.wait_for("WARNING: open mode")
    assert "no tokens" in out
