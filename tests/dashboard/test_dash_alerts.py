"""Alerts where an operator looks: the admin feed's ``alerts`` (snapshot and delta, over a real
websocket), the dashboard's model, and the red part of its status line (a Pilot test against a
real coordinator whose rule fires)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import websockets

from dashboard import ReachDashboard
from dashboard.feed import connect
from dashboard.model import Model
from dashboard.views.status import Link, StatusLine, alert_line, status_text
from reach.alert_rules import AlertConfig
from reach.core import alerts as al
from reach.testing import Cluster, wait_until
from reach.wire import admin

COORD = {"url": "ws://x", "version": "1", "started_at": 900.0, "store": "sqlite://"}
BREAKER = {"id": "b/*/ledger-writer", "rule": "b", "kind": "breaker_open",
           "agent": "ledger-writer", "value": 31.0, "threshold": 30.0, "unit": "s",
           "since": 939.0, "fired_at": 970.0, "summary": "breaker open 31 s on ledger-writer"}
NOBODY = {"id": "n/ledger.write/*", "rule": "n", "kind": "no_agent",
          "capability": "ledger.write", "value": 0, "threshold": 1, "unit": "agents",
          "since": 988.0, "fired_at": 989.0}


def snapshot(at: float, alerts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"v": 1, "type": "snapshot", "at": at, "coordinator": COORD, "alerts": alerts}


def test_the_model_keeps_the_alerts_of_the_last_frame_that_carried_them() -> None:
    model = Model()
    model.apply(snapshot(1000.0, [BREAKER, NOBODY]))
    assert [a.id for a in model.alerts] == [BREAKER["id"], NOBODY["id"]]
    model.apply({"v": 1, "type": "delta", "at": 1001.0})  # none said: kept
    assert len(model.alerts) == 2
    model.apply({"v": 1, "type": "delta", "at": 1002.0, "alerts": [NOBODY]})
    assert [a.kind for a in model.alerts] == ["no_agent"]
    model.apply({"v": 1, "type": "delta", "at": 1003.0, "alerts": []})
    assert model.alerts == []
    model.apply({"v": 1, "type": "snapshot", "at": 1004.0, "coordinator": COORD})
    assert model.alerts == []  # an older coordinator: no alerts field


def test_the_status_line_shows_the_alerts_first_in_red_with_live_ages() -> None:
    model = Model()
    model.apply(snapshot(1000.0, [BREAKER, NOBODY]))
    assert alert_line(model) == (
        "2 alerts: breaker open 61 s on ledger-writer; no agent for ledger.write for 12 s")
    text = status_text(Link("connected"), "ws://x", model, "")
    start = text.plain.index("⚠")
    assert text.plain.startswith("● connected  ⚠ 2 alerts: breaker open 61 s")
    assert [str(s.style) for s in text.spans if s.start == start - 2] == ["bold red"]
    assert text.plain.index("ws://x") > text.plain.index("for 12 s")
    model.apply({"v": 1, "type": "delta", "at": 1010.0, "alerts": [BREAKER]})
    assert alert_line(model) == "1 alert: breaker open 71 s on ledger-writer"
    model.apply({"v": 1, "type": "delta", "at": 1011.0, "alerts": []})
    assert alert_line(model) == "" and "⚠" not in status_text(Link("connected"), "u", model,
                                                              "").plain


async def test_admin_feed_snapshot_and_deltas_carry_the_alerts_firing_now() -> None:
    rule = al.Rule("unserved", al.NO_AGENT, capabilities=("ledger.write",))
    cluster = await Cluster.start(admin_token="t", alerts=AlertConfig((rule,), interval=0.01))
    try:
        await wait_until(lambda: bool(cluster.reach.alerts()))
        async with websockets.connect(cluster.url) as ws:
            await ws.send(json.dumps({"v": 1, "type": "admin", "token": "t"}))
            raw = await ws.recv()
            frame = admin.parse_admin(raw)
            assert isinstance(frame, admin.Snapshot)
            [view] = frame.alerts
            assert (view.id, view.kind, view.capability, view.state, view.unit) == (
                "unserved/ledger.write/*", "no_agent", "ledger.write", "firing", "agents")
            assert view.summary.startswith("no agent for ledger.write for ")
            assert json.loads(raw)["alerts"][0]["resolved_at"] is None

            async def write() -> str:
                return "ok"
            await cluster.add_agent("ledger", {"ledger.write": write})
            async with asyncio.timeout(3):
                while True:  # deltas carry the whole list until it is empty: resolved
                    raw = await ws.recv()
                    delta = admin.parse_admin(raw)
                    assert isinstance(delta, admin.Delta)
                    if json.loads(raw)["alerts"] == []:
                        break
                    assert [a.id for a in delta.alerts] == ["unserved/ledger.write/*"]
    finally:
        await cluster.close()


async def test_the_dashboard_header_shows_an_alert_of_a_real_coordinator() -> None:
    rule = al.Rule("unserved", al.NO_AGENT, capabilities=("ledger.write",), hold=0.01)
    cluster = await Cluster.start(admin_token="t", alerts=AlertConfig((rule,), interval=0.01))
    app = ReachDashboard(url=cluster.url, token="t", connector=connect, reconnect_base=0.02,
                         reconnect_cap=0.1)
    try:
        async with app.run_test(size=(200, 40)) as pilot:
            status = app.query_one(StatusLine)
            await wait_until(lambda: "⚠ 1 alert: no agent for ledger.write for" in
                             str(status.render()))

            async def write() -> str:
                return "ok"
            await cluster.add_agent("ledger", {"ledger.write": write})
            await wait_until(lambda: "alert" not in str(status.render())
                             and "1 agent" in str(status.render()))
            await pilot.pause()
    finally:
        await cluster.close()
