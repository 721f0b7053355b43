"""``/openapi.json``: the front door's OpenAPI 3.1 document, built from the models its routes
validate with and answer with (reach/server/front_models.py), so the two cannot drift apart.

pydantic writes JSON Schema 2020-12, the dialect OpenAPI 3.1 uses; the models' schemas go
under ``components/schemas`` and every operation refers to them. Query and header parameters
come from the ``CallQuery``, ``WaitQuery`` and ``Headers`` models' properties one by one.
Errors are ``application/problem+json`` ``Problem`` objects with the statuses of
``front_problems.STATUS`` (docs/http-api.md has the table).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import models_json_schema

from reach._version import __version__
from reach.server.front_models import (
    CallQuery,
    CallResult,
    CapabilityList,
    CapabilityName,
    Headers,
    Health,
    IntentBody,
    Problem,
    SubmitBody,
    TaskAccepted,
    TaskStatus,
    WaitQuery,
)
from reach.server.front_problems import PROBLEM_JSON

_REF = "#/components/schemas/{model}"
_BODIES: list[type[BaseModel]] = [SubmitBody, IntentBody]
_ANSWERS: list[type[BaseModel]] = [CallResult, TaskAccepted, TaskStatus, CapabilityList,
                                   Health, Problem]
_CALL_ERRORS = (400, 401, 403, 404, 408, 413, 415, 422, 429, 502, 503, 504)
_WHY = {400: "malformed JSON or headers (protocol_error)", 401: "no or unknown token",
        403: "not permitted (call rules, another principal's name)",
        404: "no such capability (no_route, with suggestions), task or route",
        405: "method not allowed on this path",
        408: "the body did not arrive within http_body_timeout (protocol_error)",
        413: "body over max_frame_bytes",
        415: "a Content-Encoding other than identity: bodies are taken uncompressed",
        422: "params refused (invalid_params) or the agent's deliberate answer (task_failed)",
        429: "back-pressure, or the caller holds its share of the door's requests "
             "(rejected); see Retry-After",
        502: "the agents failed the task: attempts exhausted (task_failed, a dead letter)",
        503: "declared but no agent online, or the coordinator is stopping (unavailable)",
        504: "no outcome within the timeout (timeout)"}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _REF.format(model=model.__name__)}


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameter's schema without pydantic's ``null`` branch (absent means None)."""
    branches = schema.get("anyOf")
    if branches:
        rest = [b for b in branches if b.get("type") != "null"]
        if len(rest) == 1:
            out = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
            return {**rest[0], **out}
    return {k: v for k, v in schema.items() if k != "default"}


def _params(model: type[BaseModel], where: str, only: tuple[str, ...] = ()) -> list[Any]:
    schema = model.model_json_schema(by_alias=True)
    out = []
    for name, prop in schema["properties"].items():
        if only and name not in only:
            continue
        prop = _not_null(prop)
        out.append({"name": name, "in": where, "required": False,
                    "description": prop.pop("description", prop.get("title", name)),
                    "schema": prop})
    return out


def _problems(statuses: tuple[int, ...]) -> dict[str, Any]:
    return {str(s): {"description": _WHY.get(s, "error"),
                     "content": {PROBLEM_JSON: {"schema": _ref(Problem)}}} for s in statuses}


