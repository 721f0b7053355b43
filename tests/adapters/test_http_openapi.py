"""Capabilities from an OpenAPI document: the pure conversion (reach.adapters.openapi) and an
HttpAgent that reads the document from a real service when it is attached."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reach import Client, Reach
from reach.adapters.http import HttpAgent
from reach.adapters.openapi import capabilities
from reach.core.schemas import check, compile_schema
from reach.errors import InvalidParams

from .http_service import Seen, js, serving

DOC: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "orders", "version": "1"},
    "servers": [{"url": "http://elsewhere.example"}],  # ignored: the agent's url is used
    "paths": {
        "/orders/{order_id}": {
            "parameters": [{"$ref": "#/components/parameters/OrderId"}],
            "get": {"operationId": "getOrder", "summary": "One order\x07 by id",
                    "parameters": [{"name": "fields", "in": "query",
                                    "schema": {"type": "array", "items": {"type": "string"}}},
                                   {"name": "X-Trace", "in": "header"}]},
        },
        "/lookup": {
            "post": {"operationId": "lookupOrder",
                     "parameters": [{"name": "dry", "in": "query", "required": True,
                                     "schema": {"type": "boolean"}}],
                     "requestBody": {"$ref": "#/components/requestBodies/Lookup"}},
        },
        "/tree": {"put": {"operationId": "tree.put", "requestBody": {"content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/Node"}}}}}},
        "/bulk": {"post": {"operationId": "bulkLoad", "requestBody": {"content": {
            "application/json": {"schema": {"type": "array"}}}}}},
        "/untitled": {"get": {"summary": "no operationId"}},
    },
    "components": {
        "parameters": {"OrderId": {"name": "order_id", "in": "path", "required": True,
                                   "schema": {"type": "integer"}}},
        "requestBodies": {"Lookup": {"content": {"application/json; charset=utf-8": {
            "schema": {"$ref": "#/components/schemas/Lookup"}}}}},
        "schemas": {
            "Lookup": {"type": "object", "required": ["customer"],
                       "properties": {"customer": {"$ref": "#/components/schemas/Customer"}}},
            "Customer": {"type": "object", "required": ["id"],
                         "properties": {"id": {"type": "string", "minLength": 1}}},
            "Node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}},
        },
    },
}


def test_operations_become_capabilities_with_their_schemas() -> None:
    table, skipped = capabilities(DOC, {"lookupOrder": {"latency_ms": 200, "idempotent": True}})
    assert sorted(table) == ["getOrder", "lookupOrder", "tree.put"]
    assert sorted(skipped) == ["GET /untitled: no operationId",
                               "POST /bulk (bulkLoad): its JSON body is a array, and params "
                               "are an object"]
    get = table["getOrder"]
    assert (get["method"], get["path"], get["idempotent"]) == ("GET", "/orders/{order_id}", True)
    assert get["description"] == "One order  by id"  # control characters are cleaned
    assert get["params"] == {"type": "object", "required": ["order_id"], "properties": {
        "order_id": {"type": "integer"},
        "fields": {"type": "array", "items": {"type": "string"}}}}
    look = table["lookupOrder"]
    assert look["query"] == ["dry"] and look["latency_ms"] == 200 and look["idempotent"] is True
    validate = compile_schema(look["params"])
    assert check(validate, {"customer": {"id": "c1"}, "dry": True}) is None
    assert check(validate, {"customer": {"id": ""}, "dry": True}) is not None  # via 2 $refs
    assert check(validate, {"customer": {"id": "c1"}}) is not None  # the required query param
    tree = compile_schema(table["tree.put"]["params"])  # recursive: kept as a $ref to $defs
    assert set(table["tree.put"]["params"]["$defs"]) == {"Node"}
    assert check(tree, {"children": [{"children": []}]}) is None
    assert check(tree, {"children": [{"children": 3}]}) is not None


def test_overrides_extend_the_table_and_bad_documents_are_refused() -> None:
    table, _ = capabilities(DOC, {"orders.audit": {"path": "/audit", "latency_ms": 50}})
    assert table["orders.audit"] == {"path": "/audit", "latency_ms": 50}
    with pytest.raises(ValueError, match="not an OpenAPI 3 document"):
        capabilities({"swagger": "2.0", "paths": {}})
    with pytest.raises(ValueError, match="no operation with an operationId"):
        capabilities({"openapi": "3.0.3", "paths": {"/x": {"get": {}}}})
    twice = copy.deepcopy(DOC)
    twice["paths"]["/tree"]["post"] = {"operationId": "getOrder"}
    with pytest.raises(ValueError, match="'getOrder' is used twice"):
        capabilities(twice)


@pytest.mark.parametrize("ref", ["https://example.com/schemas/customer.json",
                                 "customer.yaml#/Customer", "file:///etc/passwd",
                                 "#/paths/~1lookup"])
def test_a_reference_outside_the_components_is_refused(ref: str) -> None:
    doc = copy.deepcopy(DOC)
    doc["components"]["schemas"]["Customer"]["properties"]["id"] = {"$ref": ref}
    with pytest.raises(ValueError, match=r"\$ref") as err:
        capabilities(doc)
    assert ref in str(err.value)


async def test_an_agent_reads_its_capabilities_from_the_service() -> None:
    async with serving() as svc, Reach.start(heartbeat_interval=0.05) as reach:
        svc.openapi = DOC

        async def lookup(req: Seen) -> Any:
            return js(200, {"body": req.json(), "query": req.query})

        svc.routes["/lookup"] = lookup
        http = HttpAgent("orders", svc.url, {"lookupOrder": {"latency_ms": 300}},
                         openapi_url="/openapi.json")
        view = await reach.attach(http)
        assert sorted(view["capabilities"]) == ["order.get", "order.lookup", "tree.put"]
        assert {s.name: s.latency_ms for s in http.specs}["lookupOrder"] == 300
        assert http.describe()["openapi_url"] == svc.url + "/openapi.json"
        async with Client.connect(reach.url) as client:
            got = await client.call("lookupOrder", {"customer": {"id": "c1"}, "dry": True})
            assert got == {"body": {"customer": {"id": "c1"}}, "query": [["dry", "true"]]}
            with pytest.raises(InvalidParams):  # the schema behind two $refs, checked by Reach
                await client.call("order.lookup", {"customer": {}, "dry": True})
        assert len(svc.calls("/lookup")) == 1


async def test_a_document_with_a_remote_reference_is_refused_at_attach() -> None:
    async with serving() as svc, Reach.start(heartbeat_interval=0.05) as reach:
        doc = copy.deepcopy(DOC)
        doc["components"]["schemas"]["Node"] = {"$ref": "http://127.0.0.1:1/node.json"}
        svc.openapi = doc
        http = HttpAgent("orders", svc.url, openapi_url=svc.url + "/openapi.json")
        with pytest.raises(ValueError, match="points outside the document"):
            await reach.attach(http)
        assert http._session is None and reach.agents() == []
        assert [s.path for s in svc.seen] == ["/openapi.json"]  # nothing else was opened
