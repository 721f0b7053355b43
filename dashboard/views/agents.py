"""The Agents and Breakers tabs: one row per agent, and `d` drain / `b` reset breaker / `w`
weight / `p` pin on it."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message

from ..filtering import Filter
from ..rows import AGENT_COLUMNS, BREAKER_COLUMNS, Row, agent_row, breaker_row, plural
from ..screens import AskScreen
from .base import TableView


class AgentTableView(TableView):
    """A table of agents with the agent commands bound to keys."""

    NOUN = "agent"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "drain", "Drain/undrain"),
        Binding("b", "reset_breaker", "Reset breaker"),
        Binding("w", "weight", "Weight", show=False),
        Binding("p", "pin", "Pin", show=False),
    ]

    class AgentCommand(Message):
        """Asks the app to run ``action`` (``drain``, ``undrain``, ``reset_breaker``,
        ``set_weight``, ``pin``, ``unpin``) on an agent, with ``args`` besides its name."""

        def __init__(self, action: str, agent: str, args: dict[str, Any] | None = None) -> None:
            super().__init__()
            self.action = action
            self.agent = agent
            self.args = args or {}

    def _selected_agent(self) -> tuple[str, bool] | None:
        key = self.selected_key
        view = self.model.agents.get(key) if key is not None else None
        if view is None:
            self.notify("no agent selected", severity="warning")
            return None
        return view.name or view.agent_id, view.draining

    def action_drain(self) -> None:
        """Drain the selected agent, or put a drained one back to work."""
        selected = self._selected_agent()
        if selected is not None:
            name, draining = selected
            self.post_message(self.AgentCommand("undrain" if draining else "drain", name))

    def action_reset_breaker(self) -> None:
        """Close the selected agent's breaker and clear its window."""
        selected = self._selected_agent()
        if selected is not None:
            self.post_message(self.AgentCommand("reset_breaker", selected[0]))


    def action_weight(self) -> None:
        """Ask for the selected agent's weight (empty: back to the declared one)."""
        selected = self._selected_agent()
        if selected is None:
            return
        name = selected[0]

        def chosen(text: str | None) -> None:
            if text is None:
                return
            try:
                weight = None if text.strip() in ("", "-") else float(text)
            except ValueError:
                self.notify(f"not a weight: {text!r}", severity="error")
                return
            self.post_message(self.AgentCommand("set_weight", name, {"weight": weight}))

        self.app.push_screen(AskScreen(
            f"Weight for {name}", "a number in (0, 1000]; empty: the declared weight",
            "enter sets · esc cancels · routing uses it instead of the declared weight"),
            chosen)

    def action_pin(self) -> None:
        """Ask which capability to route only to the selected agent (-name unpins it)."""
        key = self.selected_key
        view = self.model.agents.get(key) if key is not None else None
        if view is None:
            self.notify("no agent selected", severity="warning")
            return
        name, caps = view.name or view.agent_id, list(view.capabilities)

        def chosen(text: str | None) -> None:
            text = (text or "").strip()
            if not text and len(caps) == 1:
                text = caps[0]
            if not text.lstrip("-"):
                return
            action = "unpin" if text.startswith("-") else "pin"
            self.post_message(self.AgentCommand(action, name,
                                                {"capability": text.lstrip("-")}))

        self.app.push_screen(AskScreen(
            f"Pin {name} for a capability", f"one of {', '.join(caps)}; -name unpins",
            "enter pins · esc cancels · a pinned capability goes to its pinned agents only"),
            chosen)


class AgentsView(AgentTableView):
    """State, load, latency, faults, breaker, heartbeat age and capabilities per agent."""

    COLUMNS = AGENT_COLUMNS

    def rows(self) -> list[Row]:
        model = self.model
        here = None if model.coordinator is None else model.coordinator.node
        return [agent_row(view, model.at, model.overrides, here)
                for view in model.agents_by_name()]

    def caption(self, total: int, wanted: Filter) -> str:
        """``5 agents · 2 nodes``: with peer links, how many coordinators hold them (the
        Node column says which; the status line has no room left at 120 columns)."""
        nodes = self.model.nodes()
        line = super().caption(total, wanted)
        return f"{line} · {plural(len(nodes), 'node')}" if nodes else line


class BreakersView(AgentTableView):
    """Every agent's breaker: state, fault rate in its window, when the next probe goes."""

    COLUMNS = BREAKER_COLUMNS

    def rows(self) -> list[Row]:
        return [breaker_row(view, self.model.at) for view in self.model.agents_by_name()]
