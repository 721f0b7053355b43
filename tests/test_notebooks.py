"""Every notebook in notebooks/ runs top to bottom in a fresh kernel of this interpreter."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
KERNEL = "reach-test-python"

# Text each notebook must print: proof that the steps really ran, not just that nothing raised.
EXPECTED: dict[str, list[str]] = {
    "quickstart.ipynb": [
        "call result: {'region': 'east', 'quarter': 'Q3', 'revenue': 1250000}",
        "intent result: {'region': 'east', 'quarter': 'Q4', 'revenue': 1410000}",
        "handle result: {'region': 'west', 'quarter': 'Q4', 'revenue': 1020000}",
        "same task: True | duplicate: True",
        "handler runs so far: 3",
        "order-analysis",
        "succeeded",
        "no_route | did you mean: ['sales.query']",
        "invalid_params |",
        "task_failed | unknown region 'north' | known regions: ['east', 'west']",
        "stopped",
    ],
    "failure-drills.ipynb": [
        "report failed: task_failed | TaskFailed: agent 'fetcher' went away while running",
        "| gets new work: False",  # suspected at once, offline after 3 missed beats
        "trace state: dead | tasks: 2 | failed hop: data.fetch",
        "data.fetch    processing fetcher   <-- failed",
        "dead letters: 6",
        "replayed: 6 of 6 succeeded",
        "dead letters left: 0",
        "report on orders: 42 rows",
        "stopped",
    ],
    "webhooks-and-chains.ipynb": [
        "chain result: {'title': 'Sales in east', 'text': '295 sold, best day 120'}",
        "webhook: succeeded | signature valid: True | step 2 of 2",
        "sales.analyze succeeded\n  report.build succeeded",
        "chain failed: task_failed | step 2 of 2 (report.build)",
        "webhook: dead | signature valid: True",
        "dead letter: report.build | step 2",
        "after the replay: {'title': 'Sales in west', 'text': '130 sold, best day 70'}",
        "webhook again: succeeded | signature valid: True",
        "stopped",
    ],
}


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kernelspec that runs *this* interpreter, so the kernel sees the same installed packages
    (a machine may have no other Jupyter install, or one whose python3 lacks agent-reach)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "agent-reach tests", "language": "python",
    }))
    return root


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, "notebooks/ holds no .ipynb file"
    assert {nb.name for nb in NOTEBOOKS} >= set(EXPECTED)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path, kernel_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_dir))
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        f"{path.name} is stored with outputs; clear them before committing"
    client = NotebookClient(nb, kernel_name=KERNEL, timeout=60,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError, naming the cell, on the first error

    text = _output_text(nb)
    assert "Traceback" not in text
    for expected in EXPECTED.get(path.name, []):
        assert expected in text, f"{path.name}: {expected!r} not in the outputs:\n{text}"


def _output_text(nb: nbformat.NotebookNode) -> str:
    parts: list[str] = []
    for cell in nb.cells:
        for out in cell.get("outputs", ()):
            if out.output_type == "stream":
                parts.append(out.text)
            elif out.output_type in ("execute_result", "display_data"):
                parts.append(out.get("data", {}).get("text/plain", ""))
            elif out.output_type == "error":
                parts.append("\n".join(out.traceback))
    return "\n".join(parts)
