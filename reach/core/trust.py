"""Who may do what (pure): principals from tokens, call rules, serve rules, and who may read a task.

The model (docs/security.md):

- A **token** names a **principal**. With no tokens the coordinator runs in *open mode*: names
  are whatever peers say they are, so it binds to loopback only unless told ``insecure``.
- A principal connects as a caller under its own name, or registers as an agent under its own
  name (the principal ``"*"`` may use any name: a deployment-wide service token).
- **Call rules** (``permissions``, caller → patterns) say which capabilities a caller may use;
  **serve rules** (``serves``, agent → patterns) say which capabilities an agent may offer. With
  serve rules given, only the principals they list may register at all: a caller's token can
  no longer become an agent that captures other callers' traffic. Patterns are globs
  (``sales.*``) or scopes (``scope:read``); a ``"*"`` entry applies to principals without one.
- A task belongs to its caller: its status, result and idempotency key are visible to that
  caller and to the agents that ran it (and the admin feed), to nobody else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from reach.core.keys import scoped_key, unscoped_key
from reach.core.routing import Permissions
from reach.errors import Unauthorized

__all__ = ["Trust", "may_read", "scoped_key", "unscoped_key"]


@dataclass(frozen=True, slots=True)
class Trust:
    """The coordinator's rules; every check raises ``Unauthorized`` saying which rule refused."""

    tokens: Mapping[str, str] | None = None
    calls: Permissions = Permissions()
    serves: Permissions | None = None

    @classmethod
    def of(cls, tokens: Mapping[str, str] | None,
           permissions: Mapping[str, Iterable[str]] | None,
           serves: Mapping[str, Iterable[str]] | None) -> Trust:
        def rules(m: Mapping[str, Iterable[str]] | None) -> Permissions | None:
            return None if m is None else Permissions({k: tuple(v) for k, v in m.items()})

        return cls(None if tokens is None else dict(tokens),
                   rules(permissions) or Permissions(), rules(serves))

    @property
    def open(self) -> bool:
        """No tokens: names are not authenticated."""
        return self.tokens is None

    def authenticate(self, token: str | None, name: str, role: str) -> None:
        """A ``role`` ("agent" or "caller") connecting as ``name`` with ``token``."""
        if self.tokens is None:
            return
        principal = self.tokens.get(token or "")
        if principal is None and not token:
            # As the REST door says it: "not accepted" sent people looking for a typo in a
            # token they never passed.
            raise Unauthorized(f"no token given for {role} {name!r}: this coordinator needs "
                               f"one; pass the token issued for it (token=...)", role=role,
                               name=name)
        if principal is None:
            raise Unauthorized(f"token not accepted for {role} {name!r}; pass the token "
                               f"issued for it", role=role, name=name)
        if principal not in ("*", name):
            raise Unauthorized(f"this token belongs to {principal!r}, not {name!r}; connect "
                               f"as {principal!r} or use {name!r}'s token", role=role,
                               name=name)

    def check_serve(self, name: str, capabilities: Iterable[tuple[str, str]]) -> None:
        """May agent ``name`` offer these (capability, scope) pairs? Raises if not."""
        serves = self.serves
        if serves is None or serves.rules is None:
            return
        rules = serves.rules
        if name not in rules and "*" not in rules:
            raise Unauthorized(
                f"{name!r} may not register as an agent: no serve rule names it (serves= / "
                f"--serves-file); ask the operator to add one", agent=name, rule=None)
        patterns = list(rules.get(name, rules.get("*", ())))
        for capability, scope in capabilities:
            if not serves.allows(name, capability, scope):
                raise Unauthorized(
                    f"{name!r} may not serve {capability!r}: its serve rules allow only "
                    f"{patterns}", agent=name, capability=capability, rule=patterns)

    def may_take_over(self, *, old_instance: str | None, new_instance: str | None) -> bool:
        """A registration under a name whose agent is still connected: with tokens the token
        proved who it is; in open mode only the same process (``instance``) may come back."""
        if self.tokens is not None:
            return True
        return new_instance is not None and new_instance == old_instance


def may_read(reader: str, owner: str, agents: Iterable[str]) -> bool:
    """Whether ``reader`` may see a task of ``owner``'s that ``agents`` worked on."""
    return reader == owner or reader in agents
