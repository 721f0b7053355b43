"""The registry: who is connected, what they declare, how alive and how busy they are.

Pure bookkeeping (times come in as arguments); the channel feeds it frames' contents and the
gateway reads candidates from it. Capabilities are indexed, so finding the agents for one
capability never scans every agent, and within a capability the agents routing may send work
to now are kept apart from the rest (``Declared``), so picking one never scans them all either.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from reach.core import intent, intent_learn, names
from reach.core.agents import AgentRecord, Capability, Declared
from reach.core.liveness import Liveness, LivenessPolicy, bounded_interval, deadline, judge
from reach.core.results import compile_returns
from reach.core.schemas import MAX_SCHEMA_BYTES, compile_schema
from reach.ports import AgentLink
from reach.wire.protocol import CapabilitySpec

# Warnings one registration lists at most; past them, one line says how many more there were.
MAX_WARNINGS = 20

@dataclass(slots=True)
class Registration:
    record: AgentRecord
    normalized: list[str]
    warnings: list[str]


class Registry:
    """Agents by id and name, and an index capability → agents declaring it (``Declared``).

    ``sweep`` re-judges only the agents whose next liveness threshold has passed. Each agent
    waits in one slot of a timing wheel (slots ``interval / 16`` wide, keyed by due time); a
    beat does not move it, so beats stay cheap: when its slot comes up, an agent that beat
    since is simply put in the slot of its new deadline. At 10,000 agents this costs a few
    times less than judging every agent on every sweep (bench/registry.py measures both)."""

    def __init__(self, policy: LivenessPolicy, breaker_open_for: float = 5.0,
                 max_schema_bytes: int = MAX_SCHEMA_BYTES, warmup: float = 60.0) -> None:
        self.policy = policy
        self.warmup = warmup  # each agent's default warm-up period (AgentRecord.warmup)
        self.max_schema_bytes = max_schema_bytes
        self.breaker_open_for = breaker_open_for
        self.by_id: dict[str, AgentRecord] = {}
        self.by_name: dict[str, AgentRecord] = {}
        self.index: dict[str, Declared] = {}
        # The names of ``index`` (a capability stays while any agent declares it), indexed
        # for look-alike warnings and ``no_route`` suggestions.
        self.names = names.NameIndex()
        # Told of every registration and liveness change (``listen``).
        self._listeners: list[Callable[[AgentRecord], None]] = []
        self._slot_width = policy.interval / 16
        self._wheel: dict[int, list[tuple[float, AgentRecord]]] = {}
        self._cursor: int | None = None  # the first slot the next sweep looks at
        # Moves whenever what capabilities say about themselves (names, intents, tags,
        # descriptions) changes: the intent matcher's index is kept until it does.
        self.catalogue_version = 0
        self._intents = intent.IndexCache()
        self.learned = intent_learn.Learned()  # phrases callers taught (edge-persisted)
        self.intent_rebuild: Callable[[], None] | None = None  # an edge's, off the loop
        self.intent_off_loop_at = 64  # capabilities from which it is used (intent_index)

    # ------------------------------------------------------------ membership

    def register(self, *, agent_id: str, name: str, version: str, max_concurrency: int,
                 specs: list[CapabilitySpec], link: AgentLink | None, now: float,
                 instance: str | None = None, kind: str = "websocket",
                 heard: bool = True, heartbeat_interval: float | None = None,
                 node: str | None = None) -> Registration:
        """Add or refresh an agent. Raises ``SchemaError``/``ValueError`` on a bad declaration.

        ``kind`` says what carries its work (websocket, http, process, nats); ``heard=False``
        registers an agent no sign of life has come from yet (an adapter whose first health
        check failed): it starts suspected, and its first beat makes it online. ``node``
        names the coordinator holding the agent's connection (None: this one; reach.cluster).
        ``heartbeat_interval`` is the agent's own (bounded: ``liveness.bounded_interval``)."""
        caps: dict[str, Capability] = {}
        warnings: list[str] = []
        unsaid = 0  # warnings past MAX_WARNINGS: counted, not listed
        index, previous = self.index, self.by_id.get(agent_id)
        said_before = {} if previous is None else _said(previous.capabilities)

        def theirs(cap: str) -> bool:
            declared = index.get(cap)
            return declared is not None and (len(declared) > 1 or agent_id not in declared)

        # Look-alikes are judged against other agents' names and this registration's own, not
        # this agent's previous ones. Each is counted without listing them (the index's bucket
        # of its shape, less the previous-only names of that shape, plus this registration's
        # names that nobody else declares), so a flood of look-alikes costs O(1) per name past
        # the first MAX_WARNINGS warnings, not O(bucket).
        own: dict[frozenset[str], int] = {}
        if previous is not None:
            for cap in previous.capabilities:
                if not theirs(cap):
                    form = names.shape(cap)
                    own[form] = own.get(form, 0) + 1
        fresh: dict[frozenset[str], list[str]] = {}
        for spec in specs:
            canonical = names.normalize(spec.name)
            if canonical in caps:
                raise ValueError(f"capability {spec.name!r} is declared twice (as {canonical!r})")
            if canonical != spec.name:
                if len(warnings) < MAX_WARNINGS:
                    warnings.append(f"capability {spec.name!r} registered as {canonical!r}")
                else:
                    unsaid += 1
            form = names.shape(canonical)
            alike = self.names.same_shape(canonical)
            mine = fresh.setdefault(form, [])
            count = len(alike) - own.get(form, 0) - theirs(canonical) + len(mine)
            room = max(0, MAX_WARNINGS - len(warnings))
            if count and room:
                found = itertools.chain(
                    mine, (k for k in alike if k != canonical and theirs(k)))
                for other in sorted(itertools.islice(found, min(count, room))):
                    warnings.append(
                        f"capability {canonical!r} looks like existing {other!r}; callers "
                        f"asking for one will not reach the other")
            unsaid += count - min(count, room)
            if not theirs(canonical):
                mine.append(canonical)
            caps[canonical] = Capability(canonical, spec, compile_schema(
                spec.params, max_bytes=self.max_schema_bytes), compile_returns(
                spec.returns, max_bytes=self.max_schema_bytes))
        if unsaid:
            warnings.append(f"... and {unsaid} more warnings")
        record = previous
        if record is None:
            record = AgentRecord(agent_id=agent_id, name=name, version=version,
                                 max_concurrency=max_concurrency, capabilities=caps)
            record.breaker.open_for = self.breaker_open_for
            record.warmup = self.warmup
            self.by_id[agent_id] = record
        else:
            # Same identity coming back (reconnect or restart): keep its counters and breaker,
            # unless it comes back as another version: a fixed deploy starts with a clean
            # breaker instead of waiting out the faults of the code it replaced.
            self._unindex(record)
            if version != record.version:
                record.breaker.reset()
            record.name, record.version = name, version
            record.max_concurrency, record.capabilities = max_concurrency, caps
        record.link, record.connected, record.draining = link, True, False
        record.instance, record.kind, record.node = instance, kind, node
        record.liveness = self.liveness_for(heartbeat_interval)
        record.probe_held, record.probe = False, None
        record.last_beat = record.registered_at = now
        if not heard:
            record.last_beat = now - record.liveness.suspect_after * record.liveness.interval \
                - 1e-6
        self._set(record, now)
        self.by_name[name] = record
        for cap in caps:
            declared = self.index.get(cap)
            if declared is None:
                declared = self.index[cap] = Declared(cap)
                self.names.add(cap)
            record.groups.append(declared.join(record))
        if _said(caps) != said_before:
            self.catalogue_version += 1
        self._changed(record)
        return Registration(record, list(caps), warnings)

    def _unindex(self, record: AgentRecord) -> None:
        for cap in record.capabilities:
            declared = self.index.get(cap)
            if declared is not None:
                declared.leave(record)
                if not declared:
                    del self.index[cap]
                    self.names.discard(cap)
        record.groups.clear()

    def heartbeat(self, record: AgentRecord, now: float, *, inflight: int, queue_depth: int,
                  load: float) -> Liveness | None:
        """Record a beat; returns the new state if it changed."""
        record.last_beat = now
        record.reported_inflight, record.queue_depth, record.load = inflight, queue_depth, load
        return self._set(record, now)

    def holder_full(self, record: AgentRecord, full: bool) -> None:
        """A peer-held agent's holder said it has no free slot (``full``), or reported room
        again: routing sees it full (or not) at once, and a change wakes the slot waiters
        (through the listeners), as a slot freed here would."""
        if record.held_full is not full:
            record.held_full = full
            record.reshelve()
            if not full:
                self._changed(record)

    def disconnected(self, record: AgentRecord, now: float) -> Liveness | None:
        record.connected = False
        record.link = None
        return self._set(record, now)

    def deregister(self, record: AgentRecord, now: float, *, by: str = "operator"
                   ) -> Liveness | None:
        """No new work for ``record``; ``by`` says who asked (``AgentRecord.drained_by``)."""
        record.draining, record.drained_by = True, by
        return self._set(record, now)

    def undrain(self, record: AgentRecord, now: float) -> Liveness | None:
        record.draining = False
        return self._set(record, now)

    def hold(self, record: AgentRecord, held: bool, now: float) -> Liveness | None:
        """Its probes say it does not work (``held``: suspected, beats or not) or that it
        does again (reach.core.probes)."""
        record.probe_held = held
        return self._set(record, now)

    def liveness_for(self, interval: float | None) -> LivenessPolicy:
        """The policy of an agent that asks for its own heartbeat ``interval`` (None: the
        coordinator's), bounded as ``liveness.bounded_interval`` says."""
        every = bounded_interval(interval, self.policy.interval)
        if every == self.policy.interval:
            return self.policy
        return LivenessPolicy(every, self.policy.suspect_after, self.policy.offline_after)

    def sweep(self, now: float) -> list[tuple[AgentRecord, Liveness]]:
        """Re-judge the agents whose next liveness threshold has passed; returns those whose
        state changed."""
        changed = []
        horizon = now + _slack(now)
        last = math.floor(horizon / self._slot_width)
        wheel, first = self._wheel, self._cursor
        if first is not None and last < first:
            # The clock went back: re-file every entry by its own time (rare, O(agents)).
            entries = [e for slot_entries in wheel.values() for e in slot_entries]
            wheel.clear()
            self._cursor = first = None
            for at, record in entries:
                if record.due == at:
                    self._put(at, record)
        if first is None or last - first > len(wheel):  # a long gap: only the slots in use
            slots: Iterable[int] = sorted(k for k in wheel if k <= last)
        else:
            slots = range(first, last + 1)
        self._cursor = last  # (its later part may still be ahead of the horizon)
        for slot in slots:
            if slot not in wheel:
                continue
            entries = wheel.pop(slot)
            later = []
            for entry in entries:
                at, record = entry
                if record.due != at:
                    continue  # rescheduled earlier, elsewhere
                if at > horizon:
                    later.append(entry)
                    continue
                if record.state is Liveness.ONLINE:
                    # The common case: it beat since. Online with its new deadline ahead
                    # is what ``judge`` would say, without asking it.
                    next_at = record.last_beat + record.liveness.suspect_span
                    if next_at > horizon:
                        record.due = next_at
                        self._put(next_at, record)
                        continue
                record.due = None
                if self._set(record, now) is not None:  # (which schedules the next look)
                    changed.append((record, record.state))
            if later:
                wheel.setdefault(slot, []).extend(later)
        return changed

    def _set(self, record: AgentRecord, now: float) -> Liveness | None:
        new = judge(record.liveness, last_beat=record.last_beat, now=now,
                    connected=record.connected, draining=record.draining,
                    held=record.probe_held)
        if new is record.state:
            if record.due is None:
                self._schedule(record, now)
            return None
        record.state = new
        record.reshelve()
        self._schedule(record, now)
        self._changed(record)
        return new

    def listen(self, fn: Callable[[AgentRecord], None]) -> None:
        """Call ``fn(record)`` after every registration and every liveness change: the
        gateway wakes tasks waiting for an agent, the coordinator publishes events. Nothing
        has to remember to tell them."""
        self._listeners.append(fn)

    def _changed(self, record: AgentRecord) -> None:
        for fn in self._listeners:
            fn(record)

    def _schedule(self, record: AgentRecord, now: float) -> None:
        """Make sure the agent is looked at again once its next threshold passes."""
        at = deadline(record.liveness, record.state, record.last_beat)
        if at is None:
            return
        # Past the sweep's horizon: an entry whose threshold rounding keeps from passing yet
        # is looked at again by the next sweep, not again and again by this one.
        at = max(at, math.nextafter(now + _slack(now), math.inf))
        if record.due is not None and record.due <= at:
            return  # an earlier look will reschedule it
        record.due = at
        self._put(at, record)

    def _put(self, at: float, record: AgentRecord) -> None:
        slot = math.floor(at / self._slot_width)
        if self._cursor is not None and slot < self._cursor:
            slot = self._cursor  # behind the wheel (the clock went back): the next sweep
        entries = self._wheel.get(slot)
        if entries is None:
            self._wheel[slot] = [(at, record)]
        else:
            entries.append((at, record))

    # ------------------------------------------------------------ queries

    def declaring(self, capability: str) -> Declared:
        found = self.index.get(capability)
        return Declared(capability) if found is None else found

    def capability_names(self) -> list[str]:
        """Every declared capability, sorted (``names`` indexes them for look-ups)."""
        return self.names.sorted()

    def intents(self) -> dict[str, list[str]]:
        """capability → the example intents its agents declared."""
        out: dict[str, list[str]] = {}
        for cap, agents in self.index.items():
            phrases: list[str] = []
            for record in agents.values():
                spec = record.capabilities[cap].spec
                phrases.extend(p for p in spec.intents if p not in phrases)
                if spec.description and spec.description not in phrases:
                    phrases.append(spec.description)
            out[cap] = phrases
        return out

    def catalogue(self) -> list[intent.Entry]:
        """Every capability as intent routing sees it: the intents, tags and descriptions of
        all the agents declaring it, merged (each once, in the order first declared). Phrases
        callers taught (``learned``) route by their own words only: merged in, they made other
        requests ambiguous or wrong and scarcely helped a paraphrase (docs/benchmarks.md)."""
        out = []
        for cap, agents in self.index.items():
            phrases: dict[str, None] = {}
            tags: dict[str, None] = {}
            texts: dict[str, None] = {}
            for record in agents.values():
                spec = record.capabilities[cap].spec
                phrases.update(dict.fromkeys(spec.intents))
                tags.update(dict.fromkeys(spec.tags))
                if spec.description:
                    texts[spec.description] = None
            out.append(intent.Entry(cap, tuple(phrases), "\n".join(texts), tuple(tags)))
        return out

    @property
    def intent_key(self) -> int:
        """What the intent index depends on: the catalogue's version (a learned phrase
        changes no index)."""
        return self.catalogue_version

    @property
    def intent_cache(self) -> intent.IndexCache:
        return self._intents

    def intent_index(self) -> intent.Index:
        """The intent matcher's index of ``catalogue()``, built again after ``intent_key``
        moved, when a request needs it (a registration flood builds nothing). From
        ``intent_off_loop_at`` capabilities ``intent_rebuild`` builds it off the loop, and
        the request is routed with the index before the change meanwhile."""
        cache, key, rebuild = self._intents, self.intent_key, self.intent_rebuild
        off_loop = rebuild is not None and cache.key != key and cache.built and \
            len(self.index) >= self.intent_off_loop_at
        if off_loop:
            rebuild()  # type: ignore[misc]
        return cache.get(key, self.catalogue, stale_ok=off_loop)

    def resolve_intent(self, text: str) -> intent.Decision:
        """Route free text over this registry's catalogue and learned phrases."""
        learned = self.learned
        return intent.resolve(text, self.intent_index(), learned.route if len(learned) else None)


def _said(caps: dict[str, Capability]) -> dict[str, tuple[object, ...]]:
    """What each capability says about itself, as intent routing reads it."""
    return {name: (tuple(c.spec.intents), tuple(c.spec.tags), c.spec.description)
            for name, c in caps.items()}


def _slack(now: float) -> float:
    """How far ahead of ``now`` a sweep looks: deadlines are sums and ``judge`` divides, so
    the two can disagree by a few ulps at a threshold; this covers that many times over."""
    return 1e-9 + abs(now) * 1e-12
