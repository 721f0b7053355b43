"""Moved to reach.wire.outbox (the SDKs share it, and they may not import the server)."""

from __future__ import annotations

from reach.wire.outbox import SLOW_READER, Outbox

__all__ = ["SLOW_READER", "Outbox"]
