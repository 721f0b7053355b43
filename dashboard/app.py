"""`reach-dash`: the Textual app that watches and repairs a coordinator through its admin feed.

Data flows one way. The feed worker reads frames, merges them into the :class:`Model` and hands
the model to each tab (actions down). Tabs post messages when the operator asks for something
(messages up); the app runs the command in a worker and reports the outcome in a
notification and on the status line.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any, ClassVar

from pydantic import ValidationError
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import Footer, Header, Input, TabbedContent, TabPane

from reach.core.backoff import Backoff
from reach.wire import admin

from .feed import (
    AdminRefused,
    CommandFailed,
    Connector,
    FeedConnection,
    FeedError,
    connect,
)
from .model import JSON, Change, Model, PushLetter
from .pushes import Replays, back_note, question, sent_note
from .rows import plural, short
from .screens import AskScreen, ConfirmScreen, GotoScreen, HelpScreen
from .svg import renderable
from .views.agents import AgentsView, AgentTableView, BreakersView
from .views.base import TableView
from .views.capabilities import CapabilitiesView
from .views.filter_box import FilterBox
from .views.letters import DeadLettersView
from .views.phrases import PhrasesView
from .views.pushes import NO_DOOR, PushesView
from .views.status import Link, StatusLine
from .views.traces import TracesView

TABS: dict[str, tuple[str, type[TableView]]] = {
    "agents": ("Agents", AgentsView), "traces": ("Traces", TracesView),
    "breakers": ("Breakers", BreakersView), "dead-letters": ("Dead letters", DeadLettersView),
    "capabilities": ("Capabilities", CapabilitiesView), "phrases": ("Phrases", PhrasesView),
    "pushes": ("Pushes", PushesView),
}
"""Tab id → title and view; keys 1-7 in this order."""
REPLAY_WAIT_S = 30.0
"""How long one replay command waits for the replayed task's outcome."""
BULK_REPLAY_WAIT_S = 10.0
REFUSED = "admin token refused"
"""How the status line begins when the coordinator refuses the token."""


def replay_outcome(task_ids: list[str], results: list[Any]) -> tuple[str, bool]:
    """One line for replays by id, e.g. ``replayed 3 letters: 2 succeeded, 1 dead``, and
    whether it is bad news (anything but success)."""
    if len(results) == 1 and isinstance(results[0], BaseException):
        error = results[0]
        return f"replay of letter {short(task_ids[0])} failed: {error or 'timed out'}", True
    states: Counter[str] = Counter()
    for result in results:
        if isinstance(result, CommandFailed):
            states[f"refused ({result.code})"] += 1
        elif isinstance(result, BaseException):
            states[f"failed ({result or 'timed out'})"] += 1
        else:
            states[str(result.get("state", "?")) if isinstance(result, dict) else "?"] += 1
    outcome = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    what = f"letter {short(task_ids[0])}" if len(task_ids) == 1 else plural(len(task_ids),
                                                                             "letter")
    return f"replayed {what}: {outcome}", set(states) != {"succeeded"}


