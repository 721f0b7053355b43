"""The task book's maps as the edge and the operator surface read them off the gateway."""

from __future__ import annotations

from collections import OrderedDict

from reach.core.tasks import Task
from reach.gateway.book import TaskBook


class BookViews:
    """Read-only views of ``self.book`` (a ``TaskBook``), mixed into the gateway."""

    book: TaskBook

    @property
    def live(self) -> dict[str, Task]:
        return self.book.live

    @property
    def recent(self) -> OrderedDict[str, Task]:
        return self.book.recent

    @property
    def dead(self) -> dict[str, Task]:
        return self.book.dead

    @property
    def traces(self) -> dict[str, list[str]]:
        return self.book.traces

    @property
    def keys(self) -> dict[str, str]:
        return self.book.keys

    @property
    def caller_live(self) -> dict[str, int]:
        return self.book.caller_live
