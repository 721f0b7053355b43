"""README's pytest example, pasted into a new project (issue 14).

It failed there: pytest-asyncio's default strict mode does not run an unmarked ``async def``
test ("async def functions are not natively supported"), and warned about an unset fixture
loop scope. This test installs the package with pip into a new virtual environment (no
editable install, none of this repository's pytest settings) and runs the README's own code
blocks there: once with pytest-asyncio's defaults, once with the setting the README gives and
every warning turned into an error.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(300)  # a pip install from scratch: tens of seconds


def readme_blocks() -> tuple[str, str]:
    """The python and toml code blocks of README's pytest-plugin section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Test your own agents", 1)[1].split("\n## ", 1)[0]
    python = re.search(r"```python\n(.*?)```", section, re.S)
    toml = re.search(r"```toml\n(.*?)```", section, re.S)
    assert python and toml, "README's pytest section lost its code blocks"
    return python.group(1), toml.group(1)


def run(argv: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COVERAGE", "PYTHON", "PYTEST", "VIRTUAL_ENV"))}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with agent-reach installed by pip from this checkout."""
    where = tmp_path_factory.mktemp("fresh") / "venv"
    made = run([sys.executable, "-m", "venv", str(where)], cwd=where.parent)
    assert made.returncode == 0, made.stderr
    python = where / "bin" / "python"
    pip = run([str(python), "-m", "pip", "install", "-v", "--disable-pip-version-check",
               str(ROOT), "pytest", "pytest-asyncio"], cwd=where.parent)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    # issue 14: `license = { text = ... }` made setuptools warn three times during the build
    assert "SetuptoolsDeprecationWarning" not in pip.stdout + pip.stderr
    return python


def project(tmp_path: Path, pyproject: str | None) -> Path:
    example, _ = readme_blocks()
    (tmp_path / "test_planner.py").write_text(example)
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    return tmp_path


def test_the_readme_example_passes_with_pytest_asyncios_defaults(
        venv: Path, tmp_path: Path) -> None:
    where = project(tmp_path, pyproject=None)
    done = run([str(venv), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=where)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert "not natively supported" not in done.stdout + done.stderr


def test_with_the_readme_setting_it_passes_with_warnings_as_errors(
        venv: Path, tmp_path: Path) -> None:
    _, setting = readme_blocks()
    where = project(tmp_path, pyproject=setting)
    done = run([str(venv), "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider"],
               cwd=where)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout and "warning" not in done.stdout.lower()


def test_a_failing_example_still_fails_there(venv: Path, tmp_path: Path) -> None:
    """The mark makes the test run, not pass: a wrong assertion in it is reported."""
    where = project(tmp_path, pyproject=None)
    test = where / "test_planner.py"
    test.write_text(test.read_text().replace('["revenue"]', '["revenue"] == 0'))
    done = run([str(venv), "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=where)
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout + done.stderr
