"""The audit log's writer: JSON lines to a file (and the ``reach.audit`` logger), off the loop.

The gateway's ``Audit`` (reach.gateway.audit) hands each record to ``AuditWriter.put``, which
only appends it to a bounded buffer: the event loop never waits for a disk, a lock held by
the writer, or an encoder. One thread owned by the writer (started by ``start``, stopped by
``stop``, which writes what is buffered first) takes the records in batches, encodes each as
one JSON line (its ``time`` in ISO 8601, UTC) and appends the batch with one write and one
flush. When the buffer is full a record is dropped and counted, never held in unbounded
memory; the thread then writes an ``audit_dropped`` line with the count, so a gap in the trail
is itself on the record.

The file is watched as ``logging.handlers.WatchedFileHandler`` watches it, once a batch: when
logrotate (or anyone) moves it away, the next batch goes to a new file at the same path.
Rotation itself is left to logrotate (no ``copytruncate`` needed). The path ``-`` writes no
file: records go only to the ``reach.audit`` logger. Every record also goes to that logger
when it is enabled for INFO (from the thread, so a slow handler slows only the thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from collections import deque
from datetime import UTC, datetime
from typing import IO, Any

log = logging.getLogger("reach.audit")
QUEUE = 10_000  # records waiting for the writer thread before new ones are dropped


class AuditWriter:
    """See the module docstring. ``written`` and ``lost`` count lines (the thread's), ``dropped``
    records refused by a full buffer (the loop's); each is only read by the other thread."""

    def __init__(self, path: str, *, maxsize: int = QUEUE) -> None:
        self.path = path
        self.maxsize = maxsize
        self.written = 0
        self.dropped = 0
        self.lost = 0  # lines the file refused (a full disk), counted by the thread
        self._reported = 0
        # deque.append and popleft are atomic: the loop appends, the thread takes.
        self._buffer: deque[dict[str, Any]] = deque()
        self._wake = threading.Event()
        self._stopping = False
        self._file: IO[str] | None = None
        self._id: tuple[int, int] | None = None  # (device, inode) of the open file
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        """Open the file (in a thread: it may block) and start the writer thread. A path that
        cannot be opened fails here, at start, not silently later."""
        if self.path != "-":
            await asyncio.to_thread(self._open)
        self._thread = threading.Thread(target=self._run, name="reach-audit", daemon=True)
        self._thread.start()

    def put(self, record: dict[str, Any]) -> None:
        """Buffer one record (from the loop): never blocks; a full buffer drops it and counts."""
        if len(self._buffer) >= self.maxsize:
            self.dropped += 1
            return
        self._buffer.append(record)
        if not self._wake.is_set():
            self._wake.set()

    async def stop(self) -> None:
        """Write every buffered record, then stop the thread and close the file."""
        thread = self._thread
        if thread is None:
            return
        self._thread = None
        self._stopping = True
        self._wake.set()
        await asyncio.to_thread(thread.join)
        self._close()

    # ------------------------------------------------------------ the writer thread

    def _open(self) -> None:
        self._file = open(self.path, "a", encoding="utf-8")  # kept open, closed by stop()
        st = os.fstat(self._file.fileno())
        self._id = (st.st_dev, st.st_ino)

    def _close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):  # what a full disk refused stays refused
                self._file.close()
            self._file, self._id = None, None

    def _reopen_if_moved(self) -> None:
        try:
            st = os.stat(self.path)
            moved = (st.st_dev, st.st_ino) != self._id
        except FileNotFoundError:
            moved = True
        if moved or self._file is None:
            self._close()
            self._open()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            stopping = self._stopping  # read before draining: what came before it is written
            self._flush()
            if stopping:
                return

    def _flush(self) -> None:
        lines: list[str] = []
        buffer = self._buffer
        while buffer:
            lines.append(_line(buffer.popleft()))
            dropped = self.dropped
            if dropped != self._reported:
                lines.append(json.dumps({"event": "audit_dropped",
                                         "dropped": dropped - self._reported,
                                         "total_dropped": dropped}))
                self._reported = dropped
        if not lines:
            return
        if self.path != "-":
            try:
                self._reopen_if_moved()
                assert self._file is not None
                self._file.write("\n".join(lines) + "\n")
                self._file.flush()
            except OSError as exc:  # a full disk: say so, keep the thread for the next batch
                self._close()  # (reopened by the next batch, without the refused lines)
                self.lost += len(lines)
                logging.getLogger("reach").error("audit log %s: %d line(s) not written: %s",
                                                 self.path, len(lines), exc)
            else:
                self.written += len(lines)
        if log.isEnabledFor(logging.INFO):
            for line in lines:
                log.info("%s", line)
        if self.path == "-":
            self.written += len(lines)


def _line(record: dict[str, Any]) -> str:
    at = record.get("time")
    if isinstance(at, float | int):
        record = {**record, "time": datetime.fromtimestamp(at, UTC).isoformat(
            timespec="milliseconds")}
    try:
        return json.dumps(record, ensure_ascii=False, default=str, allow_nan=False)
    except (TypeError, ValueError) as exc:  # params that do not encode: say so, not die
        return json.dumps({**{k: v for k, v in record.items() if k != "params"},
                           "params": f"<not encodable: {exc}>"}, default=str)
