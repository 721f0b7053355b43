"""The `reach-dash` command line, the package's public names and the README screenshots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import dashboard
from dashboard import ReachDashboard, screenshots
from dashboard.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


def test_exported_names() -> None:
    assert dashboard.__all__ == ["ReachDashboard"]
    assert dashboard.ReachDashboard is ReachDashboard


def test_python_m_dashboard_help_explains_itself() -> None:
    out = subprocess.run([sys.executable, "-m", "dashboard", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    for words in ("reach-dash", "--url", "--token", "admin feed", "reach.admin_token",
                  "Dead letters"):
        assert words in out.stdout


def test_a_token_is_required(monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("REACH_ADMIN_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(["--url", "ws://127.0.0.1:1"])
    assert exit_.value.code == 2
    assert "an admin token is needed" in capsys.readouterr().err


def test_main_runs_the_app_with_the_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[ReachDashboard] = []

    def run(self: ReachDashboard, **kwargs: Any) -> None:
        ran.append(self)

    monkeypatch.setattr(ReachDashboard, "run", run)
    main(["--url", "ws://10.0.0.5:8765", "--token", "s3cret"])
    assert (ran[0].url, ran[0].token) == ("ws://10.0.0.5:8765", "s3cret")
    monkeypatch.setenv("REACH_ADMIN_TOKEN", "from-env")
    monkeypatch.setenv("REACH_URL", "ws://10.0.0.6:8765")
    main([])
    assert (ran[1].url, ran[1].token) == ("ws://10.0.0.6:8765", "from-env")


async def test_readme_screenshots_are_current(tmp_path: Path) -> None:
    """docs/screenshots/*.svg are what `python -m dashboard.screenshots` draws today; after a
    deliberate change of looks, run it and commit the pictures."""
    written = await screenshots.write(tmp_path)
    assert [p.name for p in written] == list(screenshots.SHOTS)
    for path in written:
        committed = ROOT / "docs" / "screenshots" / path.name
        assert committed.read_text() == path.read_text(), (
            f"{committed} is stale: run `python -m dashboard.screenshots`")
