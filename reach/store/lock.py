"""One coordinator per SQLite file: an exclusive lock beside the database, held while open.

Two coordinators on one SQLite file would both resume the same unfinished tasks and each
believe it alone holds every idempotency key. The store takes ``flock`` on ``<file>-reach.lock``
at open and keeps the descriptor for its life; the kernel releases it when the process ends,
however it ends (SIGKILL included), so a stale lock file never blocks a restart. The holder's
pid is written into the file, for the error the next one prints.
"""

from __future__ import annotations

import fcntl
import os


class StoreLocked(OSError):
    """Another coordinator (another store) has this SQLite file open. An ``OSError``: like a
    taken port, it is the machine's state that refuses the start (``reach serve`` prints it
    as one line)."""


class FileLock:
    """The exclusive lock of one SQLite database file (``path`` is the database's)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock_path = f"{path}-reach.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise ``StoreLocked`` naming the file and the holder's pid."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise StoreLocked(
                f"store {self.path} is in use by another coordinator{who}: stop it, or give "
                f"this one another file (--store sqlite:///OTHER.db); several coordinators "
                f"share a database only on PostgreSQL (--cluster)") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        """Let the file go (the lock file stays: removing it would race a new holder)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def sqlite_path(url: str) -> str | None:
    """The file of a SQLite URL (``sqlite:///F``, ``sqlite:////abs/F``), None for in-memory
    databases and other URLs."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///"):].partition("?")[0]
    if path in ("", ":memory:") or "mode=memory" in url:
        return None
    return os.path.abspath(path)
