"""The newcomer's commands cannot rot: `reach demo` runs and exits by itself; `--help` explains."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys

from rich.console import Console

from reach.demo import Board, _logs_on, _summary


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
    # issue 29: it ended with "dead letters: 0"; now one letter dies and its replay succeeds
    # (the story's letter; the traffic's own faults are retried, so they rarely add one)
    assert re.search(r"\ndead letters: [1-9]\d*\n  invoice\.send \w+…: ConnectionError: "
                     r"payment gateway unreachable", summary), summary
    assert "await reach.replay(id): succeeded → " in summary
    assert "dead letters after the replay: " in summary
    # issue 14: its own injected faults printed full tracebacks above the live table
    assert "Traceback" not in out + done.stderr and not done.stderr.strip()


def test_help_explains_the_commands() -> None:
    done = run("--help")
    assert done.returncode == 0
    assert "serve" in done.stdout and "demo" in done.stdout
    serve = run("serve", "--help")
    assert "--heartbeat-interval" in serve.stdout and "--store" in serve.stdout


async def test_the_librarys_log_lines_go_on_the_board_one_line_each() -> None:
    """While the demo runs, the ``reach`` loggers' warnings land on the board (newest first,
    three kept, each one line) instead of the terminal; afterwards logging is as it was."""
    board = Board()
    log = logging.getLogger("reach.agent")
    before = logging.getLogger("reach").propagate
    with _logs_on(board):
        try:
            raise ConnectionError("reset")
        except ConnectionError:
            log.exception("handler for %s failed", "stock.query")
        for i in range(3):
            log.warning("line %d", i)
        log.info("not shown")  # below WARNING
    assert list(board.logs) == ["line 2", "line 1", "line 0"] and board.logged == 4
    assert logging.getLogger("reach").propagate is before
    out = io.StringIO()

    class NoReach:
        def dead_letters(self) -> list[object]:
            return []

    _summary(Console(file=out, width=200), NoReach(), board)  # type: ignore[arg-type]
    assert out.getvalue().endswith("log lines: 4, the latest:\n  line 2\n  line 1\n  line 0\n"
                                   "Next: `reach serve` for a standalone coordinator; see "
                                   "README.md.\n")
