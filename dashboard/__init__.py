"""reach-dash: the Textual dashboard for an Agent-Reach coordinator, fed by its admin feed.

    from dashboard import ReachDashboard
    ReachDashboard(url="ws://127.0.0.1:8765", token="s3cret").run()
"""

from __future__ import annotations

from .app import ReachDashboard

__all__ = ["ReachDashboard"]
