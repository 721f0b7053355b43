"""An MCP server written with the official SDK (stdio), attached to Reach in the tests.

``flaky`` kills its own process on its first call (the marker file says it happened), as a
server that dies mid-call; ``book`` always does, and is not idempotent.

``python weather_server.py --http PORT`` serves it over Streamable HTTP at
``http://127.0.0.1:PORT/mcp`` instead of stdio (a server that can be stopped and started
again on its port)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("weather")
HTTP = len(sys.argv) > 2 and sys.argv[1] == "--http"
MARKER = Path(sys.argv[1]) if len(sys.argv) > 1 and not HTTP else None
READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True)


@server.tool(annotations=READ, description="today's forecast for a city")
def forecast(city: str) -> dict[str, object]:
    return {"city": city, "temp": 21}


@server.tool(annotations=READ)
def flaky(city: str) -> dict[str, object]:
    if MARKER is not None and not MARKER.exists():
        MARKER.write_text("crashed once")
        os._exit(3)
    return {"city": city, "survived": True}


@server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=False))
def book(room: str) -> dict[str, object]:
    os._exit(4)


@server.tool()
def refuse(order: str) -> str:
    raise ToolError(f"no such order {order!r}")


if __name__ == "__main__":
    if HTTP:
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run()
