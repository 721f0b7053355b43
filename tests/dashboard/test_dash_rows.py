"""Row formatting, the `/` filter and the waterfall arithmetic: pure functions, no terminal."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard import rows, sample, waterfall
from dashboard.filtering import Filter
from reach.wire import admin


def agents(**changed: Any) -> list[admin.AgentView]:
    """The sample's agents as the dashboard holds them, each with ``changed`` applied."""
    return [admin.AgentView.model_validate({**a, **changed}) for a in sample.AGENTS]


def letters() -> list[admin.DeadLetter]:
    return [admin.DeadLetter.model_validate(d) for d in sample.DEAD_LETTERS]


def traces() -> list[admin.TraceSummary]:
    return [admin.TraceSummary.model_validate(t) for t in sample.TRACES]


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "—"), (-1.0, "0.0s"), (0.42, "0.4s"), (12.7, "12s"), (184, "3m04s"),
    (7380, "2h03m"), (3 * 86400 + 4 * 3600, "3d04h"),
])
def test_age(seconds: float | None, text: str) -> None:
    assert rows.age(seconds) == text


@pytest.mark.parametrize(("ms", "text"), [
    (None, "—"), (0.84, "0.8 ms"), (21.4, "21 ms"), (1250.0, "1.25 s"),
])
def test_millis(ms: float | None, text: str) -> None:
    assert rows.millis(ms) == text


def test_load_bar_scales_to_max_concurrency() -> None:
    assert rows.load_bar(0, 10).plain == "░░░░░░ 0/10"
    assert rows.load_bar(1, 100).plain == "█░░░░░ 1/100"  # busy is never drawn as idle
    assert rows.load_bar(5, 10).plain == "███░░░ 5/10"
    assert rows.load_bar(30, 20).plain == "██████ 30/20"


def test_agent_row_ages_come_from_the_frame_clock() -> None:
    view = agents()[2]  # orders-2: suspected, beat 2.4 s before AT
    row = rows.agent_row(view, sample.AT + 10)
    cells = {c.key: cell for c, cell in zip(rows.AGENT_COLUMNS, row.cells, strict=True)}
    assert row.key == view.agent_id
    assert cells["state"].plain == "suspected" and cells["state"].style == "yellow"
    assert cells["beat"].plain == "12s"
    assert cells["breaker"].plain == "open" and "red" in str(cells["breaker"].style)
    assert cells["load"].plain.endswith("0/10")


def test_agent_row_shows_draining_and_state_colours() -> None:
    states = {a.name: rows.agent_row(a, sample.AT).cells[1] for a in agents()}
    # an operator's drain is not a fault: "drained", not "online · draining" or "suspected"
    assert states["reports"].plain == "drained" and states["reports"].style == "cyan"
    assert states["billing"].style == "green" and states["search"].style == "red"
    closed = agents(connected=False)[2]  # a closed socket: suspected at once
    assert rows.agent_row(closed, sample.AT).cells[1].plain == "suspected · lost"


def test_agent_row_beat_falls_back_to_the_reported_age() -> None:
    view = agents(last_beat=0.0)[4]  # search: no beat time, 95 s by its own count
    assert rows.agent_row(view, sample.AT).cells[7].plain == "1m35s"


def test_breaker_row_fault_rate_and_next_probe() -> None:
    by_name = {a.name: rows.breaker_row(a, sample.AT) for a in agents()}
    assert by_name["orders-2"].cells[2].plain == "tripped 60% of 10"
    assert by_name["orders-2"].cells[3].plain == "1.8s"
    assert by_name["orders-2"].cells[4].plain == "in 3.2s"
    assert by_name["reports"].cells[4].plain == "probing"
    assert by_name["billing"].cells[2].plain == "  0% of last 10"
    assert [c.plain for c in by_name["billing"].cells[3:5]] == ["—", "—"]
    bare = agents(breaker_detail=None)[2]  # no detail: the summary state, no window
    assert [c.plain for c in rows.breaker_row(bare, sample.AT).cells[1:5]] == [
        "open", "", "—", "—"]


def test_an_open_breaker_past_its_wait_probes_on_the_next_call() -> None:
    """Issue 14: not a stuck "in 0.0s" until a call comes, but what the breaker waits for,
    and since when it may probe; a failed probe is said, with the rate that tripped it."""
    detail = {"state": "open", "fault_rate": 0.0, "window": 0, "window_size": 10,
              "next_probe_in_s": 0.0, "opened_at": sample.AT - 45.0,
              "probe_after": sample.AT - 40.0, "tripped_rate": 1.0, "tripped_calls": 5,
              "probe_failed": True}
    view = agents(breaker="open", breaker_detail=detail)[0]
    cells = [c.plain for c in rows.breaker_row(view, sample.AT).cells]
    assert cells[2] == "tripped 100% of 5 · probe failed"
    assert cells[3] == "45s"
    assert cells[4] == "next call · ready 40s"
    old = {k: v for k, v in detail.items() if k not in ("probe_after", "opened_at",
                                                          "tripped_rate")}
    view = agents(breaker="open", breaker_detail=old)[0]  # an older coordinator
    cells = [c.plain for c in rows.breaker_row(view, sample.AT).cells]
    assert cells[2:5] == ["  0% of last 0", "—", "next call"]


