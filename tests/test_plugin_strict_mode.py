"""The plugin's asyncio mark, in-process (the fresh-project test runs it in a new venv): under
pytest-asyncio's strict mode an unmarked ``async def`` test that uses ``reach_cluster`` runs,
and one that does not is left alone (the project's own settings decide)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


def test_strict_mode_runs_reach_cluster_tests_and_leaves_the_rest(
        pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_mode = strict\n"
                     "asyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_it='''
import pytest

async def test_uses_the_cluster(reach_cluster):
    assert reach_cluster.url.startswith("ws://127.0.0.1:")

@pytest.mark.parametrize("n", [1, 2])
async def test_parametrized(reach_cluster, n):
    assert n in (1, 2)

@pytest.mark.asyncio
async def test_already_marked(reach_cluster):
    assert reach_cluster.reach is not None

async def test_not_ours():
    pass
''')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:textual-snapshot",
                                          "-W", "default")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 4, result.stdout.str()
    # strict mode skips or fails the unmarked test that does not use reach's fixture
    assert outcomes.get("skipped", 0) + outcomes.get("failed", 0) == 1, result.stdout.str()
