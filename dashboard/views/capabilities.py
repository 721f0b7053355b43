"""The Capabilities tab: per capability, who serves it, their breakers, calls, faults and
latency percentiles (from the feed's metrics and agent views; nothing extra is asked for)."""

from __future__ import annotations

from ..rows import CAPABILITY_COLUMNS, Row, capability_row
from .base import TableView


class CapabilitiesView(TableView):
    """One row per capability an agent declares or the metrics count, by name."""

    COLUMNS = CAPABILITY_COLUMNS
    NOUN = "capability"

    def rows(self) -> list[Row]:
        return [capability_row(cap, self.model.at) for cap in self.model.capabilities()]
