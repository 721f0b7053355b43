"""``reach submit``: hand a task over and exit, for a caller that cannot wait (a cron job, a
script): the task's id is printed at once, its outcome comes to ``--notify`` (a signed
webhook, docs/webhooks.md) or later to ``reach find ID``; ``--then`` passes its result on to
the next capability, a chain (docs/protocol.md). ``--wait S`` waits for the outcome instead,
following the chain to its last step."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from reach.cli_common import json_arg, print_json, token_of, usage


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``reach submit`` through ``cli_admin``'s ``command`` (its shared flags)."""
    p = command("submit", "hand a task over and print its id (--notify, --then, --wait)",
                "Submit CAPABILITY with the JSON object PARAMS as a durable task and print "
                "its id and trace id as soon as the coordinator has stored it; with --wait S, "
                "wait for the outcome (the last step's, in a chain) and print it as reach "
                'call does (--json: {"task_id", "trace_id", "duplicate"} or the result).',
                _submit, caller=True)
    p.add_argument("capability", help="the capability, like report.build")
    p.add_argument("params", nargs="?", default="{}", metavar="JSON",
                   help="the params, a JSON object (default {}); - reads it from stdin")
    p.add_argument("--caller", default="cli", help="the caller's name (default cli)")
    p.add_argument("--key", default=None, metavar="KEY",
                   help="an idempotency key: the same key again is the same task, never a "
                        "second one")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="the task's own deadline, retries included (seconds)")
    p.add_argument("--notify", default=None, metavar="URL",
                   help="POST the outcome here, signed, when the task (or its chain) ends")
    p.add_argument("--then", action="append", default=[], metavar="STEP",
                   help="pass a success's result on to this capability (repeat for more "
                        "steps; a step may be a JSON object {\"capability\": ..., \"map\": "
                        "{param: JSON pointer}})")
    p.add_argument("--wait", type=float, default=None, metavar="S",
                   help="wait at most S seconds for the outcome and print it")


def steps(given: list[str]) -> list[str | dict[str, Any]] | None:
    """``--then`` values: a capability name, or a step as a JSON object."""
    out: list[str | dict[str, Any]] = []
    for step in given:
        if step.lstrip().startswith("{"):
            try:
                value = json.loads(step)
            except ValueError as exc:
                raise usage(f"--then {step!r} is not JSON: {exc}") from None
            out.append(value)
        else:
            out.append(step)
    return out or None


async def _submit(args: argparse.Namespace) -> None:
    from reach.sdk.client import Client
    params = json_arg(args.params, "PARAMS")
    async with Client.connect(args.url, caller=args.caller, token=token_of(args)) as client:
        handle = await client.submit(args.capability, params, idempotency_key=args.key,
                                     timeout=args.timeout, notify=args.notify,
                                     then=steps(args.then))
        if args.wait is not None:
            print_json(await handle.result(args.wait))
            return
    if args.json:
        print_json({"task_id": handle.task_id, "trace_id": handle.trace_id,
                    "duplicate": handle.duplicate})
    else:
        print(f"{handle.task_id}  (trace {handle.trace_id})"
              + ("  a duplicate: the task this key named already" if handle.duplicate else ""))
