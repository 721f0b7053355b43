"""README's pytest-plugin section documents ``reach_cluster.reach`` (issue 29 item 5) with an
example: a dead letter, then its replay. The example is run here as README prints it, against
the same ``Cluster`` the ``reach_cluster`` fixture yields, so the README cannot drift."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from reach import Reach
from reach.testing import Cluster

README = Path(__file__).resolve().parents[1] / "README.md"


def example() -> str:
    blocks = re.findall(r"```python\n(# test_billing\.py\n.*?)```", README.read_text(), re.S)
    assert len(blocks) == 1, "README's reach_cluster.reach example is gone"
    return str(blocks[0])


def test_readme_says_what_reach_cluster_reach_is() -> None:
    text = " ".join(README.read_text().split())
    assert "`reach_cluster.reach` is the coordinator itself (a `Reach`)" in text


async def test_the_readme_example_of_reach_cluster_reach_runs_as_printed() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(example(), "README.md", "exec"), namespace)
    cluster = await Cluster.start()
    try:
        assert isinstance(cluster.reach, Reach)
        await namespace["test_a_failed_invoice_waits_as_a_dead_letter"](cluster)
    finally:
        await cluster.close()
    assert namespace["gateway"] == {"up": True}
