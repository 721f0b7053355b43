"""The checks ``Gateway.accept`` makes before it records a task, and what it answers.

A refusal is a typed ``ReachError`` raised before anything is stored: a key reused for other
work, a trace that belongs to another caller, an intent nothing matches.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from reach.config import Settings
from reach.core import chains, names, reasons
from reach.core import intent as intents
from reach.core import intent_learn as learning
from reach.core import tags as tagging
from reach.core.agents import Declared
from reach.core.chains import Step
from reach.core.registry import Registry
from reach.core.tasks import SubmitRequest, Task
from reach.errors import InvalidParams, NoRoute, Rejected, Unauthorized, Unavailable
from reach.gateway.backlog import Backlog
from reach.gateway.book import TaskBook


@dataclass(slots=True)
class Admission:
    """What ``Gateway.accept`` decided: the task (None when only the store knows it, see
    ``lookup``), whether it is a duplicate, and the commit to wait for before acknowledging."""

    task: Task | None
    duplicate: bool
    commit: asyncio.Future[None] | None
    lookup: str | None


def check_same_work(first: Task, capability: str, key: str) -> None:
    """A key names one piece of work: reusing it for another capability is a mistake that
    must not be answered with the other capability's result."""
    if first.envelope.capability != capability:
        raise InvalidParams(
            f"idempotency key {key!r} was already used for "
            f"{first.envelope.capability!r}; use a new key for {capability!r}",
            task_id=first.task_id)


def check_join(book: TaskBook, trace_id: str, caller: str, parent_task_id: str | None) -> None:
    """A caller may add to a trace it started, or one whose ``parent_task_id`` task its agent
    is running (a nested call); not to a stranger's trace, whose views it would otherwise
    join (and whose operator would see its tasks as part of the chain)."""
    ids = book.traces.get(trace_id)
    if not ids:
        return
    root = book.find(ids[0])
    if root is None or root.envelope.caller == caller:
        return
    parent = None if parent_task_id is None else book.find(parent_task_id)
    if parent is not None and parent.envelope.trace_id == trace_id and \
            any(a.agent == caller for a in parent.attempts):
        return
    raise Unauthorized(
        f"trace {trace_id!r} belongs to another caller; start a new trace, or name as "
        f"parent_task_id the task your agent is running", trace_id=trace_id)


def follow(request: SubmitRequest) -> tuple[Step, ...]:
    """The chain steps a submit asks for, its webhook URL checked too (``InvalidParams``
    saying what is wrong). Asked only of a submit that has either."""
    try:
        return chains.follow_of(request.notify, request.then)
    except ValueError as exc:
        raise InvalidParams(str(exc)) from None


def not_connected(capability: str, agents: set[str]) -> Unavailable:
    """A call to a capability declared before but by no agent connected now."""
    return Unavailable(
        f"{capability!r} is declared by {sorted(agents)}, not connected now (after a restart "
        f"agents reconnect by themselves); retry shortly, or submit it to wait for one",
        capability=capability)


def unreachable(capability: str, declaring: Declared, tags: tagging.Wanted | None,
                now: float) -> Unavailable:
    """A call that did not ask to wait, to a capability declared but with nobody (with
    ``tags``) healthy right now: what holds each agent back, said at once rather than
    accepted to wait (a submit waits instead)."""
    pool = [r for r in declaring.values() if not tags or tagging.matches(
        tagging.parse(r.capabilities[capability].spec.tags), tags)]
    why = reasons.none_can(capability, pool, now)
    return Unavailable(why if not tags else f"{why} (with tags {tagging.describe(tags)})",
                       capability=capability)


def check_backlog(backlog: Backlog, capability: str, settings: Settings, now: float) -> None:
    """Refuse a submit before acceptance (nothing accepted is refused later) when
    ``capability``'s backlog is at ``max_backlog`` tasks, or its longest waiting task has
    waited past ``max_backlog_age`` (``now``: the wall clock)."""
    waiting = backlog.depth(capability)
    if waiting >= settings.max_backlog:
        raise Rejected(
            f"{capability!r} has {waiting} tasks waiting for a free agent, its limit "
            f"(max_backlog {settings.max_backlog}); slow down and retry, or add agents",
            level=1.0, capability=capability, backlog=waiting)
    limit = settings.max_backlog_age
    if limit is not None and (age := backlog.oldest(capability, now)) > limit:
        raise Rejected(
            f"{capability!r} has had a task waiting for a free agent for {age:.0f}s, past "
            f"its limit (max_backlog_age {limit:.0f}s); slow down and retry, or add agents",
            level=1.0, capability=capability, backlog=waiting, oldest_s=round(age, 3))


def any_tagged(declaring: Declared, tags: tagging.Wanted) -> bool:
    """Is some agent declaring the tags online? An agent on a group's shelf is online and
    connected, so the groups are looked at, not every agent."""
    return any(len(g.ready) + len(g.full) + len(g.held)
               for g in declaring.groups.values() if tagging.matches(g.tags, tags))


# What a refusal that offers capabilities adds: choosing one teaches the phrase (chosen()).
TEACH = ", or choose one for this intent and it is learned"


