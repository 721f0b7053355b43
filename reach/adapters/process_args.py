"""What a command-line agent's process is given: its program, its argument templates, its
environment and the call's context (docs/adapters.md, "Command-line agents").

Nothing here starts a process. Templates are parsed once, when the agent is declared, so a
mistake in a file of declarations is reported before the coordinator starts; filling one per
call is a list of string joins. Values are never passed through a shell: each template item
becomes exactly one argv item, whatever the value contains.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from reach.adapters.base import traceparent_of
from reach.ports import Work

# Variables a command inherits from the coordinator by default: enough to find programs, run
# in the right locale and write temporary files, and nothing that holds a secret (tokens,
# database URLs, cloud credentials stay with the coordinator unless ``env`` names them).
MINIMAL_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR")
_TOKEN = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|\{|\}")


class MissingParam(Exception):  # noqa: N818 — becomes the caller's answer, not a crash
    """A template names a parameter the call did not give (or gave as null)."""


class Template:
    """One argv item with ``{param}`` holes (``{{``/``}}`` for literal braces)."""

    __slots__ = ("parts", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.parts: list[tuple[bool, str]] = []  # (is a parameter, literal text or its name)
        literal: list[str] = []
        pos = 0
        for m in _TOKEN.finditer(text):
            literal.append(text[pos:m.start()])
            pos = m.end()
            token = m.group(0)
            if token in ("{{", "}}"):
                literal.append(token[0])
            elif m.group(1) is not None:
                self.parts.append((False, "".join(literal)))
                literal = []
                self.parts.append((True, m.group(1)))
            else:
                raise ValueError(f"argument template {text!r}: a lone {token!r} (write "
                                 f"{token * 2!r} for a literal brace, or {{name}} for a "
                                 f"parameter)")
        literal.append(text[pos:])
        self.parts.append((False, "".join(literal)))
        self.parts = [p for p in self.parts if p[0] or p[1]]

    def fill(self, params: Mapping[str, Any]) -> str:
        if len(self.parts) == 1 and not self.parts[0][0]:
            return self.parts[0][1]
        out = []
        for is_param, text in self.parts:
            if not is_param:
                out.append(text)
                continue
            value = params.get(text)
            if value is None:
                raise MissingParam(f"this command line needs the parameter {text!r} "
                                   f"(argument {self.text!r}); the call did not give it")
            out.append(as_arg(value))
        filled = "".join(out)
        if "\x00" in filled:
            raise MissingParam(f"argument {self.text!r}: a parameter contains a NUL byte, "
                               f"which no command line can carry")
        return filled


def as_arg(value: Any) -> str:
    """A parameter as command-line text: strings as they are, numbers and booleans as JSON
    writes them (``3``, ``2.5``, ``true``), lists and objects as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def templates(agent: str, capability: str, args: Any) -> list[Template]:
    """The parsed ``args`` of one capability; ``ValueError`` naming it when malformed."""
    where = f"agent {agent!r}, capability {capability!r}"
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{where}: args must be a list of strings, such as "
                         f"[\"--region\", \"{{region}}\"]")
    try:
        return [Template(a) for a in args]
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def argv_list(agent: str, argv: Any) -> list[str]:
    """Check the command line: a non-empty list of strings (never one string for a shell)."""
    if isinstance(argv, str):
        raise ValueError(f"agent {agent!r}: argv is a list of arguments, not one string (no "
                         f"shell splits it); write [\"prog\", \"arg\", ...], or "
                         f"[\"sh\", \"-c\", {argv!r}] if you mean a shell")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"agent {agent!r}: argv must be a non-empty list of strings, such as "
                         f"[\"python\", \"tool.py\"]")
    if any("\x00" in a for a in argv) or not argv[0]:
        raise ValueError(f"agent {agent!r}: argv holds an empty program name or a NUL byte")
    return list(argv)


def base_env(agent: str, env: Any, inherit: bool,
             outer: Mapping[str, str] | None = None,
             over: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every call starts from: the coordinator's whole environment when
    ``inherit``, else only ``MINIMAL_ENV`` and ``LC_*``; then ``over`` (the ``HOME`` and
    ``USER`` of the user it runs as), then ``env`` is laid over it."""
    outer = os.environ if outer is None else outer
    if env is not None and not isinstance(env, Mapping):
        raise ValueError(f"agent {agent!r}: env must be a table of NAME = \"value\" strings")
    given = dict(env or {})
    for key, value in given.items():
        if not isinstance(key, str) or not key or "=" in key or "\x00" in key:
            raise ValueError(f"agent {agent!r}: env name {key!r} is not a variable name")
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError(f"agent {agent!r}: env {key} must be a string (write "
                             f"\"{value}\" in quotes), without NUL bytes")
    if inherit:
        start = dict(outer)
    else:
        start = {k: v for k, v in outer.items() if k in MINIMAL_ENV or k.startswith("LC_")}
    start.update(over or {})
    start.update(given)
    return start


def resolve(agent: str, program: str, path: str | None, cwd: str | None) -> str:
    """The executable ``program`` names, as the command will be started (a name without a
    slash is looked up on the command's ``PATH``; a relative path is taken from ``cwd``).
    ``ValueError`` saying what to fix when there is none, or it may not be executed."""
    if "/" in program:
        full = os.path.join(cwd or os.getcwd(), program)
        if not os.path.isfile(full):
            raise ValueError(f"agent {agent!r}: the program {program!r} does not exist"
                             + (f" (relative to cwd {cwd!r})" if cwd else ""))
        if not os.access(full, os.X_OK):
            raise ValueError(f"agent {agent!r}: {program!r} is not executable; chmod +x it, "
                             f"or run it through its interpreter ([\"python\", "
                             f"{program!r}, ...])")
        return os.path.abspath(full)
    for folder in (path or "").split(os.pathsep):
        full = os.path.join(folder or ".", program)
        if os.path.isfile(full) and os.access(full, os.X_OK):
            return os.path.abspath(full) if not folder else full
    raise ValueError(f"agent {agent!r}: no program {program!r} on its PATH ({path!r}); give "
                     f"its full path, or set PATH in env")


def context_env(work: Work, capability: str) -> dict[str, str]:
    """The call's context as environment variables (per-call mode; docs/adapters.md)."""
    env = {"REACH_TASK_ID": work.task_id, "REACH_ATTEMPT": str(work.attempt),
           "REACH_CAPABILITY": capability, "REACH_CALLER": work.caller,
           "REACH_TRACE_ID": work.trace_id, "REACH_IDEMPOTENCY_KEY": work.idempotency_key}
    traceparent = traceparent_of(work)
    if traceparent:
        env["TRACEPARENT"] = traceparent  # the OpenTelemetry name for it in an environment
    if work.parent_task_id:
        env["REACH_PARENT_TASK_ID"] = work.parent_task_id
    if work.deadline_ms is not None:
        env["REACH_DEADLINE_MS"] = str(max(0, int(work.deadline_ms)))
    return env


def context_fields(work: Work, capability: str) -> dict[str, Any]:
    """The call's context as the fields of a stdio request line (those known)."""
    line: dict[str, Any] = {"capability": capability, "params": work.params,
                            "task_id": work.task_id, "attempt": work.attempt,
                            "trace_id": work.trace_id, "caller": work.caller,
                            "idempotency_key": work.idempotency_key}
    traceparent = traceparent_of(work)
    if traceparent:
        line["traceparent"] = traceparent
    if work.parent_task_id:
        line["parent_task_id"] = work.parent_task_id
    if work.deadline_ms is not None:
        line["deadline_ms"] = max(0, int(work.deadline_ms))
    return line