def _json(model: type[BaseModel], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


def _trace_headers() -> dict[str, Any]:
    return {"traceparent": {"description": "W3C traceparent naming this task",
                            "schema": {"type": "string"}},
            "X-Reach-Task-Id": {"schema": {"type": "string"}},
            "X-Reach-Trace-Id": {"schema": {"type": "string"}}}


def document() -> dict[str, Any]:
    """The whole OpenAPI 3.1 document, as a JSON-able dict."""
    _, defs = models_json_schema([(m, "validation") for m in _BODIES]
                                 + [(m, "serialization") for m in _ANSWERS],
                                 ref_template=_REF)
    headers = _params(Headers, "header", ("X-Reach-Caller", "traceparent"))
    keyed = headers + _params(Headers, "header", ("Idempotency-Key",))
    timed = keyed + _params(Headers, "header", ("X-Reach-Timeout",))
    task_id = {"name": "task_id", "in": "path", "required": True,
               "schema": {"type": "string", "minLength": 1, "maxLength": 200}}
    result = _json(CallResult, "the call's result")
    result["content"]["text/event-stream"] = {"schema": {"type": "string"}}
    result["headers"] = _trace_headers()
    call_doc = ("Send `Accept: text/event-stream` to receive a streaming capability's "
                "chunks as server-sent events (docs/http-api.md).")
    paths: dict[str, Any] = {
        "/v1/call/{capability}": {"post": {
            "operationId": "call", "summary": "Call a capability and wait for its result",
            "description": call_doc,
            "parameters": [{"name": "capability", "in": "path", "required": True,
                            "schema": TypeAdapter(CapabilityName).json_schema()}]
            + _params(CallQuery, "query") + timed,
            "requestBody": {"required": False, "description": "the params (a JSON object)",
                            "content": {"application/json": {"schema": {"type": "object"}}}},
            "responses": {"200": result, **_problems(_CALL_ERRORS)}}},
        "/v1/intent": {"post": {
            "operationId": "callIntent", "summary": "Call whatever capability an intent names",
            "description": call_doc, "parameters": timed,
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": _ref(IntentBody)}}},
            "responses": {"200": result, **_problems(_CALL_ERRORS)}}},
        "/v1/tasks": {"post": {
            "operationId": "submit", "summary": "Submit a durable task (202 once stored)",
            "parameters": keyed,
            "requestBody": {"required": True, "content": {
                "application/json": {"schema": _ref(SubmitBody)}}},
            "responses": {"202": {**_json(TaskAccepted, "stored: ask about it by its id"),
                                  "headers": {"Location": {"schema": {"type": "string"}},
                                              **_trace_headers()}},
                          **_problems((400, 401, 403, 404, 408, 413, 415, 422, 429,
                                       503))}}},
        "/v1/tasks/{task_id}": {"get": {
            "operationId": "status", "summary": "A task's status and result",
            "parameters": [task_id] + _params(WaitQuery, "query") + headers,
            "responses": {"200": {**_json(TaskStatus, "the task, as its caller sees it"),
                                  "headers": {"X-Reach-State": {
                                      "description": "the task's state (for shell callers)",
                                      "schema": {"type": "string"}}, **_trace_headers()}},
                          **_problems((400, 401, 403, 404, 422, 429))}},
            "delete": {
            "operationId": "cancel", "summary": "Cancel one of the caller's tasks: it ends as "
                                                "cancelled and its agent is told to stop",
            "parameters": [task_id] + headers,
            "responses": {"200": {**_json(TaskStatus, "the task after the cancel (as it ended, "
                                                      "if it ended first)"),
                                  "headers": {"X-Reach-State": {
                                      "description": "the task's state (for shell callers)",
                                      "schema": {"type": "string"}}, **_trace_headers()}},
                          **_problems((400, 401, 403, 404, 422, 429))}}},
        "/v1/tasks/{task_id}/stream": {"get": {
            "operationId": "stream", "summary": "A streaming task's chunks, as server-sent "
                                                "events, then its result or error",
            "parameters": [task_id] + headers,
            "responses": {"200": {"description": "event: chunk (id: seq), then event: result "
                                                 "or event: error",
                                  "content": {"text/event-stream": {
                                      "schema": {"type": "string"}}}},
                          **_problems((400, 401, 403, 404, 422, 429))}}},
        "/v1/capabilities": {"get": {
            "operationId": "capabilities", "summary": "What this caller may call, and who "
                                                      "serves it",
            "parameters": headers,
            "responses": {"200": _json(CapabilityList, "the capabilities"),
                          **_problems((400, 401, 403, 422, 429))}}},
        "/healthz": {"get": {
            "operationId": "health", "summary": "Whether the coordinator takes work",
            "security": [],
            "responses": {"200": _json(Health, "accepting work"),
                          "503": _json(Health, "stopping")}}},
        "/openapi.json": {"get": {
            "operationId": "openapi", "summary": "This document", "security": [],
            "responses": {"200": {"description": "OpenAPI 3.1",
                                  "content": {"application/json": {
                                      "schema": {"type": "object"}}}}}}},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "Agent-Reach front door", "version": __version__,
                 "description": "Call the capabilities of a Reach coordinator over HTTP "
                                "(docs/http-api.md). Errors are application/problem+json "
                                "with Reach's stable `code`."},
        "paths": paths,
        "components": {"schemas": defs.get("$defs", {}), "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "a token from the coordinator's tokens; not needed "
                                      "in open mode"}}},
        "security": [{"bearer": []}, {}],
    }