def by_intent(registry: Registry, text: str, may: Callable[[str], bool] | None = None) -> str:
    """The capability an intent names, or why not: ``InvalidParams`` for a request with no
    words (or past ``intent.MAX_TEXT``), ``NoRoute`` with ``candidates`` when two capabilities
    fit about as well, ``NoRoute`` with ``suggestions`` when none fits well enough.

    ``may`` (when call rules are configured) says which capabilities the caller may call: a
    refusal names no other, and a match on one it may not call is refused like a request
    nothing fits (its name is not told)."""
    if not text.strip():
        raise InvalidParams("name a capability or state an intent")
    return decided(text, registry.resolve_intent(text), may)


def decided(text: str, decision: intents.Decision,
            may: Callable[[str], bool] | None = None) -> str:
    """The capability ``decision`` routes ``text`` to, or the refusal it means (``by_intent``;
    the model's fused decisions too, reach.server.intent_routing)."""
    if may is not None:
        decision = _visible(decision, may)
    said, suggestions = _echo(text), list(decision.suggestions)
    if decision.capability is not None:
        return decision.capability
    why = {"why": {cap: list(shown) for cap, shown in decision.why}} if decision.why else {}
    if decision.outcome is intents.Outcome.TOO_LONG:
        raise InvalidParams(f"the intent is {len(text)} characters, more than "
                            f"{intents.MAX_TEXT}; say it in fewer words or name a capability")
    if decision.outcome is intents.Outcome.EMPTY:
        raise InvalidParams(f"the intent {said} has no words to match; name a capability "
                            f"or state an intent")
    if decision.outcome is intents.Outcome.AMBIGUOUS:
        first, second = decision.candidates
        raise NoRoute(f"{said} is ambiguous: {first} or {second}? name one explicitly{TEACH}",
                      intent=text, candidates=list(decision.candidates),
                      suggestions=suggestions, **why)
    closest = f" (closest: {', '.join(suggestions)})" if suggestions else ""
    raise NoRoute(f"no capability matches the intent {said}{closest}; name one explicitly"
                  f"{TEACH if suggestions else ''}", intent=text, suggestions=suggestions, **why)


def _visible(decision: intents.Decision, may: Callable[[str], bool]) -> intents.Decision:
    """``decision`` as a caller who may call only what ``may`` allows sees it."""
    if decision.capability is not None and may(decision.capability):
        return decision
    candidates = decision.candidates if all(may(c) for c in decision.candidates) else ()
    suggestions = tuple(c for c in decision.suggestions if may(c))
    why = tuple((c, w) for c, w in decision.why if c in candidates or c in suggestions)
    if decision.outcome is intents.Outcome.MATCH or (decision.candidates and not candidates):
        return intents.Decision(intents.Outcome.WEAK, suggestions=suggestions, why=why)
    return replace(decision, candidates=candidates, suggestions=suggestions, why=why)


def chosen(registry: Registry, text: str, capability: str, caller: str, now: float,
           then: Callable[[learning.Phrase], None] | None = None) -> learning.Phrase | None:
    """A caller named ``capability`` together with the intent ``text``: when routing the
    text would have refused and offered that capability, learn the phrase (``registry.
    learned``), tell ``then`` (the store keeps it) and return it; else None."""
    if not text.strip() or len(text) > learning.MAX_PHRASE:
        return None
    decision = registry.resolve_intent(text)
    if not learning.teaches(decision, capability):
        return None
    phrase = learning.Phrase(text, capability, now, caller)
    registry.learned.add(phrase)
    if then is not None:
        then(phrase)
    return phrase


def _echo(text: str, limit: int = 80) -> str:
    """The caller's words, quoted for a message: one line, cut after ``limit`` characters
    (``details.intent`` keeps them whole)."""
    flat = " ".join(text.split())
    return json.dumps(flat if len(flat) <= limit else flat[:limit] + "…", ensure_ascii=False)


class Submitters:
    """The two most recent distinct submitters and when: enough to tell whether another
    caller is competing now (``contended``), at the same cost for any number of callers."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: list[tuple[str | None, float]] = [(None, 0.0), (None, 0.0)]

    def note(self, caller: str, now: float) -> None:
        last = self._last
        if last[0][0] == caller:
            last[0] = (caller, now)
        else:
            last[1], last[0] = last[0], (caller, now)

    def contended(self, caller: str, now: float, within: float = 0.5) -> bool:
        """Whether a caller other than ``caller`` submitted work in the last ``within`` s."""
        other = self._last[1] if self._last[0][0] == caller else self._last[0]
        return other[0] is not None and other[1] >= now - within


def learn(known: dict[str, set[str]], declared: dict[str, list[str]]) -> None:
    """Add what agents declared when they last registered (the store's agents: name →
    capability names) to ``known`` (capability → the agents that ever declared it), so that
    a capability whose agents are not connected here yet is waited for, not ``no_route``:
    at start, and before a cluster's node carries on a dead node's chains."""
    for name, caps in declared.items():
        for cap in caps:
            try:
                known.setdefault(names.normalize(cap), set()).add(name)
            except ValueError:  # (a name an older version let in)
                continue
