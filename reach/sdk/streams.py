"""The chunks of one stream, as the client's reader hands them over (``Client.stream``).

The reader puts each chunk on the stream's queue as it arrives, then one ``End`` with the
task's final result, or the ``ReachError`` the task failed with.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from reach.errors import ReachError


class End:
    """The end of a stream, with the task's final result (the list of every chunk)."""

    __slots__ = ("result",)

    def __init__(self, result: Any) -> None:
        self.result = result


async def chunks(queue: asyncio.Queue[Any]) -> AsyncIterator[Any]:
    """Yield the chunks put on ``queue`` until its ``End``; raise the error put instead."""
    received = 0
    while True:
        item = await queue.get()
        if isinstance(item, End):
            # The final result holds every chunk: chunks missed while reconnecting, or a
            # duplicate submit that finished earlier, are filled in from it.
            if isinstance(item.result, list):
                for missed in item.result[received:]:
                    yield missed
            return
        if isinstance(item, ReachError):
            raise item
        received += 1
        yield item
