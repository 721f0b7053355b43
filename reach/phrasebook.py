"""The learned phrases of one coordinator, kept: intent routing's memory of callers' choices
(``reach.core.intent_learn``) loaded from the store at start, written as it learns, and
listed or removed by an operator (``Reach.learned_phrases``, ``Reach.forget_phrase``, the
admin feed's ``phrases`` and ``forget_phrase``, ``reach admin phrases``).

A phrase is learned in the submit's own step (the next request routes by it at once); its
row is written in the background, so a submit never waits on it. A write that fails is
logged once and the phrase stays learned in memory; ``flush`` waits for the writes queued so
far (the coordinator calls it before closing the store).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from reach.core.intent_learn import Phrase
from reach.core.registry import Registry
from reach.store.store import Store

log = logging.getLogger("reach.intent")


class PhraseBook:
    """The registry's learned phrases, with the store behind them."""

    def __init__(self, registry: Registry, store: Store,
                 changed: Callable[[], None] = lambda: None) -> None:
        """``changed`` is told after each change of the phrases (the intent index moves)."""
        self.registry = registry
        self.store = store
        self.changed = changed
        self._writes: set[asyncio.Task[Any]] = set()
        self._failing = False  # a write failed and nothing has been written since

    async def load(self) -> int:
        """Learn again what the store kept (oldest first); how many phrases."""
        kept = await self.store.phrases()
        for phrase in kept:
            self.registry.learned.add(phrase)
        self.changed()
        return len(kept)

    def kept(self, phrase: Phrase) -> None:
        """The gateway learned ``phrase``: write it, without making anyone wait."""
        self.changed()
        task = asyncio.get_running_loop().create_task(self._write(self.store.keep_phrase(phrase)))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, write: Any) -> None:
        try:
            await write
        except Exception as exc:  # the store is closing or down: say so once, keep going
            if not self._failing:
                log.warning("learned phrase not kept in the store: %s", exc)
            self._failing = True
        else:
            self._failing = False

    async def flush(self) -> None:
        """Wait for the writes queued so far."""
        if self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    def phrases(self, capability: str | None = None) -> list[dict[str, Any]]:
        """Every learned phrase (of ``capability``), oldest first: text, key, capability,
        when, who taught it."""
        return [p.view() for p in self.registry.learned.phrases(capability)]

    async def forget(self, text: str) -> dict[str, Any]:
        """Stop routing this request by what was learned (from memory and the store); what
        was forgotten, or ``{"forgotten": False}`` when nothing was learned for it."""
        phrase = self.registry.learned.remove(text)
        self.changed()
        await self.flush()  # a pending write of the same phrase must not bring it back
        stored = await self.store.forget_phrase(text)
        if phrase is None and not stored:
            return {"forgotten": False, "text": text}
        view = phrase.view() if phrase is not None else {"text": text}
        return {"forgotten": True, **view}
