"""The minimal agent in docs/protocol.md (§12) really works: it is run from the doc itself."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from reach import Client, Reach, TaskError

DOC = Path(__file__).parents[1] / "docs" / "protocol.md"


def minimal_agent_source() -> str:
    section = DOC.read_text().split("## 12. A minimal agent", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "no python block in §12 of docs/protocol.md"
    return blocks[0]


async def test_the_documented_minimal_agent_serves_calls(tmp_path: Path) -> None:
    script = tmp_path / "upper_agent.py"
    script.write_text(minimal_agent_source())
    async with Reach.start(heartbeat_interval=0.05) as reach:
        proc = await asyncio.create_subprocess_exec(sys.executable, str(script), reach.url)
        try:
            deadline = asyncio.get_running_loop().time() + 10
            while not any(a["name"] == "upper-agent" for a in reach.agents()):
                assert asyncio.get_running_loop().time() < deadline, "agent never registered"
                await asyncio.sleep(0.02)
            async with Client.connect(reach.url, caller="doc-reader") as client:
                assert await client.call("text.upper", {"text": "hello"}, timeout=5) == "HELLO"
                assert await client.call("Text.Upper", {"text": "again"}, timeout=5) == "AGAIN"
                with pytest.raises(TaskError, match="blank"):
                    await client.call("text.upper", {"text": "  "}, timeout=5)
                first = await client.submit("text.upper", {"text": "once"},
                                            idempotency_key="doc-k")
                again = await client.submit("text.upper", {"text": "once"},
                                            idempotency_key="doc-k")
                assert again.duplicate and await again.result(5) == "ONCE"
                assert first.task_id == again.task_id
            await asyncio.sleep(0.2)  # several heartbeat intervals
            assert next(a for a in reach.agents() if a["name"] == "upper-agent")["state"] \
                == "online"
        finally:
            proc.kill()
            await proc.wait()
