"""``reach serve --mcp --a2a`` as a user runs it (issue 28's names): one subprocess, whose
status lines give the MCP and A2A URLs on the REST port; the official MCP client lists and
calls a tool there and the official A2A client resolves the card and sends a message, both
reaching an agent that connected over the websocket."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import httpx2
import pytest
from subprocs import REPO, free_port

from reach import Agent, Reach, Settings

pytest.importorskip("mcp", reason="needs the mcp extra")
pytest.importorskip("a2a", reason="needs the a2a extra")

from a2a.client import A2ACardResolver, ClientConfig, create_client  # noqa: E402
from a2a.types import a2a_pb2 as pb  # noqa: E402
from google.protobuf.json_format import MessageToDict, ParseDict  # noqa: E402
from google.protobuf.struct_pb2 import Value  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402


async def test_reach_serve_with_mcp_and_a2a_serves_both_on_the_rest_port(tmp_path: Path
                                                                         ) -> None:
    port, http_port = free_port(), free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "reach.cli", "serve", "--port", str(port), "--http-port",
         str(http_port), "--store", f"sqlite:///{tmp_path / 'r.db'}", "--mcp", "--a2a",
         "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        cwd=REPO, text=True)
    agent = Agent("maths", reconnect_base=0.02)

    @agent.capability("maths.add", params={
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"]})
    async def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    try:
        assert serve.stdout is not None
        said: list[str] = []
        while not any("metrics at" in line for line in said):
            line = await asyncio.wait_for(asyncio.to_thread(serve.stdout.readline), 30)
            assert line, f"reach serve ended early: {said}"
            said.append(line)
        base = f"http://127.0.0.1:{http_port}"
        assert f"reach: MCP (Streamable HTTP) at {base}/mcp (docs/mcp.md)\n" in said
        assert any(line.startswith(f"reach: A2A at {base}/a2a (card at ") for line in said)
        await agent.connect(f"ws://127.0.0.1:{port}")

        async with httpx2.AsyncClient(timeout=10) as http, \
                Client(streamable_http_client(f"{base}/mcp", http_client=http),
                       mode="legacy") as mcp:
            assert "maths.add" in [t.name for t in (await mcp.list_tools()).tools]
            result = await mcp.call_tool("maths.add", {"a": 2, "b": 3})
            assert result.structured_content == {"sum": 5}

        async with httpx.AsyncClient(timeout=10) as http:
            card = await A2ACardResolver(http, f"{base}/a2a").get_agent_card()
            assert [skill.id for skill in card.skills] == ["maths.add"]
            a2a = await create_client(f"{base}/a2a", ClientConfig(httpx_client=http, streaming=False))
            async with a2a:
                message = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER, parts=[
                    pb.Part(data=ParseDict({"capability": "maths.add",
                                            "params": {"a": 4, "b": 5}}, Value()))])
                [event] = [e async for e in a2a.send_message(
                    pb.SendMessageRequest(message=message))]
        task = event.task
        assert task.status.state == pb.TASK_STATE_COMPLETED
        assert MessageToDict(task.artifacts[0].parts[0].data) == {"sum": 9.0}
    finally:
        await agent.close(drain=0.2)
        serve.terminate()
        serve.wait(15)
        if serve.stdout is not None:
            serve.stdout.close()


@pytest.mark.parametrize("door", ["mcp", "a2a"])
def test_a_protocol_door_without_the_http_port_says_so(door: str) -> None:
    with pytest.raises(ValueError, match=f"{door}=True needs the HTTP port"):
        Reach(Settings(http_port=None, **{door: True}))
