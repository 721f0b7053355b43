"""Operate a running coordinator from a shell: ``reach agents``, ``reach dead-letters``,
``reach replay``, ``reach discard``, ``reach drain``, ``reach call`` and the rest.

Each command opens the coordinator's admin feed with ``reach.Admin`` (``reach call``: a caller
session with ``reach.Client``), does one thing and exits. Human tables by default (rich, as
wide as the terminal); ``--json`` prints one JSON document on stdout for scripts.

Exit status: 0 on success. A refusal prints ``reach: CODE: message`` on stderr and exits with
the code's own status (``EXIT_CODES``), so a script can tell a bad token from a dead agent
without parsing text; 2 is a usage error (argparse's), 1 anything else.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from reach.cli_common import (
    ADMIN_TOKEN_ENV,
    CALLER_TOKEN_ENV,
    DEFAULT_URL,
    EXIT_CODES,
    URL_ENV,
    admin_of,
    failed,
    json_arg,
    print_json,
    token_of,
    usage,
)
from reach.cli_pushes import register as register_pushes
from reach.cli_submit import register as register_submit
from reach.cli_tables import err, ms, table
from reach.errors import ReachError

EPILOG = ("exit status: 0 ok; on an error its code and message go to stderr and the status "
          "says which: " + ", ".join(f"{n} {c}" for c, n in EXIT_CODES.items())
          + ", 1 other.")

Action = Callable[[argparse.Namespace], Coroutine[Any, Any, Any]]


def register(sub: Any) -> None:
    """Add the operator's subcommands to ``reach``'s subparsers (``sub``)."""

    def command(name: str, help: str, description: str, run: Action,
                caller: bool = False) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(
            name, help=help, description=description, epilog=EPILOG)
        p.add_argument("--url", default=os.environ.get(URL_ENV, DEFAULT_URL),
                       help=f"the coordinator's websocket URL (default: ${URL_ENV}, else "
                            f"{DEFAULT_URL})")
        env = CALLER_TOKEN_ENV if caller else ADMIN_TOKEN_ENV
        what = "the caller's token (open mode: none)" if caller else \
            "the admin token `reach serve` was given or printed"
        p.add_argument("--token", default=None,
                       help=f"{what} (default: ${env}); on the command line other users "
                            f"see it in ps: prefer ${env} or --token-file")
        p.add_argument("--token-file", type=Path, default=None, metavar="FILE",
                       help="read the token from FILE (one trailing newline dropped)")
        p.add_argument("--json", action="store_true",
                       help="print one JSON document on stdout, for scripts")
        p.set_defaults(run=run, token_env=env)
        return p

    command("agents", "list the coordinator's agents: state, load, breaker",
            "Every agent the coordinator knows, sorted by name (--json: "
            '{"agents": [AgentView...]}, docs/admin-feed.md).', _agents)
    command("tasks", "list the recent traces, newest first",
            "The coordinator's recent traces (up to 200), newest first: root capability, "
            'caller, state, duration (--json: {"traces": [TraceSummary...]}). '
            "Older ones: reach find ID.", _tasks)
    p = command("find", "show a task or trace by its id (or its first 6+ characters)",
                "Find a task or trace by its id or an unambiguous prefix of 6 or more "
                "characters; prints its trace's tasks (--json: the find result).", _find)
    p.add_argument("id", help="a task id, a trace id, or the first 6+ characters of one")
    p = command("trace", "show a trace's tasks and hops",
                "A trace's timeline: each task and each phase of it (queued, delivered, "
                "processing, retry, done) with its agent and duration (--json: Timeline).",
                _trace)
    p.add_argument("trace_id", help="the trace's id")
    p = command("dead-letters", "list the dead letters (tasks that failed for good)",
                "The unresolved dead letters, oldest first, with their last error. Settle "
                "one with reach replay ID or reach discard ID --reason TEXT "
                '(--json: {"dead_letters": [DeadLetter...]}).', _dead_letters)
    p.add_argument("--capability", default=None, help="only this capability's")
    p.add_argument("--agent", default=None, help="only those whose last attempt was this "
                                                 "agent's")
    p.add_argument("--error", default=None,
                   help="only those whose error contains this text (any case)")
    p.add_argument("--discarded", action="store_true",
                   help="the discarded letters instead (kept, with their reason)")
    p = command("replay", "replay a dead letter (or every one a filter matches)",
                "Replay one dead letter, optionally with new params or a new timeout "
                "(checked against the capability's schema; the letter's history records the "
                "change), and wait for its outcome; exit 0 only if it succeeded. Or replay "
                "every letter that --filter matches (--all: every one); their outcomes "
                "arrive later (reach dead-letters).", _replay)
    p.add_argument("task_id", nargs="?", default=None, metavar="ID",
                   help="the dead letter's task id")
    p.add_argument("--params", default=None, metavar="JSON",
                   help="replace the params with this JSON object")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="give the replay this task timeout in seconds")
    p.add_argument("--wait", type=float, default=None, metavar="S",
                   help="wait at most this long for the outcome (coordinator's default: 30)")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="instead of ID: replay every letter matching; KEY is capability, "
                        "agent, error (substring), since or until (epoch seconds); repeat "
                        "to narrow")
    p.add_argument("--all", action="store_true", help="instead of ID: replay every letter")
    p = command("discard", "settle a dead letter that can never succeed",
                "Discard a dead letter: it is kept and audited with your reason, and no "
                "longer listed (reach dead-letters --discarded shows it).", _discard)
    p.add_argument("task_id", metavar="ID", help="the dead letter's task id")
    p.add_argument("--reason", required=True, metavar="TEXT",
                   help="why (kept with the letter and in the audit log)")
    p = command("cancel", "cancel a task: it ends cancelled and its agent is told to stop",
                "Cancel a live task of any caller: it ends 'cancelled' (not a dead letter), "
                "whoever waits on it hears so, and its agent is told to stop.", _cancel)
    p.add_argument("task_id", metavar="ID", help="the task's id")
    p.add_argument("--reason", default="", metavar="TEXT", help="why (kept in its error)")
    p = command("drain", "route no new work to an agent; its in-flight work finishes",
                "Drain an agent (by name or agent_id): no new work is routed to it, its "
                "in-flight work finishes. reach undrain NAME gives it work again.", _drain)
    p.add_argument("name", help="the agent's name or agent_id")
    p = command("undrain", "let a drained agent receive work again",
                "Undrain an agent (by name or agent_id).", _undrain)
    p.add_argument("name", help="the agent's name or agent_id")
    p = command("phrases", "list (or forget) what intent routing learned from choices",
                "The phrases callers taught intent routing by choosing a suggested "
                "capability, oldest first; --forget TEXT stops routing that request by it "
                '(--json: {"phrases": [Phrase...]}, or the forgotten one).', _phrases)
    p.add_argument("--capability", default=None, help="only this capability's")
    p.add_argument("--forget", default=None, metavar="TEXT",
                   help="forget the phrase learned for this request (any case and spacing)")
    register_pushes(command)
    p = command("call", "call a capability and print its result as JSON",
                "Call CAPABILITY with the JSON object PARAMS as a caller would, and print the "
                "result as JSON on stdout; on failure the error's code and message go to "
                "stderr (see exit status).", _call, caller=True)
    p.add_argument("capability", help="the capability, like sales.query")
    p.add_argument("params", nargs="?", default="{}", metavar="JSON",
                   help="the params, a JSON object (default {}); - reads it from stdin")
    p.add_argument("--caller", default="cli", help="the caller's name (default cli)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="bound the whole call, retries included (seconds)")
    register_submit(command)


def run(args: argparse.Namespace) -> int:
    """Run one operator subcommand to its exit status (the CLI's entry may start a loop)."""
    try:
        result = asyncio.run(args.run(args))
    except ReachError as exc:
        return failed(exc.code, exc.message)
    except KeyboardInterrupt:
        return 130
    if isinstance(result, int) and not isinstance(result, bool):
        return result
    return 0


# ---------------------------------------------------------------- the commands

async def _agents(args: argparse.Namespace) -> None:
    async with admin_of(args) as admin:
        agents = await admin.agents()
    if args.json:
        print_json({"agents": agents})
        return
    rows = [[a["name"], a["state"] + (" (draining)" if a.get("draining") else ""),
             a.get("kind", "websocket"), f"{a.get('inflight', 0)}/{a.get('max_concurrency', 1)}",
             a.get("breaker", "closed"), str(a.get("calls", 0)), str(a.get("faults", 0)),
             ms(a.get("p95_ms")), ", ".join(a.get("capabilities", []))] for a in agents]
    table("Agents", ["Name", "State", "Kind", "Inflight", "Breaker", "Calls", "Faults", "p95",
                      "Capabilities"], rows, "no agents")


async def _tasks(args: argparse.Namespace) -> None:
    async with admin_of(args) as admin:
        traces = await admin.traces()
    if args.json:
        print_json({"traces": traces})
        return
    rows = [[t["trace_id"], t.get("root") or "-", t.get("caller") or "-", t.get("state", ""),
             str(t.get("tasks", 0)), ms(t.get("duration_ms")),
             t.get("failed_capability") or ""] for t in traces]
    table("Recent traces", ["Trace", "Root", "Caller", "State", "Tasks", "Duration",
                             "Failed at"], rows, "no traces yet")


def _timeline(timeline: dict[str, Any], title: str) -> None:
    rows = [["  " * int(t.get("depth", 0)) + t["capability"], t["task_id"], t.get("caller", ""),
             t.get("state", ""), err(t.get("error"))] for t in timeline.get("tasks", [])]
    table(title, ["Capability", "Task", "Caller", "State", "Error"], rows, "no tasks")
    hops = [[h["capability"], h["phase"], h.get("agent") or "-",
             "-" if h.get("attempt") is None else str(h["attempt"]), ms(h.get("duration_ms")),
             ("failed " if h.get("failed") else "") + (h.get("note") or "")]
            for h in timeline.get("hops", [])]
    if hops:
        table("Hops", ["Capability", "Phase", "Agent", "Attempt", "Duration", "Note"], hops, "")


async def _find(args: argparse.Namespace) -> None:
    async with admin_of(args) as admin:
        found = await admin.find(args.id)
    if args.json:
        print_json(found)
        return
    dead = " (dead letter)" if found.get("dead_letter") else ""
    _timeline(found.get("timeline") or {},
              f"Trace {found['trace_id']}" + (f", task {found['task_id']}{dead}"
                                               if found.get("task_id") else ""))


async def _trace(args: argparse.Namespace) -> None:
    async with admin_of(args) as admin:
        timeline = await admin.trace(args.trace_id)
    if args.json:
        print_json(timeline)
        return
    _timeline(timeline, f"Trace {args.trace_id}")


async def _dead_letters(args: argparse.Namespace) -> None:
    async with admin_of(args) as admin:
        letters = await admin.dead_letters(capability=args.capability, agent=args.agent,
                                           error=args.error, discarded=args.discarded)
    if args.json:
        print_json({"dead_letters": letters})
        return
    rows = [[d["task_id"], d["capability"], d.get("caller", ""), d.get("agent") or "-",
             str(len(d.get("attempts", []))), d.get("state", "dead"), err(d.get("error"))]
            for d in letters]
    table("Discarded letters" if args.discarded else "Dead letters",
           ["Task", "Capability", "Caller", "Agent", "Attempts", "State", "Error"], rows,
           "no discarded letters" if args.discarded else "no dead letters")


_FILTER_KEYS = ("capability", "agent", "error", "since", "until")


async def _replay(args: argparse.Namespace) -> int:
    many = bool(args.filter) or args.all
    if many == (args.task_id is not None):
        raise usage("give a dead letter's ID, or --filter KEY=VALUE (or --all) to replay "
                     "every letter that matches, not both")
    if many:
        if args.params is not None or args.timeout is not None:
            raise usage("--params and --timeout change one letter: give its ID")
        filters: dict[str, Any] = {}
        for item in args.filter:
            key, sep, value = item.partition("=")
            if not sep or key not in _FILTER_KEYS:
                raise usage(f"--filter {item!r}: use KEY=VALUE with KEY one of "
                             f"{', '.join(_FILTER_KEYS)}")
            try:
                filters[key] = float(value) if key in ("since", "until") else value
            except ValueError:
                raise usage(f"--filter {key}: give epoch seconds, not {value!r}") from None
        async with admin_of(args) as admin:
            replayed = await admin.replay_many(**filters)
        if args.json:
            print_json({"replayed": replayed})
        else:
            print(f"replaying {len(replayed)} dead letter(s)" +
                  "".join(f"\n  {task_id}" for task_id in replayed))
        return 0
    params = None if args.params is None else json_arg(args.params, "--params")
    async with admin_of(args) as admin:
        view = await admin.replay(args.task_id, params=params, timeout=args.timeout,
                                  wait=args.wait)
    state = view.get("state")
    if args.json:
        print_json(view)
    else:
        print(f"replayed {args.task_id}: {state}")
    if state == "succeeded":
        return 0
    error = view.get("error")
    if isinstance(error, dict) and error.get("code"):
        return failed(str(error["code"]), str(error.get("message", "")))
    return failed("timeout", f"the replay is still {state} after the wait "
                              f"(reach find {args.task_id} shows it later)")


async def _discard(args: argparse.Namespace) -> None:
    async with admin_of(args) as admin:
        letter = await admin.discard(args.task_id, reason=args.reason)
    if args.json:
        print_json(letter)
    else:
        print(f"discarded {args.task_id}: {args.reason}")


async def _cancel(args: argparse.Namespace) -> None:
    async with admin_of(args) as admin:
        view = await admin.cancel(args.task_id, reason=args.reason)
    if args.json:
        print_json(view)
    else:
        print(f"{args.task_id}: {view.get('state')}")


async def _drain(args: argparse.Namespace) -> None:
    async with admin_of(args) as admin:
        view = await admin.drain(args.name)
    if args.json:
        print_json(view)
    else:
        print(f"draining {view.get('name', args.name)}: no new work; "
              f"{view.get('inflight', 0)} in flight finish")


async def _undrain(args: argparse.Namespace) -> None:
    async with admin_of(args) as admin:
        view = await admin.undrain(args.name)
    if args.json:
        print_json(view)
    else:
        print(f"undrained {view.get('name', args.name)}: {view.get('state', '')}")


async def _phrases(args: argparse.Namespace) -> int:
    async with admin_of(args) as admin:
        if args.forget is not None:
            gone = await admin.forget_phrase(args.forget)
            if args.json:
                print_json(gone)
            elif gone["forgotten"]:
                print(f"forgot {gone['text']!r} → {gone.get('capability')}")
            else:
                print(f"nothing learned for {args.forget!r}")
            return 0 if gone["forgotten"] else 1
        phrases = await admin.phrases(args.capability)
    if args.json:
        print_json({"phrases": phrases})
    else:
        table("Learned phrases", ["Phrase", "Capability", "Caller"],
              [[p["text"], p["capability"], p["caller"]] for p in phrases], "none learned")
    return 0


async def _call(args: argparse.Namespace) -> None:
    from reach.sdk.client import Client
    params = json_arg(args.params, "PARAMS")
    async with Client.connect(args.url, caller=args.caller, token=token_of(args)) as client:
        result = await client.call(args.capability, params, timeout=args.timeout)
    print_json(result)
