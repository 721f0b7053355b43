"""The Pushes tab (issue 28): key 7 lists the A2A push notifications the coordinator did not
deliver, read with the ``push_dead_letters`` command on the feed's cadence (the feed has no
delta for them) while the tab is shown; `r` and `R` send them again after a yes; one sent
again that fails again is reported when it is back; a coordinator without the A2A door is
one quiet caption, asked once. On a scripted feed; test_dash_pushes_live.py runs a real one.
"""

from __future__ import annotations

from typing import Any

from dashboard import ReachDashboard, sample
from dashboard.feed import CommandFailed, FeedConnection
from dashboard.screens import ConfirmScreen
from dashboard.views.pushes import PushesView
from dashboard.views.status import StatusLine
from reach.testing import wait_until

SIZE = (120, 36)
FIRST, SECOND = (d["task_id"] for d in sample.PUSHES)


class Sender:
    """A coordinator's undelivered push notifications as the scripted feed answers for them:
    a replay takes them off the list; ``fail_again`` puts them back, with a new reason."""

    def __init__(self) -> None:
        self.dead = [dict(d) for d in sample.PUSHES]
        self.fail_again = False
        self.door = True

    def reply(self, action: str, args: dict[str, Any]) -> Any:
        if action in ("push_dead_letters", "replay_pushes") and not self.door:
            raise CommandFailed("invalid_params", "this coordinator serves no A2A door, so it "
                                                  "sends no push notifications")
        if action == "push_dead_letters":
            return {"push_dead_letters": [dict(d) for d in self.dead]}
        if action == "replay_pushes":
            chosen = [d for d in self.dead if args.get("task_id") in (None, d["task_id"])]
            self.dead = [d for d in self.dead if d not in chosen]
            if self.fail_again:
                self.dead += [{**d, "reason": "HTTP 410", "dead_at": sample.AT + 5}
                              for d in chosen]
            return {"replayed": [d["task_id"] for d in chosen]}
        return sample.sample_reply(action, args)


def app_on(*feeds: sample.ScriptedFeed) -> ReachDashboard:
    return ReachDashboard(url="ws://test", token="t", connector=sample.connector(*feeds))


def shown(app: ReachDashboard) -> list[tuple[str, ...]]:
    table = app.query_one(PushesView).table
    return [tuple(cell.plain for cell in table.get_row(key)) for key in table.keys]


def caption(app: ReachDashboard) -> str:
    return str(app.query_one(PushesView).query_one("#caption").render())


def sent(feed: sample.ScriptedFeed, action: str) -> list[dict[str, Any]]:
    return [args for name, args in feed.commands if name == action]


def tick(feed: sample.ScriptedFeed, n: int) -> None:
    """The coordinator's once-a-second delta, ``n`` seconds on."""
    feed.push({"v": 1, "type": "delta", "at": sample.AT + n})


