"""The printed side of the benchmarks: the run's header, the table of medians with ratios
against the floor, the CPU-per-call table and PASS/MISS target lines.

Every number here is a median over rounds of one chain at one in-flight level. The *floor* is
the best raw relay of the same run, column by column (highest calls/s, lowest p50), so a ratio
never flatters a row with a write technique the floor did not also get.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
from typing import Any

from harness import Chain

Summary = dict[tuple[str, int], dict[str, float]]

COLUMNS = (("config", "<22"), ("in-flight", ">9"), ("calls/s", ">9"), ("p50 ms", ">8"),
           ("p99 ms", ">8"), ("calls/s vs floor", ">16"), ("p50 vs floor", ">12"), ("errors", ">6"))


def header(title: str, versions: dict[str, str]) -> str:
    """Two lines: what ran when, and on what (Python, CPUs, load, library versions)."""
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    libs = ", ".join(f"{k} {v}" for k, v in versions.items())
    return (f"{title}  {now}\n"
            f"python {platform.python_version()} ({platform.python_implementation()}), "
            f"{os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, "
            f"{libs}, load average {load()}")


def load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on every platform
        return "n/a"


def ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) and not math.isnan(a) else math.nan


def _median(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if not math.isnan(r[key])]
    return statistics.median(values) if values else math.nan


def summarize(chains: list[Chain], levels: list[int]) -> Summary:
    """Median calls/s, p50 and p99 per (chain, level), and the sum of errors."""
    summary: Summary = {}
    for chain in chains:
        for level in levels:
            rows = chain.results.get(level, [])
            summary[chain.name, level] = {
                "rate": _median(rows, "rate"), "p50": _median(rows, "p50_ms"),
                "p99": _median(rows, "p99_ms"), "errors": sum(r["errors"] for r in rows)}
    return summary


def floor(chains: list[Chain], summary: Summary, level: int) -> dict[str, float]:
    """The best raw relay at ``level``: highest calls/s and lowest p50 of the floor rows."""
    raws = [summary[c.name, level] for c in chains if c.group == "floor"]
    rates = [r["rate"] for r in raws if not math.isnan(r["rate"])]
    p50s = [r["p50"] for r in raws if not math.isnan(r["p50"])]
    return {"rate": max(rates) if rates else math.nan, "p50": min(p50s) if p50s else math.nan}


def _row(values: list[str]) -> str:
    return "  ".join(f"{v:{fmt}}" for v, (_, fmt) in zip(values, COLUMNS, strict=True))


def table(chains: list[Chain], levels: list[int], summary: Summary) -> str:
    """One line per chain and level, levels in order, chains in the order given."""
    out = [_row([name for name, _ in COLUMNS]), _row(["-" * len(name) for name, _ in COLUMNS])]
    for level in levels:
        base = floor(chains, summary, level)
        for chain in chains:
            s = summary[chain.name, level]
            out.append(_row([
                chain.name, str(level), f"{s['rate']:.0f}", f"{s['p50']:.3f}", f"{s['p99']:.3f}",
                f"{ratio(s['rate'], base['rate']):.0%}", f"{ratio(s['p50'], base['p50']):.2f}x",
                str(int(s["errors"]))]))
    return "\n".join(out)


def check(name: str, what: str, got: str, ok: bool) -> str:
    """One target line; ``ok`` is False for NaN (no data), which reads MISS."""
    return f"  {name:<22}  {what:<44}  {got:>7}  {'PASS' if ok else 'MISS'}"


def cpu_table(chains: list[Chain], levels: list[int]) -> str:
    """Median CPU microseconds per call in each process of a chain; ``-`` where a process
    could not be measured (an external service not visible to this user)."""
    out = [f"{'CPU us per call':<22}  {'in-flight':>9}  {'caller':>8}  {'middle':>8}  "
           f"{'agent':>8}  {'total':>8}"]
    for level in levels:
        for chain in chains:
            rows = [r["cpu_us"] for r in chain.results.get(level, [])]
            if not rows:
                continue
            per: list[float | None] = []
            for i in range(3):
                values = [r[i] for r in rows if r[i] is not None]
                per.append(statistics.median(values) if values else None)
            cells = [f"{v:>8.0f}" if v is not None else f"{'-':>8}" for v in per]
            total = sum(v for v in per if v is not None)
            out.append(f"{chain.name:<22}  {level:>9}  {'  '.join(cells)}  {total:>8.0f}")
    return "\n".join(out)
