# mypy: disable-error-code="no-untyped-call"
# (fastjsonschema's code generator, subclassed below, is not annotated)
"""Bounded code generation: fastjsonschema's generators with RE2 patterns, a linear
``uniqueItems`` and a step of the CPU budget (reach.core.schema_bounds) at the start of every
subschema, picked by the schema's draft."""

from __future__ import annotations

import json
from typing import Any, cast

from fastjsonschema.draft04 import CodeGeneratorDraft04
from fastjsonschema.draft06 import CodeGeneratorDraft06
from fastjsonschema.draft07 import CodeGeneratorDraft07
from fastjsonschema.draft2019 import CodeGeneratorDraft2019

from reach.core.schema_bounds import Run, SchemaError
from reach.core.schema_regex import Pattern

__all__ = ["Bounded", "generator_for"]


# --- uniqueItems ----------------------------------------------------------------------------


def _unique_items(items: list[Any], run: Run) -> bool:
    """Whether no two items are equal as JSON values (1 == 1.0, true != 1), in linear time.

    fastjsonschema puts the items in a set as they are; ints that collide on purpose
    (k * (2**61 - 1) all hash alike) make that quadratic. Keys here are text, hashed with the
    interpreter's randomised string hash; strings get their own set so "1" stays apart from 1.
    """
    texts: set[str] = set()
    others: set[str] = set()
    for index, item in enumerate(items):
        if not index % 4096:
            run.spend(4096)
        if isinstance(item, str):
            seen, key = texts, item
        else:
            seen, key = others, _json_key(item)
        if key in seen:
            return False
        seen.add(key)
    return True


def _json_key(item: Any) -> str:
    if item is True or item is False or item is None:
        return "true" if item is True else "false" if item is False else "null"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, float):
        return str(int(item)) if item.is_integer() else repr(item)
    key = json.dumps(item, sort_keys=True, separators=(",", ":"))
    if "." in key or "e" in key or "E" in key:  # maybe a float inside: 1.0 must equal 1
        key = json.dumps(json.loads(key, parse_float=_integral), sort_keys=True,
                         separators=(",", ":"))
    return "J" + key  # apart from the scalar keys above


def _integral(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() else value


# --- code generation ------------------------------------------------------------------------
# fastjsonschema has no hook for how it compiles patterns or checks uniqueItems, so these
# generators override the few methods that emit them (same generated lines, RE2 objects
# behind REGEX_PATTERNS) and count a step of the budget at the start of every subschema.


class Bounded(CodeGeneratorDraft04):
    @property
    def _node(self) -> dict[str, Any]:
        return cast("dict[str, Any]", self._definition)

    @property
    def global_state(self) -> dict[str, Any]:
        state: dict[str, Any] = super().global_state
        state["UNIQUE_ITEMS"] = _unique_items
        return state

    def generate_func_code_block(self, definition: Any, variable: str, variable_name: str,
                                 clear_variables: bool = False) -> int:
        # optimize=False: fastjsonschema merges a line equal to the previous one.
        self.l("custom_formats.spend()", optimize=False)
        count: int = super().generate_func_code_block(definition, variable, variable_name,
                                                      clear_variables)
        return count

    def exc(self, msg: str, *args: Any, append_to_msg: str | None = None,
            rule: str | None = None) -> None:
        # Upstream writes the value, path and whole subschema (every $ref target inlined, and
        # refs inside const/enum data resolved) into each raise: generated code that grows with
        # refs x target size, and most of the compile time. `check` only needs the message.
        arg = '"' + msg + '"'
        if append_to_msg:
            arg += " + (" + append_to_msg + ")"
        node = self._definition
        rule_value = node.get(rule) if isinstance(node, dict) and rule else None
        # name: where in the value it failed ("data.items[1].q"), for ``violation``'s path.
        self.l("raise JsonSchemaValueException(" + arg + ', name="{name}")', *args,
               definition_rule=self.e(rule_value))

    def generate_pattern(self) -> None:
        pattern = self._node["pattern"]
        self._compile_regexps[pattern] = Pattern(pattern)
        with self.l("if isinstance({variable}, str):"):
            with self.l("if not REGEX_PATTERNS[{}].search({variable}):", repr(pattern)):
                self.exc("{name} must match pattern {}", self.e(pattern), rule="pattern")

    def generate_pattern_properties(self) -> None:
        patterns = self._node["patternProperties"]
        if not isinstance(patterns, dict):
            raise SchemaError("patternProperties must be an object")
        for pattern in patterns:
            self._compile_regexps[pattern] = Pattern(pattern)
        self.create_variable_is_dict()
        with self.l("if {variable}_is_dict:"):
            self.create_variable_keys()
            if not patterns:
                return
            with self.l("for {variable}_key, {variable}_val in {variable}.items():"):
                self.l("custom_formats.spend()", optimize=False)
                for pattern, definition in patterns.items():
                    with self.l("if REGEX_PATTERNS[{}].search({variable}_key):", repr(pattern)):
                        with self.l("if {variable}_key in {variable}_keys:"):
                            self.l("{variable}_keys.remove({variable}_key)")
                        self.generate_func_code_block(
                            definition, f"{self._variable}_val",
                            f"{self._variable_name}.{{{self._variable}_key}}",
                            clear_variables=True)

    def generate_required(self) -> None:
        # Upstream tests required names against patternProperties with Python `re` here (at
        # compile time) when additionalProperties is false; do that test with RE2 instead and
        # hide additionalProperties from it.
        definition = self._node
        required, patterns = definition.get("required"), definition.get("patternProperties")
        if (not definition.get("additionalProperties", True) and isinstance(required, list)
                and isinstance(patterns, dict) and patterns):
            known = definition.get("properties", {})
            compiled = [Pattern(p) for p in patterns]
            impossible = [name for name in required if isinstance(name, str)
                          and name not in known and not any(p.search(name) for p in compiled)]
            if impossible:
                raise SchemaError(f"properties {impossible} are required but not allowed")
            self._definition = {k: v for k, v in definition.items()
                                if k != "additionalProperties"}
        try:
            super().generate_required()
        finally:
            self._definition = definition

    def generate_unique_items(self) -> None:
        if not self._node["uniqueItems"]:
            return
        self.create_variable_is_list()
        with self.l("if {variable}_is_list:"):
            with self.l("if not UNIQUE_ITEMS({variable}, custom_formats):"):
                self.exc("{name} must contain unique items", rule="uniqueItems")


class _Draft04(Bounded):
    pass


class _Draft06(Bounded, CodeGeneratorDraft06):
    pass


class _Draft07(Bounded, CodeGeneratorDraft07):
    pass


class _Draft2019(Bounded, CodeGeneratorDraft2019):
    pass


def generator_for(schema: Any) -> type[Bounded]:
    """The draft fastjsonschema would pick for ``schema`` (by ``$schema``; 2019-09 default)."""
    version = schema.get("$schema", "") if isinstance(schema, dict) else ""
    if not isinstance(version, str):
        version = ""
    if "draft-04" in version:
        return _Draft04
    if "draft-06" in version:
        return _Draft06
    if "draft-07" in version:
        return _Draft07
    return _Draft2019
