"""The newcomer's commands cannot rot: `reach demo` runs and exits by itself; `--help` explains."""

from __future__ import annotations

import subprocess
import sys


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reach.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_demo_runs_and_exits_by_itself() -> None:
    done = run("demo", "--seconds", "2")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "agents" in out and "order-analysis" in out and "inventory" in out
    assert "report-writer" in out
    summary = out.split("outcomes:")[1]
    assert "ok " in summary and "task_failed" in summary  # the failing call is there
    assert "report.generate → sales.query" in out  # a two-hop trace is shown


def test_help_explains_the_commands() -> None:
    done = run("--help")
    assert done.returncode == 0
    assert "serve" in done.stdout and "demo" in done.stdout
    serve = run("serve", "--help")
    assert "--heartbeat-interval" in serve.stdout and "--store" in serve.stdout
