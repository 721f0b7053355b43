"""docs/protocol.md §12: the minimal agent, taken from the page's code block at test time (so
the page and the test cannot drift), runs against a real coordinator and is called through a
real ``Client``; an idempotency key delivered to it twice does not run its handler twice."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from rawpeer import wait_state

from reach import Client, Reach, TaskError

DOC = Path(__file__).parents[2] / "docs" / "protocol.md"


def sample_source() -> str:
    section = DOC.read_text().split("## 12. A minimal agent", 1)[1].split("\n## 13.", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "no python block in §12 of docs/protocol.md"
    return str(blocks[0])


def load_sample(url: str) -> dict[str, Any]:
    """The sample's module namespace, its entry point (the last line, ``asyncio.run``) left
    out so that its ``main()`` runs on this test's loop, its ``handle`` counted."""
    source = sample_source()
    body, last = source.rstrip().rsplit("\n", 1)
    assert last == "asyncio.run(main())", last
    namespace: dict[str, Any] = {"__name__": "upper_agent"}
    exec(compile(body, "docs/protocol.md §12", "exec"), namespace)  # noqa: S102
    namespace["URL"] = url
    runs: list[dict[str, Any]] = []
    handle = namespace["handle"]

    def counted(params: dict[str, Any]) -> Any:
        runs.append(params)
        return handle(params)
    namespace["handle"] = counted
    namespace["runs"] = runs
    return namespace


async def test_the_sample_agent_serves_and_never_runs_a_key_twice() -> None:
    async with Reach.start(heartbeat_interval=0.05) as reach:
        sample = load_sample(reach.url)
        running = asyncio.get_running_loop().create_task(sample["main"]())
        try:
            await wait_state(reach, "upper-agent", "online")
            async with Client.connect(reach.url, caller="doc-reader") as client:
                assert await client.call("text.upper", {"text": "hello"}, timeout=5) == "HELLO"
                assert await client.call("Text.Upper", {"text": "again"}, timeout=5) == "AGAIN"
                with pytest.raises(TaskError, match="blank"):
                    await client.call("text.upper", {"text": "  "}, timeout=5)
                first = await client.submit("text.upper", {"text": "once"},
                                            idempotency_key="doc-k")
                assert await first.result(5) == "ONCE"
                # The coordinator forgets the key (as after idempotency_ttl): the same key is
                # a new task there, delivered to the agent again with the same scoped key.
                assert reach.gateway.prune_keys(reach.clock.wall() + 1) >= 1
                again = await client.submit("text.upper", {"text": "once"},
                                            idempotency_key="doc-k")
                assert not again.duplicate and again.task_id != first.task_id
                assert await again.result(5) == "ONCE"
                view = await client.status(again.task_id)
                assert view["idempotency_key"] == "doc-k"
                assert view["attempts"][0]["agent"] == "upper-agent"
            assert sample["runs"].count({"text": "once"}) == 1, sample["runs"]
            assert len(sample["runs"]) == 4  # hello, again, blank, once: each key once
            await asyncio.sleep(0.2)  # several heartbeat intervals
            assert [a["state"] for a in reach.agents() if a["name"] == "upper-agent"] == \
                ["online"]
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
