"""OpenAPI documents of the shapes the main tests do not show: what is left out without a word
(paths that are no paths, parameters that are no parameters), bodies in other media types,
descriptions, references through lists, and the documents refused (no paths, too many
operations, a reference loop, a reference to nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from reach.adapters import openapi
from reach.adapters.openapi import capabilities


def doc(paths: dict[str, Any], **components: Any) -> dict[str, Any]:
    return {"openapi": "3.0.3", "paths": paths, "components": components}


def test_a_document_without_paths_is_refused() -> None:
    with pytest.raises(ValueError, match="has no 'paths' object"):
        capabilities({"openapi": "3.1.0", "paths": []})


def test_entries_that_are_not_paths_and_parameters_that_are_not_parameters_are_ignored(
        ) -> None:
    table, skipped = capabilities(doc({
        "orders": {"get": {"operationId": "notAPath"}},  # no leading slash
        "/broken": "not an object",
        "/orders": {"get": {"operationId": "listOrders", "parameters": [
            "junk", {"in": "query"}, {"name": 7, "in": "query"},
            {"name": "status", "in": "query", "description": "only\x00 these",
             "schema": {"type": "string"}}]}},
    }))
    assert list(table) == ["listOrders"] and skipped == []
    assert table["listOrders"]["params"] == {"type": "object", "properties": {
        "status": {"type": "string", "description": "only  these"}}}


def test_the_json_body_is_found_among_other_media_types_and_others_alone_give_none() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    table, _ = capabilities(doc({
        "/mixed": {"post": {"operationId": "mixed", "requestBody": {"content": {
            "application/xml": {"schema": {"type": "string"}},
            "application/vnd.orders+json": {"schema": schema}}}}},
        "/form": {"post": {"operationId": "form", "requestBody": {"content": {
            "application/x-www-form-urlencoded": {"schema": schema}}}}},
    }))
    assert table["mixed"]["params"] == schema
    assert table["form"]["params"] == {"type": "object", "properties": {}}  # no JSON body


def test_a_parameter_may_point_into_a_list_elsewhere_in_the_document() -> None:
    shared = {"name": "order_id", "in": "path", "required": True, "schema": {"type": "integer"}}
    table, _ = capabilities(doc({
        "/orders/{order_id}": {"get": {"operationId": "getOrder", "parameters": [shared]},
                               "delete": {"operationId": "dropOrder", "parameters": [
                                   {"$ref": "#/paths/~1orders~1{order_id}/get/parameters/0"}]}},
    }))
    assert table["dropOrder"]["params"] == table["getOrder"]["params"] == {
        "type": "object", "required": ["order_id"],
        "properties": {"order_id": {"type": "integer"}}}


@pytest.mark.parametrize("ref,message", [
    ("#/components/parameters/Loop", r"GET /x: a chain of over 32 \$ref"),
    ("#/components/parameters/Missing", r"\$ref '#/components/parameters/Missing' points at "
                                        r"nothing in the document"),
    ("#/paths/~1x/get/parameters/9", "points at nothing"),
])
def test_references_that_loop_or_point_at_nothing_are_refused(ref: str, message: str) -> None:
    looped = doc({"/x": {"get": {"operationId": "x", "parameters": [{"$ref": ref}]}}},
                 parameters={"Loop": {"$ref": "#/components/parameters/Loop"}})
    with pytest.raises(ValueError, match=message):
        capabilities(looped)


def test_a_document_with_more_operations_than_one_agent_serves_is_refused() -> None:
    paths = {f"/op{i}": {"get": {"operationId": f"op{i}"}}
             for i in range(openapi.MAX_OPERATIONS + 1)}
    with pytest.raises(ValueError, match=f"has over {openapi.MAX_OPERATIONS} operations; "
                                         f"declare the ones this agent serves"):
        capabilities(doc(paths))
