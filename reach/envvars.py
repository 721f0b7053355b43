"""``${NAME}`` in a configuration file's strings, from the environment (the ``--agents`` and
``--alerts`` files share it): ``$$`` is a literal ``$``, and an unset variable is an error of
the file's own kind, naming where it was used."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand(value: Any, env: Mapping[str, str], where: str, error: type[Exception]) -> Any:
    """``value`` with ``${NAME}`` replaced in every string of it (tables and lists included)."""
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            if m.group(1) is None:
                return "$"
            if m.group(1) not in env:
                raise error(f"{where}: environment variable {m.group(1)} is not "
                            f"set (used as ${{{m.group(1)}}})")
            return str(env[m.group(1)])
        return VAR.sub(sub, value)
    if isinstance(value, dict):
        return {k: expand(v, env, where, error) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v, env, where, error) for v in value]
    return value
