"""Adapter agents declared in a TOML file (``reach serve --agents agents.toml``).

    [[agent]]
    kind = "http"                       # http | process | nats | a2a
    name = "legacy-orders"
    url = "http://127.0.0.1:9000"
    health = "/healthz"
    headers = { Authorization = "Bearer ${ORDERS_TOKEN}" }

    [agent.capabilities."orders.lookup"]
    method = "POST"
    path = "/lookup"
    idempotent = true
    latency_ms = 200

Each ``[[agent]]`` table holds the keyword arguments of its kind's class (``HttpAgent``,
``ProcessAgent``, ``NatsAgent``, ``A2AAgent``), so the file and the code say the same thing.
``${NAME}`` in a string is the environment variable NAME, so secrets stay out of the file
(``$$`` is a literal ``$``, e.g. in a shell command line). Every mistake is reported with
the file, the line of its ``[[agent]]`` table and what to change, before the coordinator
starts.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from reach.adapters.base import Adapter
from reach.envvars import expand

# kind → (module, class), imported only when a file uses the kind (nats, a2a are extras)
KINDS: dict[str, tuple[str, str]] = {
    "http": ("reach.adapters.http", "HttpAgent"),
    "process": ("reach.adapters.process", "ProcessAgent"),
    "nats": ("reach.adapters.nats", "NatsAgent"),
    "a2a": ("reach.adapters.a2a", "A2AAgent"),
}
_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*agent[ \t]*\]\]", re.M)


class AgentsFileError(ValueError):
    """A declarations file that cannot be used; the message names the file and line."""


def load_agents(path: str | Path, env: dict[str, str] | None = None) -> list[Adapter]:
    """Read ``path`` and build one adapter per ``[[agent]]`` table (nothing is started)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AgentsFileError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    return parse_agents(text, str(path), os.environ if env is None else env)


def parse_agents(text: str, source: str = "agents.toml",
                 env: Any = None) -> list[Adapter]:
    """Build the adapters a declarations text describes; see the module docstring."""
    env = os.environ if env is None else env
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AgentsFileError(f"{source}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"agent"})
    if unknown:
        raise AgentsFileError(f"{source}: unknown top-level key(s) {unknown}; declare each "
                              f"agent in its own [[agent]] table")
    tables = data.get("agent", [])
    if not isinstance(tables, list) or not tables:
        raise AgentsFileError(f"{source}: no [[agent]] tables; see docs/adapters.md")
    lines = [text.count("\n", 0, m.start()) + 1 for m in _HEADER.finditer(text)]
    adapters: list[Adapter] = []
    seen: dict[str, int] = {}
    for i, table in enumerate(tables):
        line = lines[i] if i < len(lines) else None
        where = f"{source}, line {line}" if line else f"{source}, agent #{i + 1}"
        name = table.get("name")
        if isinstance(name, str):
            where += f" (agent {name!r})"
            if name in seen:
                raise AgentsFileError(f"{where}: the name is declared twice (first at line "
                                      f"{seen[name]}); agent names are unique")
            seen[name] = line or 0
        try:
            adapters.append(build(expand(table, env, where, AgentsFileError)))
        except AgentsFileError:
            raise
        except (ValueError, TypeError, ImportError) as exc:  # ImportError: an extra not installed
            raise AgentsFileError(f"{where}: {exc}") from None
    return adapters


def build(table: dict[str, Any]) -> Adapter:
    """One adapter from its table: ``kind`` picks the class, the rest are its arguments."""
    table = dict(table)
    kind = table.pop("kind", None)
    if kind not in KINDS:
        raise ValueError(f"kind = {kind!r}: expected one of {sorted(KINDS)}")
    if not isinstance(table.get("name"), str):
        raise ValueError("every agent needs name = \"...\"")
    cls = _class(kind)
    accepted = _arguments(cls)
    extra = sorted(set(table) - accepted)
    if extra:
        raise ValueError(f"unknown key(s) {extra} for a {kind} agent; allowed: "
                         f"{sorted(accepted)}")
    name = table.pop("name")
    adapter: Adapter = cls(name, **table)
    return adapter


def _class(kind: str) -> type[Adapter]:
    module, attr = KINDS[kind]
    try:
        cls: type[Adapter] = getattr(importlib.import_module(module), attr)
    except ImportError as exc:  # (a missing extra is said by the class itself, when built)
        raise ValueError(f"{kind} agents are not available here: {exc}") from None
    return cls


def _arguments(cls: type[Adapter]) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:  # pragma: no branch — stops at Adapter, which takes no **kw
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                  and p.name != "self"}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break  # this class does not pass further keywords on
    return names
