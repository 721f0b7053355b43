"""A declared handler, and how an invoke becomes the call of it.

``@agent.capability`` makes a ``Handler`` of the decorated function: its spec, whether it is
async or streams, which parameters it takes (``inspect_handler``: the ``Context`` one, and the
named ones, or all of them with ``**kwargs``). ``arguments`` turns an invoke's params into the
keyword arguments of one call (validated by the pydantic model when one was declared, cut
down to what the function takes, the context added); ``jsonable`` is what the result becomes
on the wire. Nothing here does I/O: running the call is serving.py's job.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from reach.core.keys import unscoped_key
from reach.sdk.client import Client
from reach.sdk.context import Context
from reach.wire import protocol as p


@dataclass(slots=True)
class Handler:
    spec: p.CapabilitySpec
    fn: Callable[..., Any]
    model: type[BaseModel] | None
    ctx_param: str | None
    accepts: frozenset[str] | None  # None: takes **kwargs
    streaming: bool
    is_async: bool


def inspect_handler(fn: Callable[..., Any]) -> tuple[str | None, frozenset[str] | None]:
    """The name of ``fn``'s ``Context`` parameter (or None), and the names it takes (None:
    it takes ``**kwargs``, so every param is passed)."""
    sig = inspect.signature(fn)
    ctx_param = None
    names: set[str] = set()
    var_kw = False
    for param in sig.parameters.values():
        ann = param.annotation
        if ann is Context or ann == "Context" or (ann is inspect.Parameter.empty
                                                  and param.name == "ctx"):
            ctx_param = param.name
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            var_kw = True
        else:
            names.add(param.name)
    return ctx_param, None if var_kw else frozenset(names)


def arguments(handler: Handler, f: p.Invoke,
              get_client: Callable[[], Awaitable[Client]]) -> dict[str, Any]:
    """The keyword arguments of ``handler``'s call for invoke ``f``. A declared model
    validates the params first (raising pydantic's ``ValidationError``); the context's
    nested calls go through ``get_client``."""
    if handler.model is not None:
        model = handler.model.model_validate(f.params)
        kwargs = {k: getattr(model, k) for k in type(model).model_fields}
    else:
        kwargs = dict(f.params)
    if handler.accepts is not None:
        kwargs = {k: v for k, v in kwargs.items() if k in handler.accepts}
    if handler.ctx_param is not None:
        kwargs[handler.ctx_param] = Context(
            task_id=f.task_id, trace_id=f.trace_id,
            idempotency_key=unscoped_key(f.caller, f.idempotency_key),
            capability=f.capability, caller=f.caller, attempt=f.attempt,
            parent_task_id=f.parent_task_id, traceparent=f.traceparent,
            deadline=None if f.deadline_ms is None
            else time.monotonic() + f.deadline_ms / 1000.0,
            _client=get_client)
    return kwargs


def jsonable(value: Any) -> Any:
    """A handler's return value (or streamed item) as it goes on the wire: models dumped."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value
