"""Write one SVG screenshot per tab of the dashboard on the sample state (docs/screenshots).

    python -m dashboard.screenshots [OUTPUT_DIR]

The app runs headless on :mod:`dashboard.sample` through a scripted feed, at a fixed size, so
the pictures only change when the dashboard's looks do.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from .app import ReachDashboard
from .sample import ScriptedFeed, connector
from .views.traces import TracesView

SIZE = (120, 36)
SHOTS = {"agents.svg": "1", "traces.svg": "2", "breakers.svg": "3", "dead-letters.svg": "4"}


def sample_app() -> ReachDashboard:
    """The dashboard on the sample state (its feed is created inside the running loop)."""
    return ReachDashboard(url="ws://127.0.0.1:8765", token="sample",
                          connector=connector(ScriptedFeed()))


async def write(directory: Path) -> list[Path]:
    """Write the screenshots into ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, key in SHOTS.items():
        app = sample_app()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press(key)
            await pilot.pause()
            await pilot.wait_for_scheduled_animations()
            await pilot.pause()
            if key == "2":
                await wait_for_waterfall(app)
            path = directory / name
            path.write_text(stable(app.export_screenshot(title=f"reach-dash — {name[:-4]}")))
            written.append(path)
    return written


async def wait_for_waterfall(app: ReachDashboard, timeout: float = 5.0) -> None:
    """The Traces picture shows the selected trace's hops, which arrive a moment later."""
    waterfall = app.query_one(TracesView).waterfall
    async with asyncio.timeout(timeout):
        while waterfall.timeline is None:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)


def stable(svg: str) -> str:
    """Drop the random id Rich puts in every exported SVG, so an unchanged picture is an
    unchanged file."""
    return re.sub(r"\bterminal-\d+-", "terminal-", svg)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/screenshots")
    for path in asyncio.run(write(out)):
        print(path)


if __name__ == "__main__":
    main()
