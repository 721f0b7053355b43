"""The admin feed's commands: each action's handler over ``reach.ops.Ops``
(docs/admin-feed.md, section 4). Arguments come from the wire: each handler checks and
converts its own before calling the operator surface."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from reach.errors import InvalidParams

# (handlers take the coordinator's ``reach.ops.Ops`` as ``Any``: importing it here, even for
# types alone, would make the two modules import each other)
Ops = Any
Command = Callable[[Ops, dict[str, Any]], Awaitable[Any]]
FILTERS = frozenset({"capability", "agent", "error", "since", "until"})


async def _replay(ops: Ops, args: dict[str, Any]) -> Any:
    return await ops.replay(str(args["task_id"]), wait=float(args.get("wait", 30.0)),
                            params=args.get("params"), timeout=args.get("timeout"), by="admin")


async def _discard(ops: Ops, args: dict[str, Any]) -> Any:
    return await ops.discard(str(args["task_id"]), reason=str(args.get("reason") or ""),
                             by="admin")


async def _dead_letters(ops: Ops, args: dict[str, Any]) -> Any:
    unknown = set(args) - FILTERS - {"discarded"}
    if unknown:
        raise InvalidParams(f"unknown filter(s) {sorted(unknown)}; use {sorted(FILTERS)} "
                            f"or discarded")
    return {"dead_letters": ops.dead_letters(**{k: v for k, v in args.items()})}


async def _replay_filter(ops: Ops, args: dict[str, Any]) -> Any:
    unknown = set(args) - FILTERS
    if unknown:
        raise InvalidParams(f"unknown filter(s) {sorted(unknown)}; use {sorted(FILTERS)}")
    return {"replayed": ops.replay_many(**args)}


async def _drain(ops: Ops, args: dict[str, Any]) -> Any:
    return ops.drain(str(args["agent"]))


async def _undrain(ops: Ops, args: dict[str, Any]) -> Any:
    return ops.undrain(str(args["agent"]))


async def _reset_breaker(ops: Ops, args: dict[str, Any]) -> Any:
    return ops.reset_breaker(str(args["agent"]))


async def _set_weight(ops: Ops, args: dict[str, Any]) -> Any:
    weight = args.get("weight")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int | float)):
        raise InvalidParams(f"weight must be a number or null, not {weight!r}")
    cap = args.get("capability")
    return ops.set_weight(str(args["agent"]), weight, None if cap is None else str(cap))


async def _pin(ops: Ops, args: dict[str, Any]) -> Any:
    return ops.pin(str(args["agent"]), str(args["capability"]))


async def _unpin(ops: Ops, args: dict[str, Any]) -> Any:
    agent = args.get("agent")
    return ops.unpin(str(args["capability"]), None if agent is None else str(agent))


async def _trace(ops: Ops, args: dict[str, Any]) -> Any:
    return (await ops.find_trace(str(args["trace_id"]))).timeline


async def _find(ops: Ops, args: dict[str, Any]) -> Any:
    return await ops.find(str(args["id"]))


async def _task(ops: Ops, args: dict[str, Any]) -> Any:
    view = await ops.task(str(args["task_id"]))
    if view is None:
        raise InvalidParams(f"no task {args['task_id']!r}")
    return view


async def _cancel(ops: Ops, args: dict[str, Any]) -> Any:
    return await ops.cancel(str(args["task_id"]), reason=str(args.get("reason") or ""),
                            by="admin")


async def _phrases(ops: Ops, args: dict[str, Any]) -> Any:
    cap = args.get("capability")
    return {"phrases": ops.phrases.phrases(None if cap is None else str(cap))}


async def _forget_phrase(ops: Ops, args: dict[str, Any]) -> Any:
    return await ops.phrases.forget(str(args["text"]))


async def _push_dead_letters(ops: Ops, args: dict[str, Any]) -> Any:
    return {"push_dead_letters": await ops.push_dead_letters()}


async def _replay_pushes(ops: Ops, args: dict[str, Any]) -> Any:
    task_id = args.get("task_id")
    return {"replayed": await ops.replay_pushes(None if task_id is None else str(task_id))}


async def _notify_secret(ops: Ops, args: dict[str, Any]) -> Any:
    # The secret completion webhooks are signed with when their caller gave no token
    # (docs/webhooks.md): an admin's to read, so receivers can be set up to verify.
    kind = None if ops.pushes is None else ops.pushes.kinds.get("webhook")
    return {"notify_secret": None if kind is None else kind.secret}


COMMANDS: dict[str, Command] = {
    "replay": _replay,
    "discard": _discard,
    "dead_letters": _dead_letters,
    "replay_filter": _replay_filter,
    "drain": _drain,
    "undrain": _undrain,
    "reset_breaker": _reset_breaker,
    "set_weight": _set_weight,
    "pin": _pin,
    "unpin": _unpin,
    "trace": _trace,
    "find": _find,
    "task": _task,
    "cancel": _cancel,
    "phrases": _phrases,
    "forget_phrase": _forget_phrase,
    "push_dead_letters": _push_dead_letters,
    "replay_pushes": _replay_pushes,
    "notify_secret": _notify_secret,
}
"""Every admin-feed action and its handler (docs/admin-feed.md, section 4)."""
