"""The suite speaks the protocol from outside the Python SDKs: no module here imports
``reach.sdk`` or the SDK classes, except §12's test, whose brief is to call the page's
sample agent through a real ``Client``."""

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).parent
SDK_NAMES = {"Agent", "Client", "Context", "TaskError", "Handle"}
MAY_USE_THE_CLIENT = {"test_conf_12_minimal_agent.py"}


def test_no_conformance_module_uses_the_sdk() -> None:
    modules = sorted(HERE.glob("*.py"))
    assert len(modules) >= 14
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("reach.sdk") for a in node.names), path
            elif isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith("reach.sdk"), path
                if node.module == "reach" and path.name not in MAY_USE_THE_CLIENT:
                    used = {a.name for a in node.names} & SDK_NAMES
                    assert not used, f"{path.name} imports {used} from reach"
