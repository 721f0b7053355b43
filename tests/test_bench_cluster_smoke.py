"""bench/cluster.py at smoke sizes: real ``reach serve`` subprocesses on a scratch PostgreSQL
database and on SQLite print every row of the three tables (numbers are not checked: they
belong to the machine). Needs PostgreSQL: skipped without it, failed under
REACH_REQUIRE_SERVICES=1 (tests/pg.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pg import ADMIN_URL

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(120)


def test_cluster_bench_quick_prints_every_row(pg_database: str) -> None:
    # (pg_database: the server is there, or the test skips or fails saying so; the bench
    # makes and drops a database of its own beside it)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "cluster.py"), "--quick", "--url", ADMIN_URL],
        capture_output=True, text=True, timeout=110, cwd=ROOT, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    out = proc.stdout
    rows = [line.split() for line in out.splitlines()]
    labels = {" ".join(r[:3]) for r in rows if len(r) >= 3}
    for label in ("1 on SQLite", "1 on PostgreSQL", "2 on PostgreSQL", "3 on PostgreSQL"):
        assert label in labels, out
    assert all(r[-4].endswith("x") and r[-2].endswith("x") for r in rows
               if len(r) >= 8 and r[1] == "on"), out
    assert "caller on node-2 -> agent on node-2" in out
    assert "caller on node-1 -> agent on node-2" in out and "the hop adds" in out
    assert "the agent registered with another node after" in out
    assert "first task completed elsewhere after" in out and " 0 failed" in out
