"""`reach-dash --screenshot` against a running coordinator (issue 14, item 13), as the
command an operator runs: a subprocess, a real coordinator on loopback."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reach.testing import Cluster

ROOT = Path(__file__).resolve().parents[2]


async def reach_dash(*args: str) -> tuple[int, str, str]:
    """Run ``python -m dashboard ARGS`` without blocking the loop the coordinator runs on."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("REACH_ADMIN_TOKEN", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dashboard", *args, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    c = await Cluster.start(admin_token="t")

    async def ok() -> int:
        return 1

    await c.add_agent("ledger-writer", {"ledger.append": ok})
    client = await c.client("planner")
    assert await client.call("ledger.append", {}) == 1
    yield c
    await c.close()


async def test_a_screenshot_of_the_live_dashboard(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "shots" / "live.svg"
    rc, stdout, stderr = await reach_dash("--url", cluster.url, "--token", "t",
                                          "--screenshot", str(out))
    assert rc == 0, stderr
    assert stdout.strip() == str(out)
    svg = out.read_text()
    assert svg.startswith("<svg") and "ledger-writer" in svg.replace("&#160;", " ")
    assert "connected" in svg and cluster.url in svg
    rc, _, stderr = await reach_dash("--url", cluster.url, "--token", "t", "--screenshot",
                                     str(tmp_path / "caps.svg"), "--tab", "capabilities",
                                     "--size", "160x30")
    assert rc == 0, stderr
    assert "ledger.append" in (tmp_path / "caps.svg").read_text()


async def test_no_coordinator_is_one_line_and_a_failure(tmp_path: Path) -> None:
    rc, stdout, stderr = await reach_dash("--url", "ws://127.0.0.1:9", "--token", "t",
                                          "--screenshot", str(tmp_path / "x.svg"))
    assert rc == 1 and stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("reach-dash: no screenshot: ")
    assert "cannot connect to ws://127.0.0.1:9" in stderr
    assert not (tmp_path / "x.svg").exists()


async def test_a_refused_token_is_one_line_and_a_failure(cluster: Cluster,
                                                         tmp_path: Path) -> None:
    rc, _, stderr = await reach_dash("--url", cluster.url, "--token", "wrong",
                                     "--screenshot", str(tmp_path / "x.svg"))
    assert rc == 1
    assert stderr.count("\n") == 1 and "admin token refused" in stderr


def test_a_bad_size_is_refused_before_connecting(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    from dashboard.__main__ import main, size_of

    assert size_of("160x40") == (160, 40) and size_of("200X50") == (200, 50)
    with pytest.raises(SystemExit) as exit_:
        main(["--token", "t", "--screenshot", str(tmp_path / "x.svg"), "--size", "wide"])
    assert exit_.value.code == 2
    assert "--size takes COLSxROWS" in capsys.readouterr().err


async def test_an_unknown_tab_is_said(tmp_path: Path) -> None:
    from dashboard.screenshots import ScreenshotFailed, live

    with pytest.raises(ScreenshotFailed, match="no tab 'nope'; the tabs are agents, traces"):
        await live("ws://127.0.0.1:9", "t", tmp_path / "x.svg", tab="nope")
