"""The Agents and Breakers tabs: one row per agent, and `d` drain / `b` reset breaker on it."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message

from ..rows import AGENT_COLUMNS, BREAKER_COLUMNS, Row, agent_row, breaker_row
from .base import TableView


class AgentTableView(TableView):
    """A table of agents with the agent commands bound to keys."""

    NOUN = "agent"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "drain", "Drain/undrain"),
        Binding("b", "reset_breaker", "Reset breaker"),
    ]

    class AgentCommand(Message):
        """Asks the app to run ``action`` (``drain``, ``undrain``, ``reset_breaker``) on an
        agent."""

        def __init__(self, action: str, agent: str) -> None:
            super().__init__()
            self.action = action
            self.agent = agent

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


class AgentsView(AgentTableView):
    """State, load, latency, faults, breaker, heartbeat age and capabilities per agent."""

    COLUMNS = AGENT_COLUMNS

    def rows(self) -> list[Row]:
        return [agent_row(view, self.model.at) for view in self.model.agents_by_name()]


class BreakersView(AgentTableView):
    """Every agent's breaker: state, fault rate in its window, when the next probe goes."""

    COLUMNS = BREAKER_COLUMNS

    def rows(self) -> list[Row]:
        return [breaker_row(view, self.model.at) for view in self.model.agents_by_name()]
