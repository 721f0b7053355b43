"""The Phrases tab: what intent routing learned from callers' choices (docs/intent.md), newest
first; `x` forgets the selected phrase, `r` reads the list again.

The admin feed does not carry learned phrases (they change only when a caller chooses), so the
app reads them with the ``phrases`` command each time the tab opens and after each forget.
"""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message

from ..filtering import Filter
from ..model import Model
from ..rows import PHRASE_COLUMNS, Row, phrase_row
from .base import TableView


class PhrasesView(TableView):
    """Learned phrases: which request routes to which capability, who taught it, when."""

    COLUMNS = PHRASE_COLUMNS
    NOUN = "learned phrase"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "forget", "Forget"),
        Binding("r", "reread", "Read again"),
    ]

    problem: str = ""
    """Why the last read failed (shown in the caption until a read succeeds)."""

    class Read(Message):
        """Asks the app to read the learned phrases again."""

    class Forget(Message):
        """Asks the app to forget one learned phrase (after the operator confirms)."""

        def __init__(self, text: str, capability: str) -> None:
            super().__init__()
            self.text = text
            self.capability = capability

    def rows(self) -> list[Row]:
        return [phrase_row(p, self.model.at) for p in self.model.phrases_newest_first()]

    def caption(self, total: int, wanted: Filter) -> str:
        if self.problem:
            return self.problem
        if self.model.phrases is None:
            return "reading the learned phrases…"
        if not total:
            return ("no learned phrases: a caller who picks one of a refusal's suggestions "
                    "(choose=) teaches one")
        return super().caption(total, wanted)

    def action_forget(self) -> None:
        """Forget the selected phrase: the request is routed by evidence again."""
        key = self.selected_key
        phrase = (self.model.phrases or {}).get(key) if key is not None else None
        if phrase is None:
            self.notify("no learned phrase selected", severity="warning")
            return
        self.post_message(self.Forget(phrase.text, phrase.capability))

    def action_reread(self) -> None:
        """Read the learned phrases again."""
        self.post_message(self.Read())

    def failed(self, problem: str) -> None:
        """A read failed: say so in the caption, keep what was shown."""
        self.problem = problem
        self.resync()

    def show(self, model: Model) -> None:
        """A read succeeded (or a frame came): the caption counts again once phrases are read."""
        if model.phrases is not None:
            self.problem = ""
        super().show(model)

