"""Drill: the coordinator and the agent running a write both crash (a host reboot)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TERMINAL, log_lines, start_fault_agent
from subprocs import Proc, free_port, start_coordinator

from reach import Client, ReachError
from reach.testing import wait_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


async def test_write_done_before_both_crashed_is_not_run_again_by_the_restarted_agent(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    """Field: "The coordinator leaked memory and died" and "the coordinator retried a write
    that had already succeeded: inventory written twice", together: one host reboot takes
    down the coordinator and the agent running a non-idempotent write. The write completes at
    the agent after the coordinator died (its answer has nowhere to go), then the agent dies
    too, and both come back (the agent under the same name, so the same agent_id, but a new
    process with an empty idempotency cache). The resumed task must not run the write again:
    only the old process knew the key. It may end dead-lettered (replayable by an operator
    who checks), but the write runs once."""
    port = free_port()
    db = tmp_path / "reach.db"
    url = f"ws://127.0.0.1:{port}"
    log = tmp_path / "runs.log"
    slow = ("--min-ms", 400, "--max-ms", 400, "--latency-ms", 2000)
    coordinator = start_coordinator(spawn, "coordinator-1", port, db)
    await coordinator.wait_for("coordinator listening on")
    agent = start_fault_agent(spawn, url, "ledger", log, *slow)
    agent_id = (await agent.wait_for("ready ")).split()[1]
    client = await Client.connect(url, caller="drill", reconnect_for=20)
    try:
        handle = await client.submit("soak.write", {"n": 1}, idempotency_key="debit-42")
        await wait_until(lambda: log_lines(log, "start"), timeout=10)
        coordinator.kill9()
        await wait_until(lambda: log_lines(log, "done"), timeout=10)  # done, answer lost
        agent.kill9()

        coordinator = start_coordinator(spawn, "coordinator-2", port, db)
        await coordinator.wait_for("coordinator listening on")
        agent = start_fault_agent(spawn, url, "ledger", log, *slow, incarnation=2)
        assert (await agent.wait_for("ready ")).split()[1] == agent_id  # same identity
        try:
            await handle.result(timeout=15)
        except ReachError:
            pass  # a dead letter is an acceptable end; running the write twice is not
        view = await client.status(handle.task_id)
        assert view["state"] in TERMINAL, view
        done = [parts[1] for parts in log_lines(log, "done")]
        assert done == ["debit-42"], (done, [(a["agent"], a["outcome"], a["error"])
                                             for a in view["attempts"]])
    finally:
        await client.close()