async def test_key_7_lists_them_oldest_first_and_reads_on_the_feeds_cadence() -> None:
    sender = Sender()
    feed = sample.ScriptedFeed(reply=sender.reply)
    app = app_on(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        tick(feed, 1)
        await wait_until(lambda: app.model.frames == 2)
        assert sent(feed, "push_dead_letters") == []  # not read while the tab is hidden
        await pilot.press("7")
        await wait_until(lambda: len(shown(app)) == 2)
        assert shown(app) == [
            ("7777777777", "a2a", "orders.write", "hooks.acme.example", "HTTP 404",
             "25m01s ago"),
            ("8888888888", "a2a", "report.write", "crm.example.com:8443",
             "ClientConnectorError('Cannot connect to host crm.…", "4m01s ago")]
        assert caption(app) == "2 undelivered push notifications"
        detail = str(app.query_one("#push-detail").render())
        assert "https://hooks.acme.example/a2a/done" in detail and "caller planner" in detail
        sender.dead.pop(0)  # delivered by someone's replay from a shell: the next read tells
        tick(feed, 2)
        await wait_until(lambda: [r[0] for r in shown(app)] == ["8888888888"])
        await pilot.press("slash", *"error:connect", "enter")
        assert caption(app) == "1 of 1 undelivered push notification match “error:connect”"


async def test_r_sends_the_selected_tasks_again_after_a_yes_and_the_row_goes() -> None:
    sender = Sender()
    feed = sample.ScriptedFeed(reply=sender.reply)
    app = app_on(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("7")
        await wait_until(lambda: len(shown(app)) == 2)
        await pilot.press("down", "r")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question.startswith("Send 1 push notification of task 8888888888")
        await pilot.press("n")
        await pilot.pause()
        assert sent(feed, "replay_pushes") == []
        await pilot.press("r", "y")
        await wait_until(lambda: [r[0] for r in shown(app)] == ["7777777777"])
        assert sent(feed, "replay_pushes") == [{"task_id": SECOND}]
        status = app.query_one(StatusLine)
        assert status.note == ("sending 1 push notification of task 8888888888 again; one "
                               "that fails again comes back to the list")
        tick(feed, 1)  # and the next read agrees: delivered, it does not come back
        await wait_until(lambda: len(sent(feed, "push_dead_letters")) >= 2)
        await pilot.pause()
        assert [r[0] for r in shown(app)] == ["7777777777"]
        assert status.note.startswith("sending 1 push notification")


async def test_big_r_sends_every_one_or_those_the_filter_shows() -> None:
    sender = Sender()
    feed = sample.ScriptedFeed(reply=sender.reply)
    app = app_on(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("7")
        await wait_until(lambda: len(shown(app)) == 2)
        await pilot.press("slash", *"cap:orders", "enter", "R")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question.startswith("Send 1 push notification of task 7777777777")
        await pilot.press("y")
        await wait_until(lambda: sent(feed, "replay_pushes") == [{"task_id": FIRST}])
        await pilot.press("slash", "ctrl+u", "enter", "R")  # no filter: one command
        assert isinstance(app.screen, ConfirmScreen)
        assert "(every one, 1 task)" in app.screen.question
        await pilot.press("y")
        await wait_until(lambda: len(sent(feed, "replay_pushes")) == 2)
        assert sent(feed, "replay_pushes")[1] == {}
        await wait_until(lambda: shown(app) == [])
        assert caption(app) == "no undelivered push notifications"
        await pilot.press("R")  # nothing left: a warning, no question
        assert not isinstance(app.screen, ConfirmScreen)


async def test_one_that_fails_again_is_reported_when_it_is_back() -> None:
    sender = Sender()
    sender.fail_again = True
    feed = sample.ScriptedFeed(reply=sender.reply)
    app = app_on(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("7")
        await wait_until(lambda: len(shown(app)) == 2)
        await pilot.press("r", "y")
        await wait_until(lambda: sent(feed, "replay_pushes") == [{"task_id": FIRST}])
        await pilot.press("1")  # followed on another tab too, until it is back
        tick(feed, 6)
        status = app.query_one(StatusLine)
        await wait_until(lambda: "not delivered again" in status.note)
        assert status.note == "push of task 7777777777 not delivered again: HTTP 410"
        reads = len(sent(feed, "push_dead_letters"))
        tick(feed, 7)  # back and reported: no longer followed, so no more reads off the tab
        await wait_until(lambda: app.model.frames == 3)
        await pilot.pause()
        assert len(sent(feed, "push_dead_letters")) == reads


async def test_no_a2a_door_is_one_quiet_caption_asked_once_per_connection() -> None:
    sender = Sender()
    sender.door = False
    first, second = (sample.ScriptedFeed(reply=sender.reply) for _ in range(2))
    app = app_on(first, second)
    app.reconnect_base = 0.01
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("7")
        await wait_until(lambda: "no A2A door" in caption(app))
        assert caption(app) == "no A2A door: this coordinator sends no push notifications"
        for n in range(1, 4):
            tick(first, n)
        await wait_until(lambda: app.model.frames == 4)
        await pilot.pause()
        assert len(sent(first, "push_dead_letters")) == 1  # not asked again each second
        assert app.query_one(StatusLine).note == ""  # no error on the status line
        await pilot.press("r", "R")  # nothing to send: no question
        assert not isinstance(app.screen, ConfirmScreen)
        sender.door = True  # restarted with the door: a new snapshot asks again
        first.drop()
        await wait_until(lambda: len(shown(app)) == 2)
        assert len(sent(second, "push_dead_letters")) == 1
        assert caption(app) == "2 undelivered push notifications"


async def test_a_read_that_fails_is_said_in_the_caption_and_read_again() -> None:
    sender = Sender()
    refuse = True

    def reply(action: str, args: dict[str, Any]) -> Any:
        if action == "push_dead_letters" and refuse:
            raise CommandFailed("unauthorized", "the admin token may not read them")
        return sender.reply(action, args)

    feed = sample.ScriptedFeed(reply=reply)
    app = app_on(feed)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("7")
        await wait_until(lambda: "may not" in caption(app))
        assert caption(app) == "push notifications: the admin token may not read them"
        assert app.query_one(StatusLine).note == ""
        refuse = False
        tick(feed, 1)
        await wait_until(lambda: caption(app) == "2 undelivered push notifications")


async def test_an_off_contract_reply_is_said() -> None:
    feed = sample.ScriptedFeed(reply=lambda action, args: {"push_dead_letters": [{}]})

    async def once(url: str, token: str) -> FeedConnection:
        return feed

    app = ReachDashboard(url="ws://test", token="t", connector=once)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: app.model.frames == 1)
        await pilot.press("7")
        await wait_until(lambda: caption(app) == "push notifications: not a push_dead_letters "
                                                 "reply")
