"""SVG screenshots: of a live coordinator (``reach-dash --screenshot``), and one per tab of
the dashboard on the sample state (docs/screenshots, ``make screenshots``).

    python -m dashboard.screenshots [OUTPUT_DIR]
    reach-dash --url ws://127.0.0.1:8765 --token T --screenshot out.svg [--tab breakers]

For the pictures in docs, the app runs headless on :mod:`dashboard.sample` through a scripted
feed, at a fixed size, so they only change when the dashboard's looks do. A live screenshot
connects once, waits for the first snapshot, saves the picture and returns; when it cannot
connect (or the token is refused) it raises :class:`ScreenshotFailed` saying why.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

from .app import TABS, ReachDashboard
from .feed import FeedConnection, FeedError, connect
from .sample import ScriptedFeed, connector
from .views.phrases import PhrasesView
from .views.pushes import PushesView
from .views.traces import TracesView

SIZE = (120, 36)
SHOTS = {"agents.svg": "1", "traces.svg": "2", "breakers.svg": "3", "dead-letters.svg": "4",
         "capabilities.svg": "5", "phrases.svg": "6"}


class ScreenshotFailed(Exception):
    """A live screenshot could not be taken: the message says why, in one line."""


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
            if key == "6":
                await wait_for_phrases(app)
            # Data that arrived after the first pause lays its table out again (its columns
            # widen to their cells): wait until the app has handled that, not a fixed while,
            # which a loaded machine outlasts (a picture with the columns still narrow).
            await pilot.pause()
            await pilot.wait_for_scheduled_animations()
            await pilot.pause()
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


async def wait_for_phrases(app: ReachDashboard, timeout: float = 5.0) -> None:
    """The Phrases picture shows the learned phrases, read when the tab opens (or why they
    could not be read)."""
    view = app.query_one(PhrasesView)
    async with asyncio.timeout(timeout):
        while app.model.phrases is None and not view.problem:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)


async def wait_for_pushes(app: ReachDashboard, timeout: float = 5.0) -> None:
    """The Pushes picture shows the notifications not delivered, read when the tab opens (or
    why they could not be read: "no A2A door")."""
    view = app.query_one(PushesView)
    async with asyncio.timeout(timeout):
        while app.model.pushes is None and not view.problem:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)


async def live(url: str, token: str, out: Path, *, tab: str = "agents",
               size: tuple[int, int] = SIZE, timeout: float = 10.0) -> Path:
    """Connect to the coordinator at ``url``, wait for its first snapshot (and, on the Traces
    tab, the newest trace's waterfall), and save ``tab`` as an SVG at ``out``."""
    if tab not in TABS:
        raise ScreenshotFailed(f"no tab {tab!r}; the tabs are {', '.join(TABS)}")
    failures: list[FeedError] = []

    async def once(url: str, token: str) -> FeedConnection:
        try:
            return await connect(url, token)
        except FeedError as exc:  # not retried: a screenshot says why and ends
            failures.append(exc)
            raise

    app = ReachDashboard(url=url, token=token, connector=once)
    async with app.run_test(size=size) as pilot:
        try:
            async with asyncio.timeout(timeout):
                while not app.model.frames:
                    if failures:
                        raise ScreenshotFailed(str(failures[0]))
                    if app.link.state in ("refused", "disconnected"):
                        raise ScreenshotFailed(app.link.detail)
                    await asyncio.sleep(0.01)
                await pilot.press(str(list(TABS).index(tab) + 1))
                await pilot.pause()
                if tab == "traces" and app.model.traces:
                    await wait_for_waterfall(app, timeout)
                if tab == "phrases":
                    await wait_for_phrases(app, timeout)
                if tab == "pushes":
                    await wait_for_pushes(app, timeout)
        except TimeoutError:
            raise ScreenshotFailed(f"no snapshot from {url} within {timeout:g}s") from None
        await pilot.pause()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(app.export_screenshot(title=f"reach-dash — {url}"))
    return out


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
