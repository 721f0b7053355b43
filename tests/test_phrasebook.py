"""The learned phrases kept (reach.phrasebook) when the store misbehaves or knows more than
memory: a write that fails is logged once, not per phrase, and the phrase stays learned; the
next write that succeeds ends the warning; a phrase the store holds but this coordinator never
loaded (another node learned it since this one started: the nodes share the table) is still
forgotten, and says so."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from reach.core.intent_learn import Phrase
from reach.core.liveness import LivenessPolicy
from reach.core.registry import Registry
from reach.phrasebook import PhraseBook
from reach.store.store import Store


class FlakyStore:
    """The three calls PhraseBook makes of a store; ``keep_phrase`` fails while ``down``."""

    def __init__(self) -> None:
        self.down = True
        self.kept: list[Phrase] = []

    async def phrases(self) -> list[Phrase]:
        return []

    async def keep_phrase(self, phrase: Phrase) -> None:
        if self.down:
            raise OSError("disk I/O error")
        self.kept.append(phrase)

    async def forget_phrase(self, text: str) -> bool:
        return False


async def test_a_failing_write_is_said_once_and_the_phrase_stays_learned(
        caplog: pytest.LogCaptureFixture) -> None:
    registry = Registry(LivenessPolicy())
    store = FlakyStore()
    changes: list[int] = []
    book = PhraseBook(registry, store, lambda: changes.append(1))  # type: ignore[arg-type]
    caplog.set_level(logging.WARNING, logger="reach.intent")
    for n in range(3):
        phrase = Phrase(f"request number {n}", "a.x", float(n), "amy")
        registry.learned.add(phrase)
        book.kept(phrase)
    await book.flush()
    said = [r for r in caplog.records if "not kept in the store" in r.getMessage()]
    assert len(said) == 1 and "disk I/O error" in said[0].getMessage()
    assert [p["text"] for p in book.phrases()] == [f"request number {n}" for n in range(3)]
    assert len(changes) == 3  # the index is told of each
    # Up again: the next write lands, and the next failure is said again.
    store.down = False
    book.kept(Phrase("request number 3", "a.x", 3.0))
    await book.flush()
    assert [p.text for p in store.kept] == ["request number 3"]
    store.down = True
    book.kept(Phrase("request number 4", "a.x", 4.0))
    await book.flush()
    assert sum("not kept in the store" in r.getMessage() for r in caplog.records) == 2


async def test_a_phrase_only_the_store_holds_is_forgotten(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'reach.db'}")
    await store.open()
    try:
        here = PhraseBook(Registry(LivenessPolicy()), store)
        assert await here.load() == 0
        # Another node, on the same table, learns a phrase after this one loaded.
        await store.keep_phrase(Phrase("where is my refund", "refund.status", 1.0, "bob"))
        assert here.phrases() == []
        gone: dict[str, Any] = await here.forget("Where is my refund?")
        assert gone == {"forgotten": True, "text": "Where is my refund?"}
        assert await store.phrases() == []
        assert await here.forget("where is my refund") == {"forgotten": False,
                                                            "text": "where is my refund"}
    finally:
        await store.close()