class ReachDashboard(App[None]):
    """The dashboard for one coordinator: ``ReachDashboard(url=..., token=...).run()``.

    ``connector`` opens the feed (tests pass a scripted one); ``reconnect_base`` and
    ``reconnect_cap`` bound the reconnect backoff in seconds.
    """

    CSS_PATH = "app.tcss"
    TITLE = "reach-dash"
    BINDINGS: ClassVar[list[BindingType]] = [
        # One footer entry for the tab keys: the tab bar names the tabs.
        Binding("1", "show_tab('agents')", "Tabs", key_display="1-7"),
        Binding("2", "show_tab('traces')", "Traces", show=False),
        Binding("3", "show_tab('breakers')", "Breakers", show=False),
        Binding("4", "show_tab('dead-letters')", "Dead letters", show=False),
        Binding("5", "show_tab('capabilities')", "Capabilities", show=False),
        Binding("6", "show_tab('phrases')", "Phrases", show=False),
        Binding("7", "show_tab('pushes')", "Pushes", show=False),
        Binding("g", "goto", "Go to id"),
        Binding("slash", "filter", "Filter"),
        Binding("question_mark", "help", "Keys"),
        Binding("q", "quit", "Quit"),
    ]

    link: reactive[Link] = reactive(Link("connecting"))
    """The feed connection's state, shown on the status line."""

    def __init__(self, url: str, token: str, *, connector: Connector = connect,
                 reconnect_base: float = 0.5, reconnect_cap: float = 10.0) -> None:
        super().__init__()
        self.url = url
        self.token = token
        self.connector = connector
        self.reconnect_base = reconnect_base
        self.reconnect_cap = reconnect_cap
        self.model = Model()
        self.feed: FeedConnection | None = None
        self.sub_title = url
        self.replays = Replays()  # push notifications sent again, until seen back or let go
        self._reading_pushes = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield StatusLine(self.url, id="status")
        with TabbedContent(id="tabs"):
            for tab, (title, view) in TABS.items():
                with TabPane(title, id=tab):
                    yield view(id=f"{tab}-view")
        yield FilterBox(id="filter", placeholder="filter: words or field:value — enter keeps, "
                                                 "esc clears")
        yield Footer()

    def export_screenshot(self, *, title: str | None = None, simplify: bool = False) -> str:
        """The screen as an SVG that draws the same grid in every renderer, librsvg too
        (:func:`dashboard.svg.renderable`); the snapshot tests and screenshots use it."""
        return renderable(super().export_screenshot(title=title, simplify=simplify))

    def on_mount(self) -> None:
        self.follow_feed()
        self.current_view.table.focus()

    # ------------------------------------------------------------ views

    @property
    def current_view(self) -> TableView:
        active = self.query_one(TabbedContent).active or "agents"
        return self.query_one(f"#{active}-view", TableView)

    def watch_link(self, link: Link) -> None:
        for status in self.query(StatusLine):
            status.link = link

    def apply(self, frame: admin.Snapshot | admin.Delta) -> Change:
        """Merge one feed frame and bring the tabs that it touched up to date."""
        change = self.model.apply(frame)
        touched = {"agents": change.agents, "breakers": change.agents,
                   "traces": change.traces, "dead-letters": change.dead_letters,
                   "capabilities": change.agents or change.metrics,
                   "pushes": change.dead_letters}  # its ages move with the feed's clock
        # query, not query_one: a worker may finish while the app is shutting down.
        for view in self.query(TableView):
            if touched.get((view.id or "").removesuffix("-view")):
                view.show(self.model)
        for status in self.query(StatusLine):
            status.show(self.model)
        self.poll_pushes(fresh=change.snapshot)
        return change

    # ------------------------------------------------------------ the feed

    @work(exclusive=True, group="feed")
    async def follow_feed(self) -> None:
        """Read the feed for as long as the app runs: reconnect with backoff when it goes
        away (a new snapshot replaces the state), stop for good when the token is refused."""
        # One dashboard has nobody to fall into step with: doubling, capped, no jitter.
        backoff = Backoff(self.reconnect_base, 2.0, self.reconnect_cap, jitter=0.0)
        failures = 0
        while True:
            try:
                feed = await self.connector(self.url, self.token)
                try:
                    while True:
                        frame = await feed.receive()
                        if self.feed is None:
                            self.feed = feed
                            failures = 0
                            self.link = Link("connected", "connected")
                        self.apply(frame)
                finally:
                    self.feed = None
                    await feed.close()
            except AdminRefused as exc:
                # The coordinator's own words already begin so; said twice, they read as a
                # stutter ("admin token refused: admin token refused; ...").
                said = str(exc)
                text = said if said.startswith(REFUSED) else f"{REFUSED}: {said}"
                self.link = Link("refused", text)
                self.notify(text, severity="error", timeout=30)
                return
            except FeedError as exc:
                delay = backoff.nominal(failures)
                failures += 1
                self.link = Link("disconnected",
                                 f"disconnected — reconnecting in {delay:.1f}s ({exc})")
                await asyncio.sleep(delay)
                self.link = Link("disconnected", f"disconnected — reconnecting ({exc})")

    async def command(self, action: str, args: JSON, *, timeout: float = 10.0) -> Any:
        """Send one command on the open feed; :class:`FeedError` when there is none."""
        feed = self.feed
        if feed is None:
            raise FeedError("not connected")
        async with asyncio.timeout(timeout):
            return await feed.command(action, args)

    def report(self, note: str, error: bool = False) -> None:
        """Show a command's outcome as a notification and on the status line."""
        for status in self.query(StatusLine):
            status.note = note
        self.notify(note, severity="error" if error else "information")

    # ------------------------------------------------------------ traces

    @on(TracesView.TraceSelected)
    def trace_selected(self, message: TracesView.TraceSelected) -> None:
        self.fetch_timeline(message.trace_id)

    @work(exclusive=True, group="trace")
    async def fetch_timeline(self, trace_id: str) -> None:
        """Fetch a trace's timeline; a newer selection cancels this one."""
        view = self.query_one(TracesView)
        try:
            result = await self.command("trace", {"trace_id": trace_id})
        except (FeedError, TimeoutError) as exc:
            view.show_timeline(None, f"trace {short(trace_id)}: {exc or 'timed out'}")
            return
        try:
            timeline = admin.Timeline.model_validate(result)
        except ValidationError as exc:
            view.show_timeline(None, f"trace {short(trace_id)}: not a timeline "
                                     f"({exc.error_count()} errors)")
            return
        view.show_timeline(timeline)

    # ------------------------------------------------------------ go to a task or trace

    def action_goto(self) -> None:
        """Ask for a task or trace id (or a head of one) and show what it names."""
        def chosen(ident: str | None) -> None:
            if ident and ident.strip():
                self.goto(ident.strip())

        self.push_screen(GotoScreen(), chosen)

    @work(exclusive=True, group="goto")
    async def goto(self, ident: str) -> None:
        """The coordinator finds the id among every task its store has (``find``); a dead
        letter opens on its tab, anything else as its trace's waterfall."""
        try:
            found = await self.command("find", {"id": ident})
            summary = admin.TraceSummary.model_validate(found["summary"])
            timeline = admin.Timeline.model_validate(found["timeline"])
        except CommandFailed as exc:
            self.report(f"go to {ident}: {exc.message}", error=True)
            return
        except (FeedError, TimeoutError) as exc:
            self.report(f"go to {ident} failed: {exc or 'timed out'}", error=True)
            return
        except (ValidationError, KeyError, TypeError):
            self.report(f"go to {ident}: not a find result", error=True)
            return
        task_id = found.get("task_id")
        if found.get("dead_letter") and task_id in self.model.dead_letters:
            self.action_show_tab("dead-letters")
            letters = self.query_one(DeadLettersView)
            letters.filter_text = ""
            letters.table.select(task_id)
            self.report(f"dead letter {short(task_id)}")
            return
        self.model.add_found(summary)
        view = self.query_one(TracesView)
        self.action_show_tab("traces")
        view.filter_text = ""
        view.show(self.model)
        view.table.select(summary.trace_id)
        view.show_timeline(timeline)
        what = f"task {short(task_id)} in trace" if task_id else "trace"
        self.report(f"{what} {short(summary.trace_id)}: {summary.root or '?'}, "
                    f"{summary.state}")

    # ------------------------------------------------------------ agents and breakers

    @on(AgentTableView.AgentCommand)
    def agent_command(self, message: AgentTableView.AgentCommand) -> None:
        self.run_agent_command(message.action, message.agent, message.args)

    # Command workers are not exclusive: commands run concurrently on the feed, and
    # cancelling one would lose its outcome, not stop the coordinator's work.
    @work(group="commands")
    async def run_agent_command(self, action: str, agent: str,
                                args: dict[str, Any] | None = None) -> None:
        done = {"drain": "drained {}", "undrain": "undrained {}",
                "reset_breaker": "reset the breaker of {}", "set_weight": "set the weight of {}",
                "pin": "pinned {}", "unpin": "unpinned {}"}
        try:
            view = await self.command(action, {"agent": agent, **(args or {})})
        except (FeedError, TimeoutError) as exc:
            self.report(f"{action} {agent} failed: {exc or 'timed out'}", error=True)
            return
        try:
            agent_view = admin.AgentView.model_validate(view)
        except ValidationError:
            pass  # not a view to show early: the next delta brings the agent's new state
        else:
            # At the feed's own time, so the clock stays and no age moves.
            self.apply(admin.Delta(at=self.model.at, agents=[agent_view]))
        self.report(done.get(action, action + " {}").format(agent))

    # ------------------------------------------------------------ cancelling

    @on(TracesView.Cancel)
    def cancel_requested(self, message: TracesView.Cancel) -> None:
        trace_id, ids = message.trace_id, message.task_ids

        def answered(yes: bool | None) -> None:
            if yes:
                self.cancel_tasks(trace_id, ids)

        self.push_screen(ConfirmScreen(
            f"Cancel {plural(len(ids), 'running task')} of trace {short(trace_id)}? Each ends "
            f"cancelled and its agent is told to stop."), answered)

    @work(group="commands")
    async def cancel_tasks(self, trace_id: str, task_ids: list[str]) -> None:
        ended = 0
        for task_id in task_ids:
            try:
                view = await self.command("cancel", {"task_id": task_id,
                                                     "reason": "from the dashboard"})
            except (FeedError, TimeoutError) as exc:
                self.report(f"cancel {short(task_id)} failed: {exc or 'timed out'}", error=True)
                return
            ended += isinstance(view, dict) and view.get("state") == "cancelled"
        self.report(f"cancelled {plural(ended, 'task')} of trace {short(trace_id)}")
        self.fetch_timeline(trace_id)

    # ------------------------------------------------------------ dead letters

    @on(DeadLettersView.Replay)
    def replay_requested(self, message: DeadLettersView.Replay) -> None:
        ids, everything = message.task_ids, message.everything
        if not message.confirm:
            self.replay(ids, everything=everything)
            return
        which = "every dead letter" if everything else "the letters the filter shows"
        question = f"Replay {plural(len(ids), 'dead letter')} ({which})?"

        def answered(yes: bool | None) -> None:
            if yes:
                self.replay(ids, everything=everything)

        self.push_screen(ConfirmScreen(question), answered)

    @on(DeadLettersView.Settle)
    def settle_requested(self, message: DeadLettersView.Settle) -> None:
        task_id, how = message.task_id, message.how
        letter = self.model.dead_letters.get(task_id)

        def answered(text: str | None) -> None:
            self.settle(task_id, how, text)

        if how == "discard":
            ask = AskScreen(f"Discard letter {short(task_id)}: why can it never succeed?",
                            "the reason (kept with the letter and audited)",
                            "enter discards · esc cancels", input_id="settle")
            self.push_screen(ask, answered)
            return
        params = letter.envelope.get("params", {}) if letter is not None else {}
        ask = AskScreen(f"Replay letter {short(task_id)} with these params",
                        'a JSON object; " timeout=30" after it sets a new timeout (s)',
                        "enter replays · esc cancels · checked against the schema",
                        input_id="settle", value=json.dumps(params))
        self.push_screen(ask, answered)

    @work(group="commands")
    async def settle(self, task_id: str, how: str, text: str | None) -> None:
        """Discard a letter with the reason given, or replay it with the params (and
        ``timeout=S``) given; nothing when the question was cancelled."""
        if text is None or not text.strip():
            return
        args: dict[str, Any] = {"task_id": task_id}
        if how == "discard":
            args["reason"] = text.strip()
        else:
            body, _, timeout = text.strip().partition(" timeout=")
            try:
                args["params"] = json.loads(body)
                if timeout:
                    args["timeout"] = float(timeout)
            except ValueError as exc:
                self.report(f"replay of {short(task_id)} not sent: {exc}", error=True)
                return
            args["wait"] = REPLAY_WAIT_S
        try:
            result = await self.command(how, args, timeout=REPLAY_WAIT_S + 5)
        except (FeedError, TimeoutError) as exc:
            self.report(f"{how} of letter {short(task_id)} failed: {exc or 'timed out'}",
                        error=True)
            return
        if how == "discard":
            self.report(f"discarded letter {short(task_id)}: {args['reason']}")
        else:
            self.report(*replay_outcome([task_id], [result]))

    @work(group="commands")
    async def replay(self, task_ids: list[str], *, everything: bool = False) -> None:
        """Replay letters. With no filter one ``replay_filter`` command replays them all and
        the outcomes arrive as deltas; otherwise each shown letter is replayed by id, so
        exactly what the table shows is replayed, and the outcomes are counted here."""
        try:
            if everything:
                result = await self.command("replay_filter", {})
                started = len(result.get("replayed") or []) if isinstance(result, dict) else 0
                self.report(f"replaying {plural(started, 'dead letter')}")
                return
            wait = REPLAY_WAIT_S if len(task_ids) == 1 else BULK_REPLAY_WAIT_S
            results = await asyncio.gather(
                *(self.command("replay", {"task_id": t, "wait": wait}, timeout=wait + 5)
                  for t in task_ids),
                return_exceptions=True)
        except (FeedError, TimeoutError) as exc:
            self.report(f"replay failed: {exc or 'timed out'}", error=True)
            return
        self.report(*replay_outcome(task_ids, results))

    # ------------------------------------------------------------ push notifications

    def poll_pushes(self, *, fresh: bool = False) -> None:
        """Read the push notifications not delivered, on the feed's cadence (each frame), while
        their tab is shown or a replay is followed; one read at a time. ``fresh``: a new
        snapshot, maybe of a coordinator restarted with the A2A door, so ask again."""
        views = list(self.query(PushesView))
        if not views:
            return
        view = views[0]
        if fresh:
            view.no_door = False
        shown = self.query_one(TabbedContent).active == "pushes"
        if (self.feed is None or view.no_door or self._reading_pushes
                or not (shown or self.replays)):
            return
        self._reading_pushes = True
        self.read_pushes(view)

    @work(group="pushes")
    async def read_pushes(self, view: PushesView) -> None:
        """One read of ``push_dead_letters``: a failure is said in the tab's caption, quietly
        (it is asked again each second); a coordinator without the A2A door, once."""
        generation = self.replays.generation
        try:
            result = await self.command("push_dead_letters", {})
            letters = [PushLetter.model_validate(d) for d in result["push_dead_letters"]]
        except CommandFailed as exc:
            if exc.code == "invalid_params":  # the one refusal of this command: no door
                return view.failed(NO_DOOR, no_door=True)
            return view.failed(f"push notifications: {exc.message}")
        except (FeedError, TimeoutError) as exc:
            return view.failed(f"push notifications not read: {exc or 'timed out'}")
        except (ValidationError, KeyError, TypeError):
            return view.failed("push notifications: not a push_dead_letters reply")
        finally:
            self._reading_pushes = False
        back = self.replays.read(generation, letters, self.model.at)
        if back is None:
            return  # begun before a replay was answered: the next read tells
        self.model.set_pushes(letters)
        view.read(self.model)
        if back:
            self.report(back_note(back), error=True)

    @on(PushesView.Replay)
    def push_replay_requested(self, message: PushesView.Replay) -> None:
        ids, everything = message.task_ids, message.everything

        def answered(yes: bool | None) -> None:
            if yes:
                self.replay_pushes(ids, everything=everything)

        self.push_screen(ConfirmScreen(question(ids, message.count, everything)), answered)

    @work(group="commands")
    async def replay_pushes(self, task_ids: list[str], *, everything: bool = False) -> None:
        """Send notifications again: with no filter one ``replay_pushes`` command sends them
        all, else one per task shown. Those sent leave the list at once (the coordinator took
        them off it) and are followed: one that fails again is reported when it is back."""
        self.replays.asked()
        asks = [{}] if everything else [{"task_id": t} for t in task_ids]
        results = await asyncio.gather(*(self.command("replay_pushes", args) for args in asks),
                                       return_exceptions=True)
        replayed: list[str] = []
        refused: list[str] = []
        for result in results:
            if isinstance(result, CommandFailed):
                refused.append(result.message)
            elif isinstance(result, BaseException):
                refused.append(str(result) or "timed out")
            elif isinstance(result, dict):
                replayed.extend(str(t) for t in result.get("replayed") or [])
        sent = set(replayed)
        self.replays.sent([d for d in self.model.pushes_oldest_first() if d.task_id in sent],
                          self.model.at)
        self.model.drop_pushes(sent)
        for view in self.query(PushesView):
            view.show(self.model)
        self.report(*sent_note(replayed, refused))

    # ------------------------------------------------------------ learned phrases

    @on(PhrasesView.Read)
    @work(exclusive=True, group="phrases")
    async def read_phrases(self) -> None:
        """Read intent routing's learned phrases (the feed does not carry them)."""
        view = self.query_one(PhrasesView)
        try:
            result = await self.command("phrases", {})
            phrases = [admin.Phrase.model_validate(p) for p in result["phrases"]]
        except CommandFailed as exc:
            return view.failed(f"learned phrases: {exc.message}")
        except (FeedError, TimeoutError) as exc:
            return view.failed(f"learned phrases not read: {exc or 'timed out'}")
        except (ValidationError, KeyError, TypeError):
            return view.failed("learned phrases: not a phrases reply")
        self.model.set_phrases(phrases)
        view.show(self.model)

    @on(PhrasesView.Forget)
    def forget_asked(self, message: PhrasesView.Forget) -> None:
        text, capability = message.text, message.capability

        def answered(yes: bool | None) -> None:
            if yes:
                self.forget_phrase(text, capability)

        self.push_screen(ConfirmScreen(f"Forget “{text}” → {capability}? The request is "
                                       "routed by evidence again."), answered)

    @work(group="commands")
    async def forget_phrase(self, text: str, capability: str) -> None:
        try:
            result = await self.command("forget_phrase", {"text": text})
        except (FeedError, TimeoutError) as exc:
            self.report(f"forget “{text}” failed: {exc or 'timed out'}", error=True)
            return
        if isinstance(result, dict) and result.get("forgotten"):
            self.report(f"forgot “{text}” → {capability}")
        else:
            self.report(f"nothing was learned for “{text}” (already forgotten?)")
        self.read_phrases()

    # ------------------------------------------------------------ keys

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Tab, filter and help keys wait while a question or the help is open over the
        tables (the app's keys would otherwise reach through the modal screen)."""
        if (action in ("show_tab", "filter", "help", "goto")
                and isinstance(self.screen, ModalScreen)):
            return False
        return True

    def action_show_tab(self, tab: str) -> None:
        """Switch to a tab and put the keyboard on its table."""
        self.query_one(TabbedContent).active = tab
        self.close_filter()
        self.current_view.table.focus()

    @on(TabbedContent.TabActivated)
    def tab_activated(self) -> None:
        view = self.current_view
        view.table.focus()
        if isinstance(view, PhrasesView):
            self.read_phrases()
        if isinstance(view, PushesView):
            self.poll_pushes()

    def action_filter(self) -> None:
        """Open the filter box for the current tab, holding that tab's filter."""
        box = self.query_one(FilterBox)
        box.value = self.current_view.filter_text
        box.display = True
        box.focus()

    def close_filter(self) -> None:
        box = self.query_one(FilterBox)
        if box.display:
            box.display = False
            self.current_view.table.focus()

    @on(Input.Changed, "#filter")
    def filter_changed(self, event: Input.Changed) -> None:
        self.current_view.filter_text = event.value

    @on(Input.Submitted, "#filter")
    def filter_kept(self) -> None:
        self.close_filter()

    @on(FilterBox.Cleared)
    def filter_cleared(self) -> None:
        self.current_view.filter_text = ""
        self.close_filter()

    def action_help(self) -> None:
        """Show the keys."""
        self.push_screen(HelpScreen())
