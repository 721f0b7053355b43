"""Who may use which capability (pure): ``Permissions``, the rule routing checks per group of
agents (``Router.admit`` / ``pick``) and the trust settings build (reach.core.trust)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Permissions:
    """Which caller may use which capability: globs like ``sales.*`` or ``scope:read``.

    ``rules=None`` lets everyone use everything. A ``"*"`` entry applies to callers without one.
    """

    rules: Mapping[str, tuple[str, ...]] | None = None

    def allows(self, caller: str, capability: str, scope: str) -> bool:
        if self.rules is None:
            return True
        patterns = self.rules.get(caller, self.rules.get("*", ()))
        for pattern in patterns:
            if pattern.startswith("scope:"):
                if pattern[6:] in (scope, "*"):
                    return True
            elif fnmatch.fnmatchcase(capability, pattern):
                return True
        return False
