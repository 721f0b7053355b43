"""Adapter agents are probed by their health checks, under the same rule as websocket agents
(reach.adapters.base, reach.gateway.probing): every ``health_interval``, each passing check a
beat; checks slower than ``probe_slow`` twice in a row suspect the agent even though they
pass, and a fast one restores it. Detaching stops its probes."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from reach import Reach
from reach.adapters import Adapter
from reach.adapters.base import Membership
from reach.ports import Reply, Work
from reach.testing import wait_until

SETTINGS: dict[str, Any] = {"heartbeat_interval": 0.05, "probe_slow": 0.03,
                            "offline_after": 100}


class Checked(Adapter):
    kind = "checked"

    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, {"echo.run": {"idempotent": True}}, **kw)
        self.check_takes = 0.0
        self.checks = 0

    async def invoke(self, work: Work, how: dict[str, Any], reply: Reply) -> Any:
        return work.params

    async def check(self) -> bool:
        self.checks += 1
        await asyncio.sleep(self.check_takes)
        return True


def view(reach: Reach, name: str) -> dict[str, Any]:
    return next(a for a in reach.agents() if a["name"] == name)


async def test_slow_but_passing_checks_suspect_an_adapter_a_fast_one_restores_it(
        caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="reach.events")
    async with Reach.start(**SETTINGS, json_logs=True) as reach:
        adapter = Checked("legacy", health_interval=0.06)
        await reach.attach(adapter)
        record = reach.registry.by_name["legacy"]
        assert record.liveness.interval == 0.06  # its checks are its beats
        await wait_until(lambda: (view(reach, "legacy")["probe"] or {}).get("sent", 0) >= 2)
        assert view(reach, "legacy")["probe"]["interval_s"] == 0.06
        assert view(reach, "legacy")["state"] == "online"
        adapter.check_takes = 0.045  # within its bound (a beat), past probe_slow
        await wait_until(lambda: view(reach, "legacy")["state"] == "suspected")
        assert view(reach, "legacy")["suspected_by"] == "probe"
        assert view(reach, "legacy")["since_heartbeat_s"] < 0.12  # it still beats
        adapter.check_takes = 0.0
        await wait_until(lambda: view(reach, "legacy")["state"] == "online")
        lines = [json.loads(r.getMessage()) for r in caplog.records
                 if r.name == "reach.events" and '"event": "probe"' in r.getMessage()]
        assert [(line["agent"], line["change"]) for line in lines] == [
            ("legacy", "suspected"), ("legacy", "restored")], lines
        checks = adapter.checks
        await reach.detach("legacy")
        assert not adapter._probing
        assert record.agent_id not in reach.gateway.probes.links
        await asyncio.sleep(0.15)
        assert adapter.checks == checks  # no probe after detaching


async def test_an_adapter_is_watched_only_through_the_probes() -> None:
    adapter = Checked("alone")
    membership = Membership(object(), object(), object(), 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="probes"):
        adapter.watch(membership)
    assert adapter.probe(1) is False  # not watched: it cannot carry a probe
    membership.probed(adapter, 1, True)  # no probes to tell: nothing happens
