"""One coordinator per SQLite file: a second store on the file is refused with a line naming
the file and the holder; the lock goes with its process, however it ends (SIGKILL too)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from subprocs import REPO, Proc

from reach.store.lock import StoreLocked, sqlite_path
from reach.store.store import Store


async def test_a_second_store_on_one_file_is_refused_until_the_first_closes(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'one.db'}"
    first = Store(url)
    await first.open()
    try:
        second = Store(url)
        with pytest.raises(StoreLocked) as refused:
            await second.open()
        message = str(refused.value)
        assert str(tmp_path / "one.db") in message and f"pid {os.getpid()}" in message
        assert "another coordinator" in message and "PostgreSQL" in message
        assert len(message.splitlines()) == 1
        await second.close()  # as Reach does after a failed open: harmless
    finally:
        await first.close()
    again = Store(url)
    await again.open()  # the first let go
    await again.close()


async def test_in_memory_databases_take_no_lock(tmp_path: Path) -> None:
    stores = [Store("sqlite://"), Store("sqlite://")]
    for store in stores:
        await store.open()
    for store in stores:
        await store.close()
    assert sqlite_path("sqlite:///:memory:") is None
    assert sqlite_path("sqlite:///file:x?mode=memory&cache=shared") is None
    assert sqlite_path("postgresql://u@h/db") is None
    assert sqlite_path(f"sqlite:///{tmp_path}/a.db?timeout=5") == f"{tmp_path}/a.db"


def _serve(spawn: Callable[..., Proc], name: str, db: Path) -> Proc:
    return spawn(name, "-m", "reach.cli", "serve", "--port", "0", "--no-http",
                 "--store", f"sqlite:///{db}", "--log-level", "WARNING")


async def test_reach_serve_twice_on_one_file_the_second_exits_with_one_line(
        tmp_path: Path, spawn: Callable[..., Proc]) -> None:
    db = tmp_path / "reach.db"
    first = _serve(spawn, "first", db)
    await first.wait_for("listening on")
    second = subprocess.run(
        [sys.executable, "-m", "reach.cli", "serve", "--port", "0", "--no-http", "--store",
         f"sqlite:///{db}"], capture_output=True, text=True, timeout=60, cwd=REPO,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
    assert second.returncode != 0
    lines = second.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in second.stderr, second.stderr
    assert str(db) in lines[0] and f"pid {first.pid}" in lines[0]
    assert "in use by another coordinator" in lines[0]
    first.send(signal.SIGKILL)  # no clean-up at all: the kernel drops the lock
    first.popen.wait(timeout=10)
    third = _serve(spawn, "third", db)
    await third.wait_for("listening on")


async def test_a_file_that_cannot_be_opened_lets_the_lock_go(tmp_path: Path) -> None:
    from reach.store.postgres import StoreUnavailable

    where = tmp_path / "a-directory"
    where.mkdir()  # SQLite cannot open a directory as its database
    store = Store(f"sqlite:///{where}")
    with pytest.raises(StoreUnavailable, match="cannot open store sqlite:///"):
        await store.open()
    await store.close()
    taken = Store(f"sqlite:///{where}")  # the lock went with the failed open
    with pytest.raises(StoreUnavailable):
        await taken.open()
    await taken.close()
