"""``reach-dash`` / ``python -m dashboard``: open the dashboard on a running coordinator."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from .app import ReachDashboard

DESCRIPTION = """\
Watch and repair a running Agent-Reach coordinator from the terminal: agents and their
load, trace waterfalls, circuit breakers, and dead letters you can replay.

The dashboard talks only to the coordinator's admin feed (docs/admin-feed.md), a websocket
on the coordinator's own port, so it can run on another machine. The admin token is the
coordinator's Settings.admin_token; `reach serve` prints it, and from code it is
`reach.admin_token`.

keys: 1 Agents · 2 Traces · 3 Breakers · 4 Dead letters · / filter · ? help · q quit
      d drain / b reset breaker (agents, breakers) · r replay / R replay shown (dead letters)
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
    return p


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and run the dashboard until the operator quits."""
    args = parser().parse_args(argv)
    if not args.token:
        parser().error("an admin token is needed: --token TOKEN or $REACH_ADMIN_TOKEN "
                       "(`reach serve` prints it)")
    ReachDashboard(url=args.url, token=args.token, reconnect_cap=args.reconnect_cap).run()


if __name__ == "__main__":
    main()
