"""The fallback a capability or a caller declares, as it crosses the wire (reach.core.fallback
says what it does): checked and normalized where it arrives, in ``register`` and ``submit``."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from reach.wire.bounds import MAX_TIMEOUT, Name

__all__ = ["Fallback", "fallback_of"]


class _LastGood(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    max_age_s: float = Field(default=600.0, gt=0, le=MAX_TIMEOUT)
    shared: bool = False  # honoured only in a read capability's own declaration


class _Fallback(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    value: Any = None
    last_good: _LastGood | None = None
    capability: Name | None = Field(default=None, min_length=1, max_length=200)


def fallback_of(declared: dict[str, Any] | None) -> dict[str, Any] | None:
    """A fallback declaration checked and normalized: exactly one of ``{"value": any}``,
    ``{"last_good": {"max_age_s", "shared"}}``, ``{"capability": name}`` (reach.core.fallback)."""
    if declared is None:
        return None
    found = _Fallback.model_validate(declared)
    kinds = [k for k in ("value", "last_good", "capability") if k in declared]
    if len(kinds) != 1:
        raise ValueError("a fallback is exactly one of 'value', 'last_good', 'capability'")
    if kinds[0] == "value":
        return {"value": found.value}
    if found.last_good is not None:
        return {"last_good": found.last_good.model_dump()}
    if found.capability is not None:
        return {"capability": found.capability}
    raise ValueError(f"fallback {kinds[0]!r} may not be null")


Fallback = Annotated[dict[str, Any] | None, AfterValidator(fallback_of)]
