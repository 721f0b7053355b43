"""Alert rules and webhooks declared in a TOML file (``reach serve --alerts alerts.toml``).

    [alerts]
    interval = 1.0                      # seconds between evaluations
    queue = 1000                        # notifications waiting per webhook, at most

    [[webhook]]
    name = "oncall"
    url = "https://hooks.example.com/reach"
    headers = { Authorization = "Bearer ${ONCALL_TOKEN}" }

    [[rule]]
    name = "ledger-breaker"
    kind = "breaker_open"               # dead_letters | breaker_open | p95_latency | no_agent
                                        # | backlog_age | undelivered
    threshold = 30                      # seconds not closed
    agent = "ledger-*"

docs/alerts.md describes every key. ``${NAME}`` in a string is the environment variable NAME
(``$$`` is a literal ``$``), as in the ``--agents`` file. Every mistake is reported with the
file, the line of its ``[[rule]]`` or ``[[webhook]]`` table and what to change, before the
coordinator starts.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from reach.core.alerts import (
    BACKLOG_AGE,
    BREAKER_OPEN,
    DEAD_LETTERS,
    KINDS,
    NO_AGENT,
    P95_LATENCY,
    UNDELIVERED,
    Rule,
)
from reach.core.backoff import Backoff
from reach.envvars import expand


class AlertsFileError(ValueError):
    """A rules file that cannot be used; the message names the file, line and fix."""


@dataclass(frozen=True, slots=True)
class Webhook:
    """Where alert transitions are POSTed (JSON, docs/alerts.md "The webhook body")."""

    name: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float = 5.0  # seconds per attempt
    attempts: int = 5  # tries per notification, the first included
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.5, factor=2.0, cap=30.0,
                                                             jitter=0.2))


@dataclass(frozen=True, slots=True)
class AlertConfig:
    """What a rules file says: the rules, the webhooks, how often to evaluate."""

    rules: tuple[Rule, ...]
    webhooks: tuple[Webhook, ...] = ()
    interval: float = 1.0
    queue: int = 1000

    def __post_init__(self) -> None:
        # (a file is checked line by line first; this catches a configuration built in code)
        names = [r.name for r in self.rules]
        hooks = {h.name for h in self.webhooks}
        if len(set(names)) != len(names) or len(hooks) != len(self.webhooks):
            raise AlertsFileError("rule names and webhook names must be unique")
        for rule in self.rules:
            if rule.kind not in KINDS or set(rule.notify) - hooks:
                raise AlertsFileError(f"rule {rule.name!r}: kind {rule.kind!r} (expected one "
                                      f"of {list(KINDS)}) or notify {list(rule.notify)} "
                                      f"(webhooks: {sorted(hooks)}) is wrong")
        if self.interval <= 0 or self.queue < 1:
            raise AlertsFileError("interval must be positive and queue at least 1")


_RULE_KEYS = {
    DEAD_LETTERS: {"threshold", "window", "capability", "agent"},
    BREAKER_OPEN: {"threshold", "capability", "agent"},
    P95_LATENCY: {"threshold", "capability"},
    NO_AGENT: {"threshold", "capability"},
    BACKLOG_AGE: {"threshold", "capability"},
    UNDELIVERED: {"threshold", "capability"},
}
_COMMON = {"name", "kind", "for", "clear_for", "hysteresis", "notify"}
_WEBHOOK_KEYS = {"name", "url", "headers", "timeout", "attempts", "backoff"}
_BACKOFF_KEYS = {"base", "factor", "cap", "jitter"}
_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*(rule|webhook)[ \t]*\]\]", re.M)


def load_alerts(path: str | os.PathLike[str], env: Any = None) -> AlertConfig:
    """Read and validate ``path`` (nothing is started)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AlertsFileError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    return parse_alerts(text, str(path), env)


