"""The architecture, checked: data flows one way through reach/ (DESIGN.md, "Layout").

Imports are read with ``ast`` from the source, every one of them, including those under
``if TYPE_CHECKING:`` and inside functions: a cycle hidden there is still a cycle to whoever
has to change the code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "reach"
MAX_LINES = 400
# What the pure core may never import: it takes `now` and touches no loop, socket or database.
IMPURE = ("asyncio", "websockets", "sqlalchemy", "sqlmodel", "httpx", "aiosqlite", "socket",
          "threading", "time", "gc")
# What else of reach the core may import: the error tree, the frame models it validates
# against, and the ports it names (interfaces only).
CORE_MAY_USE = ("reach.core", "reach.errors", "reach.wire.protocol", "reach.ports")
# Core modules allowed one impure import, each with the reason.
CORE_EXCEPTIONS = {
    ("reach.core.schema_bounds", "time"): "a validation's CPU budget reads this thread's "
                                          "CPU time (time.thread_time), not the clock",
    ("reach.core.schema_bounds", "gc"): "a full garbage collection inside a check is not its "
                                        "cost: the budget reads how many have run",
}


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules ``name`` imports (reach's own resolved to modules, others as written)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    # A package's __init__ names its lazily loaded exports for type checkers under
    # ``if TYPE_CHECKING:`` (PEP 562): nothing runs them, and they point down, never back.
    typing_only = {id(n) for block in ast.walk(tree) if path.name == "__init__.py"
                   and isinstance(block, ast.If) and isinstance(block.test, ast.Name)
                   and block.test.id == "TYPE_CHECKING"
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                out.add(full if full in known else module)
    out.discard(name)
    return out


def with_packages(targets: set[str]) -> set[str]:
    """``targets`` and every package above each: importing ``reach.x.y`` runs
    ``reach/__init__.py`` and ``reach/x/__init__.py`` first, so a package whose ``__init__``
    imports a module that imports anything under that package is a cycle, however it is
    spelled (``from reach.x.y import z``, ``from reach import z``)."""
    out = set(targets)
    for target in targets:
        parts = target.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {m for m in with_packages(imports(name, path, known)) if m in known} - {name}
            for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_inside_reach() -> None:
    assert cycles(graph()) == []


def test_a_cycle_through_a_package_init_is_seen() -> None:
    """``reach.adapters`` re-exporting ``HttpAgent`` from ``reach.adapters.http``, which
    imports ``reach.adapters.base``: importing the package runs the module that needs the
    package, a cycle the graph sees through the edge to each package above an import."""
    edges = {"p": {"p.http"}, "p.http": with_packages({"p.base"}) - {"p.http"}, "p.base": set()}
    assert cycles(edges) == [["p", "p.http"]]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_core_is_pure() -> None:
    known = modules()
    bad = {}
    for name, path in known.items():
        if not name.startswith("reach.core"):
            continue
        outside = {m for m in imports(name, path, known)
                   if (m.split(".")[0] in IMPURE
                       or (m.startswith("reach.") and not m.startswith(CORE_MAY_USE)))
                   and (name, m) not in CORE_EXCEPTIONS}
        if outside:
            bad[name] = sorted(outside)
    assert bad == {}


@pytest.mark.parametrize("layer,forbidden", [
    ("reach.core", ("reach.gateway", "reach.server", "reach.sdk", "reach.store", "reach.reach",
                    "reach.adapters")),
    ("reach.gateway", ("reach.server", "reach.sdk", "reach.store", "reach.reach", "websockets",
                       "sqlalchemy", "sqlmodel", "reach.adapters")),
    ("reach.store", ("reach.gateway", "reach.server", "reach.sdk", "reach.reach",
                     "reach.adapters")),
    ("reach.wire", ("reach.gateway", "reach.server", "reach.sdk", "reach.store", "reach.reach",
                    "reach.adapters")),
    ("reach.server", ("reach.sdk", "reach.store", "reach.reach", "reach.adapters")),
    ("reach.sdk", ("reach.gateway", "reach.server", "reach.store", "reach.reach",
                   "reach.adapters")),
    # The cluster's peer links are AgentLinks too; the holder's session lives in server/.
    ("reach.cluster", ("reach.gateway", "reach.server", "reach.sdk", "reach.store",
                       "reach.reach", "reach.adapters")),
    # Adapters are AgentLinks at the edge: they know the port and the wire, not the gateway.
    ("reach.adapters", ("reach.gateway", "reach.server", "reach.sdk", "reach.store",
                        "reach.reach")),
])
def test_layers_import_only_downwards(layer: str, forbidden: tuple[str, ...]) -> None:
    known = modules()
    bad = {name: sorted(m for m in imports(name, path, known) if m.startswith(forbidden))
           for name, path in known.items() if name.startswith(layer)}
    assert {k: v for k, v in bad.items() if v} == {}


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    # No exception list: a module past the limit is split by concept.
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
