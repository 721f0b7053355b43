"""Names a package loads on first use (PEP 562), so that importing it, or any module under it
(which runs the package's ``__init__`` first), does not run the modules those names live in:
an agent's process importing ``reach.Agent`` does not load the coordinator, and a module under
``reach.adapters`` does not run the other adapters."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any


def exports(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: name → the module that defines it (absolute,
    or relative to ``package`` when it starts with a dot). A name, once loaded, becomes a plain
    attribute of the package."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(home if not home.startswith(".") else package + home),
                        name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
