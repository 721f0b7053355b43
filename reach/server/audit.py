"""The audit log's writer: JSON lines to a file (and the ``reach.audit`` logger), off the loop.

The gateway's ``Audit`` (reach.gateway.audit) hands each record to ``AuditWriter.put``, which
only puts it on a bounded queue: the event loop never waits for a disk. One thread owned by
the writer (started by ``start``, stopped by ``stop``, which writes what is queued first)
encodes each record as one JSON line and appends it to the file. When the queue is full a
record is dropped and counted, never held in unbounded memory; the thread then writes an
``audit_dropped`` line with the count, so a gap in the trail is itself on the record.

The file is opened as ``logging.handlers.WatchedFileHandler`` opens it: when logrotate (or
anyone) moves it away, the next line goes to a new file at the same path. Rotation itself is
left to logrotate (``create`` or ``nocreate``; no ``copytruncate`` needed). The path ``-``
writes no file: records go only to the ``reach.audit`` logger, where the process's logging
configuration sends them. Every record also goes to that logger when it is enabled for INFO.
"""

from __future__ import annotations

import asyncio
import json
import logging
import logging.handlers
import queue
import threading
from typing import Any

log = logging.getLogger("reach.audit")
QUEUE = 10_000  # records waiting for the writer thread before new ones are dropped
_STOP = object()


class AuditWriter:
    """See the module docstring. ``written`` and ``dropped`` count records (for tests and
    ``reach.metrics()`` readers); both are updated by one thread each and only read elsewhere."""

    def __init__(self, path: str, *, maxsize: int = QUEUE) -> None:
        self.path = path
        self.written = 0
        self.dropped = 0
        self._reported = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize)
        self._file: logging.handlers.WatchedFileHandler | None = None
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        """Open the file (in a thread: it may block) and start the writer thread. A path that
        cannot be opened fails here, at start, not silently later."""
        if self.path != "-":
            handler = await asyncio.to_thread(
                logging.handlers.WatchedFileHandler, self.path, encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(message)s"))
            self._file = handler
        self._thread = threading.Thread(target=self._run, name="reach-audit", daemon=True)
        self._thread.start()

    def put(self, record: dict[str, Any]) -> None:
        """Queue one record (from the loop): never blocks; a full queue drops it and counts."""
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1

    async def stop(self) -> None:
        """Write every queued record, then stop the thread and close the file."""
        thread = self._thread
        if thread is None:
            return
        self._thread = None
        await asyncio.to_thread(self._queue.put, _STOP)  # waits for room: the stop is not lost
        await asyncio.to_thread(thread.join)
        if self._file is not None:
            self._file.close()
            self._file = None

    # ------------------------------------------------------------ the writer thread

    def _run(self) -> None:
        while True:
            record = self._queue.get()
            if record is _STOP:
                self._report_drops()
                return
            self._write(record)
            self._report_drops()

    def _report_drops(self) -> None:
        dropped = self.dropped
        if dropped != self._reported:
            self._write({"event": "audit_dropped", "dropped": dropped - self._reported,
                         "total_dropped": dropped})
            self._reported = dropped

    def _write(self, record: dict[str, Any]) -> None:
        try:
            line = json.dumps(record, ensure_ascii=False, default=str, allow_nan=False)
        except (TypeError, ValueError) as exc:  # params that do not encode: say so, not die
            line = json.dumps({**{k: v for k, v in record.items() if k != "params"},
                               "params": f"<not encodable: {exc}>"}, default=str)
        if self._file is not None:
            self._file.handle(logging.makeLogRecord(
                {"name": log.name, "msg": line, "levelno": logging.INFO, "levelname": "INFO"}))
        if log.isEnabledFor(logging.INFO):
            log.info("%s", line)
        self.written += 1
