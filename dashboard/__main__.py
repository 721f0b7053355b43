"""``reach-dash`` / ``python -m dashboard``: open the dashboard on a running coordinator."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .app import TABS, ReachDashboard
from .screenshots import ScreenshotFailed, live

DESCRIPTION = """\
Watch and repair a running Agent-Reach coordinator from the terminal: agents and their
load, trace waterfalls, circuit breakers, and dead letters you can replay.

The dashboard talks only to the coordinator's admin feed (docs/admin-feed.md), a websocket
on the coordinator's own port, so it can run on another machine. The admin token is the
coordinator's Settings.admin_token; `reach serve` prints it, and from code it is
`reach.admin_token`.

keys: 1 Agents · 2 Traces · 3 Breakers · 4 Dead letters · 5 Capabilities · g go to an id
      / filter · ? help · q quit · d drain / b reset breaker (agents, breakers)
      r replay / R replay shown / e replay with new params / d discard (dead letters)

A picture of a running coordinator, without opening the dashboard:
  reach-dash --url ws://127.0.0.1:8765 --token T --screenshot out.svg [--tab breakers]
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="reach-dash", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default=os.environ.get("REACH_URL", "ws://127.0.0.1:8765"),
                   help="the coordinator's websocket URL (default: $REACH_URL or %(default)s)")
    p.add_argument("--token", default=os.environ.get("REACH_ADMIN_TOKEN"),
                   help="the coordinator's admin token (default: $REACH_ADMIN_TOKEN)")
    p.add_argument("--reconnect-cap", type=float, default=10.0, metavar="SECONDS",
                   help="longest wait between reconnect attempts (default: %(default)s)")
    p.add_argument("--screenshot", type=Path, metavar="OUT.svg",
                   help="connect, wait for the first snapshot, save the dashboard as an SVG "
                        "and exit (non-zero, with the reason, when it cannot connect)")
    p.add_argument("--tab", choices=list(TABS), default="agents",
                   help="the tab --screenshot shows (default: %(default)s)")
    p.add_argument("--size", default="120x36", metavar="COLSxROWS",
                   help="the terminal size --screenshot draws at (default: %(default)s)")
    return p


def size_of(text: str) -> tuple[int, int]:
    cols, _, rows = text.lower().partition("x")
    try:
        size = (int(cols), int(rows))
    except ValueError:
        size = (0, 0)
    if min(size) < 10:
        raise argparse.ArgumentTypeError(f"--size takes COLSxROWS, e.g. 160x40, not {text!r}")
    return size


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and run the dashboard until the operator quits."""
    args = parser().parse_args(argv)
    if not args.token:
        parser().error("an admin token is needed: --token TOKEN or $REACH_ADMIN_TOKEN "
                       "(`reach serve` prints it)")
    if args.screenshot is not None:
        try:
            size = size_of(args.size)
        except argparse.ArgumentTypeError as exc:
            parser().error(str(exc))
        try:
            out = asyncio.run(live(args.url, args.token, args.screenshot, tab=args.tab,
                                   size=size))
        except ScreenshotFailed as exc:
            print(f"reach-dash: no screenshot: {exc}", file=sys.stderr)
            raise SystemExit(1) from None
        print(out)
        return
    ReachDashboard(url=args.url, token=args.token, reconnect_cap=args.reconnect_cap).run()


if __name__ == "__main__":
    main()
