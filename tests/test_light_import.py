"""An agent's or a caller's process loads the SDK, not the coordinator: ``from reach import
Agent, Client`` brings no store (SQLAlchemy), no HTTP door (aiohttp), no gateway or server
(issue 26: it took 0.6 s and 764 modules; now about a quarter of that)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("sqlalchemy", "aiohttp", "reach.gateway", "reach.store", "reach.server",
         "reach.reach", "reach.cluster", "reach.adapters", "reach.admin")

PROBE = """
import json, sys
from reach import Agent, Client, Context, TaskError, ReachError, Handle
import reach
after_sdk = sorted(m for m in {heavy!r} if m in sys.modules)
names = sorted(dir(reach))
from reach import Reach  # the coordinator, when asked for
print(json.dumps({{"after_sdk": after_sdk, "dir": names,
                  "reach": reach.Reach is Reach and "reach.reach" in sys.modules}}))
"""


def test_importing_the_sdk_does_not_load_the_coordinator() -> None:
    run = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY)],
                         capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(run.stdout)
    assert seen["after_sdk"] == []
    assert seen["reach"] is True
    # dir() lists the lazy names too, as before they were lazy.
    assert {"Reach", "Agent", "Client", "Admin", "Settings", "Handle"} <= set(seen["dir"])


def test_an_unknown_name_is_an_attribute_error() -> None:
    import reach

    with pytest.raises(AttributeError, match="Nope"):
        reach.Nope  # type: ignore[attr-defined]  # noqa: B018
