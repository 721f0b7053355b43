"""``reach pushes``: the notifications a coordinator could not deliver — A2A push notifications
and task completion webhooks — and their replay (``--replay``). A receiver that stayed down
past the sender's tries leaves a dead letter, kept across restarts (docs/a2a.md,
docs/webhooks.md); once it is back, one command sends them again. ``--notify-secret`` prints
the secret webhooks are signed with when their caller gave no token."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from reach.cli_common import admin_of, print_json, usage
from reach.cli_tables import table


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``reach pushes`` through ``cli_admin``'s ``command`` (its shared flags)."""
    p = command("pushes", "list (or replay) the notifications not delivered",
                "The task notifications (A2A push notifications, completion webhooks) that "
                "were not delivered after their tries, oldest first, with why; --replay "
                "sends them again (--task ID: one task's), each with its tries, and those "
                "that fail again are listed again (--json: {\"push_dead_letters\": [...]}, "
                "or {\"replayed\": [task ids]}). --notify-secret prints the secret webhooks "
                "are signed with when their caller gave no token (docs/webhooks.md).",
                _pushes)
    p.add_argument("--replay", action="store_true", help="send them again")
    p.add_argument("--task", default=None, metavar="ID",
                   help="with --replay: only this task's notifications")
    p.add_argument("--notify-secret", action="store_true",
                   help="print the coordinator's webhook signing secret")


async def _pushes(args: argparse.Namespace) -> int:
    if args.task is not None and not args.replay:
        raise usage("--task ID picks what --replay sends: give --replay too")
    async with admin_of(args) as admin:
        if args.notify_secret:
            secret = await admin.notify_secret()
            if args.json:
                print_json({"notify_secret": secret})
            else:
                print(secret or "")
            return 0
        if args.replay:
            replayed = await admin.replay_pushes(args.task)
            if args.json:
                print_json({"replayed": replayed})
            else:
                print(f"sending {len(replayed)} notification(s) again"
                      + "".join(f"\n  {task_id}" for task_id in replayed))
            return 0
        letters = await admin.push_dead_letters()
    if args.json:
        print_json({"push_dead_letters": letters})
        return 0
    table("Notifications not delivered",
          ["Task", "Kind", "Capability", "Caller", "URL", "Since", "Error"],
          [[d["task_id"], d.get("kind", "a2a"), d["capability"], d["caller"], d["url"],
            _since(d["dead_at"]), d["reason"]] for d in letters], "none undelivered")
    return 0


def _since(at: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(at)))
