"""Mutation testing of ``reach/core/``: does a small change to the code make a test fail?

    python tools/mutate.py [module ...] [--jobs 2] [--full] [--list] [--json PATH]
                           [--lines A-B]     # only the mutants on lines A..B (a rerun)
    make mutate                      # every module of reach/core/, the 95 % gate

One mutant is one change at one site, made with ``ast`` (the operators are ``OPERATORS``
below): comparison and arithmetic swaps, augmented assignments swapped, ``and``/``or``,
``not x`` → ``x``, constants moved, ``continue``/``break``, ``return x`` → ``return None``, a
statement deleted inside a function, an ``if`` made always true or always false. Docstrings,
annotations, ``__all__``, logging calls and lines carrying ``# pragma: no mutate — reason`` are
left alone. A mutant's id is stable while its line does not move:
``module:line:operator:original→replacement``.

Each worker copies ``reach/`` into a temporary directory once; per mutant it writes the mutated
module there and runs the module's mapped unit tests (``tools/mutants.toml``) with that copy
first on the path, so it shadows the editable install (a canary mutant checks it does, before
anything is counted). The worker imports pytest, its plugins and reach's third-party
dependencies once and forks a child per mutant, so a mutant costs its tests, not an interpreter
start. A failing test or a timeout kills the mutant (a timeout is an observable change).
The timeout is CPU time (three times the unchanged module's tests, plus 5 s), enforced with
``RLIMIT_CPU``, so a loaded machine does not turn slow survivors into kills; a mutant that hangs
without spending CPU is stopped at ``WALL_FACTOR`` times that in wall-clock time.
A mutant on a line the mapped tests never run survives without being run.
The modules' text is read once, when the run starts: reach/core may be edited while it goes
on (the tests may too, but a run then measures a mix of old and new tests).

The score is killed / (mutants − declared equivalents): equivalents are left out of the
denominator. Equivalent mutants are declared in ``tools/mutants.toml`` with a reason; a
declared one that gets killed, or no longer exists, is reported so the list stays honest.
``--full`` runs the survivors again against the whole suite (slow: minutes a mutant).
Hypothesis runs derandomized, without its example database, so a run is reproducible.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import math
import multiprocessing
import multiprocessing.pool
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import equivalents  # tools/, beside this script

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "reach" / "core"
CONFIG = ROOT / "tools" / "mutants.toml"
GATE = 95.0
WALL_FACTOR = 6  # wall-clock limit of a mutant's run, as a multiple of its CPU-time limit
PRAGMA = "pragma: no mutate"
LOGGERS = {"log", "logger", "logging", "_log", "LOG"}

# ----------------------------------------------------------------------------- operators

CMP_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
BIN_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
}
SYMBOL: dict[type[ast.AST], str] = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
    ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not", ast.Add: "+",
    ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.And: "and",
    ast.Or: "or",
}
OPERATORS = ("cmp", "arith", "aug", "bool", "not", "const", "loop", "return", "delete", "if")


@dataclass(frozen=True, slots=True)
class Site:
    """One possible mutant, found by walking the module (the walk is deterministic)."""

    line: int
    op: str
    original: str
    replacement: str
    stmt_lines: tuple[int, int]  # the enclosing statement: covered if any of its lines ran
    apply: Callable[[], None] = field(compare=False, repr=False)


def _short(node: ast.AST, limit: int = 48) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_logging(node: ast.AST) -> bool:
    call = node.value if isinstance(node, ast.Expr) else node
    if isinstance(call, ast.Await):
        call = call.value
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    while isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Name) and func.value.id in LOGGERS:
            return True
        func = func.value
    return False


def _is_docstring(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str))


class _Walker:
    """Collects every site of one freshly parsed tree; ``Site.apply`` edits that tree."""

    def __init__(self, tree: ast.Module, lines: list[str]) -> None:
        self.tree = tree
        self.lines = lines
        self.sites: list[Site] = []
        self.stmt: tuple[int, int] = (0, 0)
        self.in_function = 0
        self._body(tree.body)

    def _skip_line(self, line: int) -> bool:
        return 0 < line <= len(self.lines) and PRAGMA in self.lines[line - 1]

    def _add(self, node: ast.AST, op: str, original: str, replacement: str,
             apply: Callable[[], None]) -> None:
        line = getattr(node, "lineno", self.stmt[0])
        if not (self._skip_line(line) or self._skip_line(self.stmt[0])):
            self.sites.append(Site(line, op, original, replacement, self.stmt, apply))

    # --- statements

    def _body(self, body: list[ast.stmt]) -> None:
        for i, stmt in enumerate(body):
            self._stmt(body, i, stmt)

    def _stmt(self, body: list[ast.stmt], i: int, stmt: ast.stmt) -> None:
        if _is_docstring(stmt) or _is_logging(stmt):
            return
        if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Pass)):
            return
        if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in ("__all__", "__slots__") for t in stmt.targets):
            return
        if isinstance(stmt, ast.If) and _short(stmt.test) == "TYPE_CHECKING":
            return
        outer = self.stmt
        self.stmt = (stmt.lineno, stmt.end_lineno or stmt.lineno)
        try:
            self._stmt_sites(body, i, stmt)
            self._children(stmt)
        finally:
            self.stmt = outer

    def _stmt_sites(self, body: list[ast.stmt], i: int, stmt: ast.stmt) -> None:
        def replace(new: ast.stmt) -> Callable[[], None]:
            def apply() -> None:
                body[i] = ast.copy_location(new, stmt)
            return apply

        if isinstance(stmt, (ast.Continue, ast.Break)):
            other: ast.stmt = ast.Break() if isinstance(stmt, ast.Continue) else ast.Continue()
            self._add(stmt, "loop", _short(stmt), _short(other), replace(other))
        if isinstance(stmt, ast.Return) and stmt.value is not None and not (
                isinstance(stmt.value, ast.Constant) and stmt.value.value is None):
            self._add(stmt, "return", _short(stmt), "return None",
                      replace(ast.Return(value=ast.Constant(None))))
        if isinstance(stmt, ast.AugAssign) and type(stmt.op) in BIN_SWAP:
            swapped = BIN_SWAP[type(stmt.op)]

            def swap(node: ast.AugAssign = stmt, new: type[ast.operator] = swapped) -> None:
                node.op = new()
            self._add(stmt, "aug", SYMBOL[type(stmt.op)] + "=", SYMBOL[swapped] + "=", swap)
        deletable = isinstance(stmt, (ast.Assign, ast.AugAssign)) or (
            isinstance(stmt, ast.AnnAssign) and stmt.value is not None) or (
            isinstance(stmt, ast.Expr) and isinstance(
                stmt.value.value if isinstance(stmt.value, ast.Await) else stmt.value, ast.Call))
        if deletable and self.in_function:
            self._add(stmt, "delete", _short(stmt), "pass", replace(ast.Pass()))
        if isinstance(stmt, ast.If):
            for value in (True, False):
                def cond(node: ast.If = stmt, v: bool = value) -> None:
                    node.test = ast.copy_location(ast.Constant(v), node.test)
                self._add(stmt, "if", "if " + _short(stmt.test), str(value), cond)

    def _children(self, stmt: ast.stmt) -> None:
        for name, value in ast.iter_fields(stmt):
            if name in ("annotation", "returns", "type_comment", "decorator_list"):
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and name == "args":
                self._args(value)
                continue
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                nested = isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
                self.in_function += nested
                self._body(value)
                self.in_function -= nested
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        self._expr(item)
            elif isinstance(value, ast.AST):
                self._expr(value)

    def _args(self, args: ast.arguments) -> None:
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self._expr(default)

    # --- expressions

    def _expr(self, node: ast.AST) -> None:
        if isinstance(node, ast.JoinedStr) or _is_logging(node):
            return
        if isinstance(node, (ast.excepthandler, ast.match_case, ast.comprehension,
                             ast.keyword, ast.withitem, ast.arguments, ast.arg)):
            self._generic(node)
            return
        if isinstance(node, ast.Compare):
            for k, op in enumerate(node.ops):
                if type(op) in CMP_SWAP:
                    new = CMP_SWAP[type(op)]

                    def cmp(n: ast.Compare = node, j: int = k,
                            t: type[ast.cmpop] = new) -> None:
                        n.ops[j] = t()
                    self._add(node, "cmp", SYMBOL[type(op)], SYMBOL[new], cmp)
        elif isinstance(node, ast.BinOp) and type(node.op) in BIN_SWAP:
            new_op = BIN_SWAP[type(node.op)]

            def arith(n: ast.BinOp = node, t: type[ast.operator] = new_op) -> None:
                n.op = t()
            self._add(node, "arith", SYMBOL[type(node.op)], SYMBOL[new_op], arith)
        elif isinstance(node, ast.BoolOp):
            other = ast.Or if isinstance(node.op, ast.And) else ast.And

            def boolean(n: ast.BoolOp = node, t: type[ast.boolop] = other) -> None:
                n.op = t()
            self._add(node, "bool", SYMBOL[type(node.op)], SYMBOL[other], boolean)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self._add(node, "not", _short(node), _short(node.operand),
                      self._replacer(node, node.operand))
        elif isinstance(node, ast.Constant):
            self._constant(node)
        self._generic(node)

    def _generic(self, node: ast.AST) -> None:
        for name, value in ast.iter_fields(node):
            if name == "annotation":
                continue
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.stmt):
                        self._body(value)
                        break
                    if isinstance(item, ast.AST):
                        self._expr(item)
            elif isinstance(value, ast.AST):
                self._expr(value)

    def _constant(self, node: ast.Constant) -> None:
        value = node.value
        new: object
        if isinstance(value, bool):
            new = not value
        elif isinstance(value, int):
            new = value + 1
        elif isinstance(value, float):
            new = value * 2 if value else 1.0
        else:
            return

        def const(n: ast.Constant = node, v: object = new) -> None:
            n.value = v
        self._add(node, "const", repr(value), repr(new), const)

    def _replacer(self, node: ast.AST, new: ast.AST) -> Callable[[], None]:
        """Replace ``node`` by ``new`` wherever its parent holds it (found when applied)."""
        def apply() -> None:
            for parent in ast.walk(self.tree):
                for name, value in ast.iter_fields(parent):
                    if value is node:
                        setattr(parent, name, new)
                        return
                    if isinstance(value, list):
                        for j, item in enumerate(value):
                            if item is node:
                                value[j] = new
                                return
        return apply


def sites(source: str) -> tuple[ast.Module, list[Site]]:
    tree = ast.parse(source)
    return tree, _Walker(tree, source.splitlines()).sites


@dataclass(slots=True)
class Mutant:
    module: str
    index: int
    id: str
    line: int
    op: str
    stmt_lines: tuple[int, int]
    status: str = "pending"  # killed|timeout|survived|uncovered|equivalent|error|skipped
    seconds: float = 0.0
    cpu: float = 0.0


_SOURCES: dict[str, str] = {}  # filled by the main process before the workers fork


def source_of(module: str) -> str:
    """The module's text as the run found it: editing reach/core while a run goes on (say, to
    fix what its first survivors showed) must not shift the mutants of the jobs still queued,
    whose indexes count the sites of this text."""
    if module not in _SOURCES:
        _SOURCES[module] = (CORE / f"{module}.py").read_text()
    return _SOURCES[module]


def mutants_of(module: str) -> list[Mutant]:
    source = source_of(module)
    _, found = sites(source)
    out: list[Mutant] = []
    seen: dict[str, int] = {}
    for i, s in enumerate(found):
        base = f"{module}:{s.line}:{s.op}:{s.original}→{s.replacement}"
        seen[base] = seen.get(base, 0) + 1
        ident = base if seen[base] == 1 else f"{base}#{seen[base]}"
        out.append(Mutant(module, i, ident, s.line, s.op, s.stmt_lines))
    return out


def mutated_source(module: str, index: int) -> str:
    tree, found = sites(source_of(module))
    found[index].apply()
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def plain_source(module: str) -> str:
    """The module round-tripped through ``ast`` unchanged: what the mutants differ from."""
    return ast.unparse(ast.parse(source_of(module))) + "\n"


# ----------------------------------------------------------------------------- workers

PLUGIN = '''"""Loaded by tools/mutate.py: reproducible Hypothesis, no example database."""
from hypothesis import settings
settings.register_profile("mutate", database=None, derandomize=True, print_blob=False)
settings.load_profile("mutate")
'''


@dataclass(slots=True)
class Job:
    module: str
    index: int  # -1: the unchanged module; -2: the canary
    tests: list[str]
    timeout: float  # CPU seconds
    coverage: bool = False


@dataclass(slots=True)
class Outcome:
    module: str
    index: int
    code: int  # pytest's exit code; -9 on timeout
    seconds: float
    lines: list[int] = field(default_factory=list)
    coverage: bool = False
    cpu: float = 0.0


_COPY: Path | None = None
_BASE: Path | None = None


def _preload() -> None:
    """Import pytest, its plugins and reach's third-party dependencies once, so that every
    forked child only imports reach itself (afresh, from its worker's copy). reach is not
    imported here: its SQLModel tables would be defined twice. (The plugins' asserts are then
    not rewritten by pytest: ``-W`` in ``_child`` silences that warning, which is harmless.)"""
    import subprocess
    from importlib.metadata import entry_points

    import pytest  # noqa: F401

    for ep in entry_points(group="pytest11"):
        if not ep.value.startswith("reach"):
            with contextlib.suppress(Exception):
                ep.load()
    probe = ("import sys; before = set(sys.modules); import reach.testing; "
             "print('\\n'.join(sorted(set(sys.modules) - before)))")
    names = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                           cwd=ROOT, check=False).stdout.split()
    import importlib

    for name in names:
        if name.split(".")[0] not in ("reach", "__main__"):
            with contextlib.suppress(Exception):
                importlib.import_module(name)
    assert not any(m == "reach" or m.startswith("reach.") for m in sys.modules)


def _init_worker(base: str) -> None:
    global _COPY, _BASE
    _BASE = Path(base)
    _COPY = _BASE / f"w{os.getpid()}"
    shutil.copytree(ROOT / "reach", _COPY / "reach",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (_COPY / "_mutate_plugin.py").write_text(PLUGIN)


def _write(module: str, text: str) -> None:
    assert _COPY is not None
    target = _COPY / "reach" / "core" / f"{module}.py"
    target.write_text(text)
    for pyc in (target.parent / "__pycache__").glob(f"{module}.*.pyc"):
        pyc.unlink()


def _child(job: Job) -> int:
    assert _COPY is not None
    os.setpgid(0, 0)
    limit = math.ceil(job.timeout)  # the kernel sends SIGXCPU past it
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 5))
    for name in [m for m in sys.modules if m == "reach" or m.startswith("reach.")]:
        del sys.modules[name]
    sys.path.insert(0, str(_COPY))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_COPY), os.environ.get("PYTHONPATH")) if p)
    os.environ["PYTHONSAFEPATH"] = "1"
    if not os.environ.get("MUTATE_VERBOSE"):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    import importlib

    import pytest

    importlib.invalidate_caches()
    # -o timeout=0: pytest-timeout's per-test limit is wall-clock time (a loaded machine
    # would fail tests for any mutant); the CPU-time limit above stands in for it.
    args = ["-x", "-q", "-p", "no:cacheprovider", "-p", "_mutate_plugin", "-o", "timeout=0",
            "-W", "ignore::pytest.PytestAssertRewriteWarning", *job.tests]
    if not job.coverage:
        return int(pytest.main(args))
    import coverage

    target = str(_COPY / "reach" / "core" / f"{job.module}.py")
    cov = coverage.Coverage(data_file=None, include=[target], branch=False,
                            config_file=False)
    cov.start()
    code = int(pytest.main(args))
    cov.stop()
    lines = sorted(cov.get_data().lines(target) or [])
    (_COPY / f"lines-{job.module}.json").write_text(json.dumps(lines))
    return code


def run_job(job: Job) -> Outcome:
    assert _COPY is not None
    if job.index == -2:
        text = "raise RuntimeError('mutate canary: the copy shadows the install')\n"
    elif job.index == -1 and job.coverage:  # lines as they are numbered in the module
        text = source_of(job.module)
    elif job.index == -1:
        text = plain_source(job.module)
    else:
        text = mutated_source(job.module, job.index)
    _write(job.module, text)
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child never returns from here
        code = 3
        try:
            code = _child(job)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)
    code = -9
    while time.monotonic() - start < job.timeout * WALL_FACTOR:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            if code == -signal.SIGXCPU:  # past its CPU-time limit
                code = -9
            break
        time.sleep(0.02)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        _, _, usage = os.wait4(pid, 0)
    seconds = time.monotonic() - start
    cpu = usage.ru_utime + usage.ru_stime
    _write(job.module, source_of(job.module))
    lines: list[int] = []
    if job.coverage:
        path = _COPY / f"lines-{job.module}.json"
        if path.exists():
            lines = json.loads(path.read_text())
            path.unlink()
    return Outcome(job.module, job.index, code, seconds, lines, job.coverage, cpu)


# ----------------------------------------------------------------------------- config, report

@dataclass(slots=True)
class ModuleConfig:
    tests: list[str]
    equivalent: dict[str, str]
    texts: dict[str, str] = field(default_factory=dict)  # id: the source line it was declared on
    moved: dict[str, str] = field(default_factory=dict)  # old id: new id (equivalents.follow)


def load_config(path: Path = CONFIG) -> dict[str, ModuleConfig]:
    data = tomllib.loads(path.read_text()) if path.exists() else {}
    out: dict[str, ModuleConfig] = {}
    for name, entry in data.get("module", {}).items():
        equivalent = {e["id"]: e["reason"] for e in entry.get("equivalent", [])}
        for ident, reason in equivalent.items():
            if not reason.strip():
                raise SystemExit(f"{path}: equivalent {ident} needs a reason")
        texts = {e["id"]: e["text"] for e in entry.get("equivalent", []) if "text" in e}
        out[name] = ModuleConfig(list(entry.get("tests", [])), equivalent, texts)
    return out


def follow_moves(config: dict[str, ModuleConfig], found: dict[str, list[Mutant]]) -> None:
    """Re-key each module's declared equivalents whose line moved (tools/equivalents.py)."""
    for m, mutants in found.items():
        conf = config.get(m)
        if conf is None:
            continue
        lines = source_of(m).splitlines()
        conf.moved = equivalents.follow(conf.equivalent, conf.texts,
                                        ((mu.id, mu.line) for mu in mutants), lines)
        conf.equivalent = {conf.moved.get(k, k): v for k, v in conf.equivalent.items()}


def rebase(config: dict[str, ModuleConfig], found: dict[str, list[Mutant]]) -> int:
    """Write the moved ids, and every existing equivalent's source text, into CONFIG."""
    moved: dict[str, str] = {}
    texts: dict[str, str] = {}
    for m, mutants in found.items():
        conf = config.get(m)
        if conf is None:
            continue
        moved.update(conf.moved)
        lines = source_of(m).splitlines()
        texts.update({mu.id: lines[mu.line - 1].strip() for mu in mutants
                      if mu.id in conf.equivalent})
    changed = equivalents.rewrite(CONFIG, moved, texts)
    for old, new in sorted(moved.items()):
        print(f"moved: {old} → {new}")
    print(f"{CONFIG.name}: {changed} entries rewritten ({len(moved)} moved)")
    return 0


def all_modules() -> list[str]:
    return sorted(p.stem for p in CORE.glob("*.py") if p.stem != "__init__")


def _pool(jobs: int, base: str) -> multiprocessing.pool.Pool:
    ctx = multiprocessing.get_context("fork")
    return ctx.Pool(jobs, initializer=_init_worker, initargs=(base,))


def _line_range(text: str) -> range:
    lo, _, hi = text.partition("-")
    try:
        return range(int(lo), int(hi or lo) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a line range (A-B): {text!r}") from None


def _score(killed: int, total: int) -> float:
    return 100.0 * killed / total if total else 100.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules of reach/core (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--full", action="store_true",
                        help="run the survivors again against the whole suite")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--json", type=Path, help="write every mutant's outcome here")
    parser.add_argument("--gate", type=float, default=GATE, help="minimum score, percent")
    parser.add_argument("--rebase", action="store_true",
                        help="write declared equivalents whose line moved under their new ids, "
                             "and each entry's source text, into mutants.toml; run nothing")
    parser.add_argument("--lines", type=_line_range, metavar="A-B",
                        help="only the mutants on lines A to B of each module: a quick rerun "
                             "after new tests; the score then covers those lines only")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    config = load_config()
    modules = [Path(m).stem for m in args.modules] or all_modules()
    for m in modules:
        if not (CORE / f"{m}.py").exists():
            parser.error(f"no module reach/core/{m}.py")
    found = {m: mutants_of(m) for m in modules}
    follow_moves(config, found)
    if args.rebase:
        return rebase(config, found)
    if args.list:
        for m in modules:
            for mutant in found[m]:
                print(mutant.id)
        return 0
    missing = [m for m in modules if not config.get(m, ModuleConfig([], {})).tests]
    if missing:
        parser.error(f"no tests mapped in {CONFIG.name} for: {', '.join(missing)}")

    sys.dont_write_bytecode = False
    _preload()
    base = tempfile.mkdtemp(prefix="reach-mutate-")
    started = time.monotonic()
    try:
        with _pool(args.jobs, base) as pool:
            # 1. Sanity: the canary must fail (the copy shadows the install), the unchanged
            #    module must pass; its run measures the time budget and which lines run.
            first = modules[0]
            canary = pool.apply(run_job, (Job(first, -2, config[first].tests, 120.0),))
            if canary.code in (0, 4, 5):
                print("mutate: the canary mutant survived: the temporary copy does not shadow "
                      "the installed package; nothing would be measured", file=sys.stderr)
                return 2
            checks = [Job(m, -1, config[m].tests, 600.0, coverage=c)
                      for m in modules for c in (True, False)]
            plain: dict[str, Outcome] = {}
            took: dict[str, float] = {}  # CPU s of the unchanged module's tests (no coverage)
            broken: set[str] = set()
            for o in pool.imap_unordered(run_job, checks):
                if o.code != 0:
                    what = "" if o.coverage else " as ast.unparse writes it"
                    print(f"mutate: {o.module}'s mapped tests fail on the unchanged module{what}"
                          f" (pytest exit {o.code}): {o.module} is not measured; fix them "
                          f"first", file=sys.stderr)
                    broken.add(o.module)
                if o.coverage:
                    plain[o.module] = o
                else:
                    took[o.module] = o.cpu
            modules = [m for m in modules if m not in broken]
            if not modules:
                return 2
            # 2. The mutants on lines the tests run.
            jobs: list[Job] = []
            for m in modules:
                ran = set(plain[m].lines)
                timeout = max(10.0, 3 * took[m] + 5)
                for mutant in found[m]:
                    lo, hi = mutant.stmt_lines
                    if args.lines and mutant.line not in args.lines:
                        mutant.status = "skipped"
                    elif ran.isdisjoint(range(lo, hi + 1)):
                        mutant.status = "uncovered"
                    else:
                        jobs.append(Job(m, mutant.index, config[m].tests, timeout))
            total = len(jobs)
            for n, out in enumerate(pool.imap_unordered(run_job, jobs), 1):
                mutant = found[out.module][out.index]
                mutant.seconds, mutant.cpu = round(out.seconds, 2), round(out.cpu, 2)
                mutant.status = {0: "survived", -9: "timeout", 1: "killed", 2: "killed",
                                 3: "killed"}.get(out.code, "error")
                if sys.stderr.isatty():
                    print(f"\r{n}/{total} mutants run", end="", file=sys.stderr, flush=True)
                if args.json:  # as they come, so an interrupted run still tells something
                    with args.json.with_suffix(".partial").open("a") as partial:
                        partial.write(json.dumps(asdict(mutant), ensure_ascii=False) + "\n")
            if sys.stderr.isatty():
                print(file=sys.stderr)
            # 3. On request, the survivors against the whole suite.
            if args.full:
                again = [Job(m.module, m.index, ["tests"], 900.0)
                         for ms in found.values() for m in ms
                         if m.status in ("survived", "uncovered")
                         and m.id not in config[m.module].equivalent]
                for out in pool.imap_unordered(run_job, again):
                    mutant = found[out.module][out.index]
                    if out.code in (-9, 1, 2, 3):
                        mutant.status = "killed-by-suite"
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return report(modules, found, config, args, time.monotonic() - started)


def report(modules: list[str], found: dict[str, list[Mutant]], config: dict[str, ModuleConfig],
           args: argparse.Namespace, seconds: float) -> int:
    killed_states = ("killed", "timeout", "killed-by-suite")
    rows: list[tuple[str, int, int, int, int]] = []
    left: list[Mutant] = []
    notes: list[str] = []
    for m in modules:
        equivalent = config[m].equivalent
        ids = {mu.id for mu in found[m]}
        for old, new in sorted(config[m].moved.items()):
            notes.append(f"  moved: {old} → {new} (counted there; --rebase writes it)")
        for ident in equivalent:
            if ident not in ids and not args.lines:
                notes.append(f"  stale: {ident} is declared equivalent but no longer exists "
                             f"(no unique line with its text)")
        killed = eq = 0
        run = [mu for mu in found[m] if mu.status != "skipped"]
        for mu in run:
            if mu.id in equivalent:
                if mu.status in killed_states:
                    notes.append(f"  killed: {mu.id} is declared equivalent but a test kills it")
                    killed += 1
                else:
                    mu.status = "equivalent"
                    eq += 1
            elif mu.status in killed_states:
                killed += 1
            else:
                left.append(mu)
        rows.append((m, len(run), eq, killed, len(run) - eq))
    width = max(len(r[0]) for r in rows + [("TOTAL", 0, 0, 0, 0)])
    print(f"{'module':<{width}}  mutants  equivalent  killed/counted   score")
    for name, n, eq, killed, counted in rows:
        print(f"{name:<{width}}  {n:7d}  {eq:10d}  {killed:6d}/{counted:<7d}  "
              f"{_score(killed, counted):5.1f} %")
    tn, teq, tk, tc = (sum(r[i] for r in rows) for i in (1, 2, 3, 4))
    score = _score(tk, tc)
    print(f"{'TOTAL':<{width}}  {tn:7d}  {teq:10d}  {tk:6d}/{tc:<7d}  {score:5.1f} %")
    print(f"(score = killed / (mutants − equivalent); {seconds:.0f} s)")
    if left:
        print(f"\nsurvivors not declared equivalent ({len(left)}):")
        for mu in left:
            source = source_of(mu.module).splitlines()[mu.line - 1].strip()
            tag = "" if mu.status == "survived" else f" [{mu.status}]"
            print(f"  {mu.id}{tag}\n      {source}")
    if notes:
        print("\n" + "\n".join(notes))
    if args.json:
        args.json.write_text(json.dumps(
            [asdict(mu) for m in modules for mu in found[m] if mu.status != "skipped"],
            indent=1, ensure_ascii=False))
    if score < args.gate:
        print(f"\nmutation score {score:.1f} % is below the gate of {args.gate:.0f} %")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
