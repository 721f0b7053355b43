"""An A2A agent written with the official a2a-sdk (1.3): the remote end of the A2AAgent tests.

Served in-process by the tests (``app()`` under uvicorn on 127.0.0.1, port 0), or as a real
process for the fault drills: ``python remote_agent.py PORT MARKER_DIR [stream]`` prints its
port and serves until killed (``stream``: its card says it streams). The skill a message means is in the message's metadata (``skill``), as
``A2AAgent`` sends it; the params are the message's data part (or its text).

Skills: ``echo`` (answers its params as a data artifact; declares a params schema and
idempotency through Reach's skill extension), ``greet`` (text in, text out), ``refuse``
(FAILED), ``reject`` (REJECTED), ``slow`` (WORKING for ``ms`` milliseconds, then done),
``hang`` (WORKING until cancelled), ``count`` (one artifact per number up to ``n``; declared
streaming), ``say`` (a message reply, no task), ``picky`` (an InvalidParams A2A error),
``flaky`` and ``book`` (the process exits mid-task the first time each is called, then they
complete; ``flaky`` is declared idempotent).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from a2a.helpers import get_data_parts, new_data_part, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Struct
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse

SKILL_EXTENSION = "https://agent-reach.dev/a2a/skills/v1"  # reach.adapters.a2a's
ECHO_PARAMS = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


class Remote(AgentExecutor):
    """The agent's logic; ``cancelled`` lists the task ids a CancelTask reached."""

    def __init__(self, markers: Path | None = None, streaming: bool = False) -> None:
        self.markers = markers
        self.streaming = streaming  # the card says so: callers may SendStreamingMessage
        self.cancelled: list[str] = []
        self.started = asyncio.Event()  # a ``hang`` task is running
        self.more_skills: list[AgentSkill] = []  # added to the card as it is served
        self.dropped_skills: set[str] = set()  # left out of the card as it is served
        self.rpc_status: int | None = None  # JSON-RPC answers this HTTP status instead

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        message = context.message
        assert message is not None
        skill = message.metadata["skill"] if "skill" in message.metadata else ""
        data = get_data_parts(message.parts)
        params: dict[str, Any] = data[0] if data else {"text": context.get_user_input()}
        if skill == "say":  # a reply without a task
            await event_queue.enqueue_event(new_text_message(f"you said {params['text']}"))
            return
        if skill == "picky":  # an A2A error instead of a task
            raise InvalidParamsError("x must be positive")
        await event_queue.enqueue_event(Task(
            id=context.task_id, context_id=context.context_id,
            status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED), history=[message]))
        task = TaskUpdater(event_queue, context.task_id, context.context_id)
        await task.start_work()
        if skill == "echo":
            await task.add_artifact([new_data_part({"echo": params})])
            await task.complete()
        elif skill == "greet":
            await task.add_artifact([new_text_part(f"hello {params['text']}")])
            await task.complete()
        elif skill == "refuse":
            await task.failed(new_text_message(f"no such order {params.get('order')!r}"))
        elif skill == "reject":
            await task.reject(new_text_message("not for me"))
        elif skill == "slow":
            await asyncio.sleep(float(params.get("ms", 100)) / 1000)
            await task.add_artifact([new_data_part({"waited_ms": params.get("ms", 100)})])
            await task.complete()
        elif skill == "count":  # one artifact per number, as they are counted
            for i in range(int(params.get("n", 3))):
                await task.add_artifact([new_data_part({"i": i})], artifact_id=f"n{i}")
                await asyncio.sleep(0.01)
            await task.complete()
        elif skill == "hang":
            self.started.set()
            await asyncio.Event().wait()  # until CancelTask cancels this coroutine
        elif skill in ("flaky", "book"):
            assert self.markers is not None
            marker = self.markers / skill
            if not marker.exists():
                marker.touch()
                await asyncio.sleep(0.05)  # the caller has the task and is following it
                os._exit(1)  # killed mid-task
            await task.add_artifact([new_data_part({"skill": skill, "survived": True})])
            await task.complete()
        else:
            await task.reject(new_text_message(f"unknown skill {skill!r}"))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        self.cancelled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def card(url: str, streaming: bool = False) -> AgentCard:
    skills = [AgentSkill(id="echo", name="Echo", description="say it back", tags=["test"],
                         examples=["echo this back"]),
              AgentSkill(id="greet", name="Greet", description="greets", tags=["text"]),
              *(AgentSkill(id=s, name=s.title(), description=s, tags=["test"])
                for s in ("refuse", "reject", "slow", "hang", "flaky", "book", "count", "say",
                          "picky"))]
    declared = ParseDict({"echo": {"params": ECHO_PARAMS, "idempotent": True},
                          "slow": {"idempotent": True}, "flaky": {"idempotent": True},
                          "count": {"streaming": True}},
                         Struct())
    return AgentCard(
        name="remote", description="an A2A agent for tests", version="1.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC",
                                             protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=streaming, extensions=[
            AgentExtension(uri=SKILL_EXTENSION, params=declared)]),
        default_input_modes=["application/json", "text/plain"],
        default_output_modes=["application/json", "text/plain"], skills=skills)


def app(url: str, executor: Remote) -> Any:
    """The agent's ASGI app: the card at /.well-known/agent-card.json, JSON-RPC at /."""
    agent_card = card(url, executor.streaming)

    async def grown(served: AgentCard) -> AgentCard:
        grown = AgentCard()
        grown.CopyFrom(served)
        del grown.skills[:]
        grown.skills.extend(skill for skill in served.skills
                            if skill.id not in executor.dropped_skills)
        grown.skills.extend(executor.more_skills)
        return grown

    handler = DefaultRequestHandler(executor, InMemoryTaskStore(), agent_card)
    inner = Starlette(routes=[*create_agent_card_routes(agent_card, card_modifier=grown),
                              *create_jsonrpc_routes(handler, "/")])

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        status = executor.rpc_status
        if status is not None and scope["type"] == "http" and scope["method"] == "POST":
            await PlainTextResponse("down for the test", status_code=status)(
                scope, receive, send)
            return
        await inner(scope, receive, send)

    return asgi


def main() -> None:
    import socket

    import uvicorn

    port, markers, streaming = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:] == ["stream"]
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # see conftest.served
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    server = uvicorn.Server(uvicorn.Config(app(url, Remote(markers, streaming)), log_level="warning"))

    async def serve() -> None:
        serving = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
        while not server.started:  # the port is printed once it answers
            await asyncio.sleep(0.005)
        print(port, flush=True)
        await serving

    asyncio.run(serve())


if __name__ == "__main__":
    main()