def test_trace_row_running_and_finished() -> None:
    running = rows.trace_row(traces()[1], sample.AT)
    assert running.cells[5].plain == "3.5s…" and running.cells[4].plain == "running"
    failed = rows.trace_row(traces()[0], sample.AT)
    assert failed.cells[5].plain == "800 ms" and failed.cells[7].plain == "orders.write"


def test_letter_row() -> None:
    row = rows.letter_row(letters()[1], sample.AT)
    assert [c.plain for c in row.cells] == [
        "2222222222", "orders.write", "orders-2", "task_failed: RuntimeError: db locked", "2",
        "dead", "12s"]
    replaying = rows.letter_row(letters()[1].model_copy(update={"state": "running"}),
                                sample.AT)
    assert replaying.cells[5].plain == "replaying"
    assert row.fields["error"] == "task_failed: RuntimeError: db locked"


def test_filter_words_and_fields() -> None:
    fields = {"agent": "orders-2", "capability": "orders.write", "error": "fault: DB locked"}
    assert Filter.parse("").matches(fields) and not Filter.parse("  ")
    assert Filter.parse("db").matches(fields)
    assert Filter.parse("ORDERS locked").matches(fields)
    assert not Filter.parse("orders billing").matches(fields)
    assert Filter.parse("agent:orders").matches(fields)
    assert not Filter.parse("agent:write").matches(fields)
    assert Filter.parse("cap:write err:db").matches(fields)
    assert not Filter.parse("http://x").matches(fields)  # unknown prefix: a plain word


def sample_timeline() -> admin.Timeline:
    return admin.Timeline.model_validate(sample.TIMELINES[sample.TRACES[0]["trace_id"]])


def test_waterfall_bars_are_scaled_to_the_trace_duration() -> None:
    bars = waterfall.layout(sample_timeline(), 80)
    assert len(bars) == 12
    processing = bars[2]  # report.write processing: 6 ms .. 790 ms of 800 ms
    assert (processing.offset, processing.length) == (1, 78)
    retry = next(b for b in bars if b.phase == "retry")  # 320 .. 520 ms
    assert (retry.offset, retry.length) == (32, 20)
    assert all(b.offset + b.length <= 80 for b in bars)
    assert [b.label for b in bars if b.failed] == [
        "report.write processing #1", "  orders.write processing #1",
        "  orders.write processing #2", "  orders.write done", "report.write done"]
    assert waterfall.retries(sample_timeline()) == 1


def test_waterfall_of_a_running_trace_spans_its_hops() -> None:
    timeline = admin.Timeline(trace_id="t", started_at=10.0, duration_ms=None, hops=[
        admin.Hop(task_id="k", capability="x", phase="queued", start=10.0, end=10.5),
        admin.Hop(task_id="k", capability="x", phase="processing", start=10.5, end=12.0)])
    assert waterfall.span_s(timeline) == (10.0, 2.0)
    first, second = waterfall.layout(timeline, 20)
    assert (first.offset, first.length, second.offset, second.length) == (0, 5, 5, 15)


def test_waterfall_render_marks_failed_hops_red() -> None:
    text = waterfall.render(sample_timeline(), 116)
    lines = text.plain.split("\n")
    assert lines[0].startswith("trace a1a1a1a1a1a1a1a1 · 3 tasks · 800 ms · 1 retry · 2 failed")
    assert max(len(line) for line in lines) <= 116
    failed_line = next(i for i, line in enumerate(lines) if "processing #2" in line)
    start = sum(len(line) + 1 for line in lines[:failed_line])
    styles = {str(span.style) for span in text.spans
              if start <= span.start < start + len(lines[failed_line])}
    assert waterfall.FAILED_STYLE in styles


def test_an_agents_node_is_shown_dim_for_this_coordinator_plain_for_a_peer() -> None:
    by_name = {a.name: rows.agent_row(a, sample.AT, here="n-4be1a0") for a in agents()}
    node = [c.key for c in rows.AGENT_COLUMNS].index("node")
    here, peer = by_name["billing"].cells[node], by_name["orders-2"].cells[node]
    assert (here.plain, str(here.style)) == ("n-4be1a0", "dim")
    assert (peer.plain, str(peer.style)) == ("n-7c2d19", "")
    assert by_name["orders-2"].fields["node"] == "n-7c2d19"
    assert Filter.parse("node:7c2d").matches(by_name["orders-2"].fields)
    assert not Filter.parse("node:7c2d").matches(by_name["billing"].fields)
    old = admin.AgentView.model_validate({**sample.AGENTS[0], "node": None})
    assert rows.agent_row(old, sample.AT).cells[node].plain == rows.DASH  # an older feed
