"""``make demo`` installs only what the demo needs (issue 29 item 5): it installed every dev
dependency (celery, redis, mypy, the benches' peers…) before the first picture. Now it has its
own stamp installing the package alone (``pip install -e .``); ``make test`` keeps '.[dev]'.
And the demo really runs on the package's own dependencies: run with every dev-only module
made unimportable, it still ends with its dead letter replayed."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def dry_run(target: str, venv: Path) -> list[str]:
    # (--no-print-directory: under `make test` the outer make's MAKEFLAGS make this one say
    # "Entering/Leaving directory" around its steps)
    done = subprocess.run(["make", "--no-print-directory", "-n", target, f"VENV={venv}"],
                          cwd=REPO, capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_demo_installs_the_package_alone_and_make_test_the_dev_tools(
        tmp_path: Path) -> None:
    venv = tmp_path / "venv"  # not there: make shows every step it would take
    demo = [line for line in dry_run("demo", venv) if "pip install" in line]
    assert demo[-1] == f"{venv}/bin/python -m pip install --quiet -e ."
    assert not any("[dev]" in line for line in demo)
    assert dry_run("demo", venv)[-1] == f"{venv}/bin/reach demo"
    test = [line for line in dry_run("test", venv) if "pip install" in line]
    assert test[-1] == f"{venv}/bin/python -m pip install --quiet -e '.[dev]'"


BLOCKER = """
import importlib.abc, sys
DEV = set(sys.argv.pop(1).split(","))
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in DEV:
            raise ImportError(f"{name} is a dev dependency, not installed by make demo")
        return None
sys.meta_path.insert(0, Block())
from reach.cli import main
sys.exit(main(["demo", "--seconds", "0", "--plain"]))
"""


def test_the_demo_runs_without_any_dev_dependency(tmp_path: Path) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    dev = {"pytest", "hypothesis", "mypy", "ruff", "coverage", "respx", "schemathesis",
           "celery", "redis", "nats", "psycopg", "asyncpg", "nbclient", "ipykernel"}
    core = " ".join(project["dependencies"])
    assert not any(name in core for name in dev)  # each really is dev-only
    done = subprocess.run([sys.executable, "-c", BLOCKER, ",".join(sorted(dev))], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "dead letters after the replay: 0" in done.stdout
