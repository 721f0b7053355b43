"""Ctrl-C on an idle ``reach serve`` (issue 29 item 5): it says it is stopping with nothing to
drain, and that it stopped (stdout, like its start lines); with a task in flight the count and
the drain's bound are said (tests/test_cli_cov.py, test_a_signal_drains_in_flight_work...)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from subprocs import free_port, start_coordinator


async def test_ctrl_c_with_nothing_in_flight_says_so_and_that_it_stopped(
        spawn: Any, tmp_path: Path) -> None:
    coord = start_coordinator(spawn, "coord", free_port(), tmp_path / "r.db", "--no-http")
    await coord.wait_for("listening on")
    coord.send(signal.SIGINT)
    assert await coord.wait_for("reach: stopping") == "reach: stopping: draining 0 tasks…"
    assert await coord.wait_for("reach: stopped") == "reach: stopped"
    assert coord.popen.wait(timeout=15) == 0
    assert "Traceback" not in coord.output()