def parse_alerts(text: str, source: str = "alerts.toml", env: Any = None) -> AlertConfig:
    """The configuration a rules text describes; see the module docstring."""
    env = os.environ if env is None else env
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AlertsFileError(f"{source}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"alerts", "rule", "webhook"})
    if unknown:
        raise AlertsFileError(f"{source}: unknown top-level key(s) {unknown}; a rules file "
                              f"has an [alerts] table, [[rule]] and [[webhook]] tables")
    lines: dict[str, list[int]] = {"rule": [], "webhook": []}
    for m in _HEADER.finditer(text):
        lines[m.group(1)].append(text.count("\n", 0, m.start()) + 1)
    options = data.get("alerts", {})
    if not isinstance(options, dict):
        raise AlertsFileError(f"{source}: alerts must be a table ([alerts])")
    extra = sorted(set(options) - {"interval", "queue"})
    if extra:
        raise AlertsFileError(f"{source}: [alerts]: unknown key(s) {extra}; allowed: "
                              f"['interval', 'queue']")
    interval = _positive(options, "interval", 1.0, f"{source}: [alerts]")
    queue = _count(options, "queue", 1000, f"{source}: [alerts]")
    hooks = [_webhook(expand(t, env, w, AlertsFileError), w)
             for t, w in _tables(data, "webhook", lines["webhook"], source)]
    names = [h.name for h in hooks]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise AlertsFileError(f"{source}: webhook name(s) {dupes} declared twice; names are "
                              f"unique")
    rules = [_rule(t, w, set(names)) for t, w in _tables(data, "rule", lines["rule"], source)]
    if not rules:
        raise AlertsFileError(f"{source}: no [[rule]] tables; see docs/alerts.md")
    taken = [r.name for r in rules]
    dupes = sorted({n for n in taken if taken.count(n) > 1})
    if dupes:
        raise AlertsFileError(f"{source}: rule name(s) {dupes} declared twice; names are "
                              f"unique")
    return AlertConfig(tuple(rules), tuple(hooks), interval, queue)


def _tables(data: dict[str, Any], kind: str, lines: list[int], source: str
            ) -> list[tuple[dict[str, Any], str]]:
    tables = data.get(kind, [])
    if not isinstance(tables, list):
        raise AlertsFileError(f"{source}: {kind} must be [[{kind}]] tables, one per {kind}")
    out = []
    for i, table in enumerate(tables):
        where = f"{source}, line {lines[i]}" if i < len(lines) else f"{source}, {kind} #{i + 1}"
        if not isinstance(table, dict):
            raise AlertsFileError(f"{where}: expected a [[{kind}]] table, not {table!r}")
        name = table.get("name")
        if not isinstance(name, str) or not name:
            raise AlertsFileError(f"{where}: every [[{kind}]] needs name = \"...\"")
        out.append((table, f"{where} ({kind} {name!r})"))
    return out


def _rule(table: dict[str, Any], where: str, webhooks: set[str]) -> Rule:
    kind = table.get("kind")
    if kind not in KINDS:
        raise AlertsFileError(f"{where}: kind = {kind!r}: expected one of {list(KINDS)}")
    allowed = _COMMON | _RULE_KEYS[kind]
    extra = sorted(set(table) - allowed)
    if extra:
        raise AlertsFileError(f"{where}: unknown key(s) {extra} for a {kind} rule; allowed: "
                              f"{sorted(allowed)}")
    threshold: float | None = None
    if "threshold" in table or kind in (DEAD_LETTERS, BREAKER_OPEN, BACKLOG_AGE):
        if "threshold" not in table:
            unit = "dead letters per window" if kind == DEAD_LETTERS else "seconds"
            raise AlertsFileError(f"{where}: a {kind} rule needs threshold = N ({unit})")
        threshold = _number(table, "threshold", 0.0, where,
                            positive=kind not in (DEAD_LETTERS, UNDELIVERED))
    hysteresis = _number(table, "hysteresis", 0.1 if kind == P95_LATENCY else 0.0, where)
    if hysteresis >= 1.0:
        raise AlertsFileError(f"{where}: hysteresis = {hysteresis}: a share below 1 (0.1 "
                              f"resolves at 90 % of the threshold)")
    notify = _names(table, "notify", where)
    missing = sorted(set(notify) - webhooks)
    if missing:
        raise AlertsFileError(f"{where}: notify names undeclared webhook(s) {missing}; "
                              f"declared: {sorted(webhooks) or 'none'}")
    return Rule(name=table["name"], kind=kind, threshold=threshold,
                hold=_number(table, "for", 0.0, where),
                clear_for=_number(table, "clear_for", 0.0, where), hysteresis=hysteresis,
                window=_positive(table, "window", 60.0, where),
                capabilities=_names(table, "capability", where),
                agents=_names(table, "agent", where), notify=notify)


def _webhook(table: dict[str, Any], where: str) -> Webhook:
    extra = sorted(set(table) - _WEBHOOK_KEYS)
    if extra:
        raise AlertsFileError(f"{where}: unknown key(s) {extra}; allowed: "
                              f"{sorted(_WEBHOOK_KEYS)}")
    url = table.get("url")
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise AlertsFileError(f"{where}: url = {url!r}: expected an http:// or https:// URL "
                              f"with a host")
    headers = table.get("headers", {})
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise AlertsFileError(f"{where}: headers must be a table of strings, e.g. headers = "
                              f"{{ Authorization = \"Bearer ${{TOKEN}}\" }}")
    backoff = table.get("backoff", {})
    if not isinstance(backoff, dict) or set(backoff) - _BACKOFF_KEYS:
        raise AlertsFileError(f"{where}: backoff must be a table with keys among "
                              f"{sorted(_BACKOFF_KEYS)}")
    b = Backoff()
    try:
        retry = Backoff(base=_number(backoff, "base", b.base, where),
                        factor=_number(backoff, "factor", b.factor, where),
                        cap=_number(backoff, "cap", b.cap, where),
                        jitter=_number(backoff, "jitter", b.jitter, where), mode="below")
    except ValueError as exc:
        if isinstance(exc, AlertsFileError):
            raise
        raise AlertsFileError(f"{where}: backoff: {exc}") from None
    return Webhook(name=table["name"], url=str(url), headers=tuple(sorted(headers.items())),
                   timeout=_positive(table, "timeout", 5.0, where),
                   attempts=_count(table, "attempts", 5, where), backoff=retry)


def _number(table: dict[str, Any], key: str, default: float, where: str, *,
            positive: bool = False) -> float:
    value = table.get(key, default)
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value < 0 or (positive and value == 0)):
        need = "a positive number" if positive else "a number >= 0"
        raise AlertsFileError(f"{where}: {key} = {value!r}: expected {need}")
    return float(value)


def _positive(table: dict[str, Any], key: str, default: float, where: str) -> float:
    return _number(table, key, default, where, positive=True)


def _count(table: dict[str, Any], key: str, default: int, where: str) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AlertsFileError(f"{where}: {key} = {value!r}: expected a whole number >= 1")
    return value


def _names(table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise AlertsFileError(f"{where}: {key} must be a name or a list of names (globs like "
                              f"\"ledger.*\" allowed), not {value!r}")
    return tuple(value)
