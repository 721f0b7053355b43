"""The public surface (reach/__init__.py): pinned so changes to it are deliberate."""

from __future__ import annotations

import importlib

import reach

EXPECTED_ALL = [
    "Admin",
    "Agent",
    "Cancelled",
    "Client",
    "Context",
    "Handle",
    "InvalidParams",
    "NoRoute",
    "ProtocolError",
    "Reach",
    "ReachError",
    "ReachTimeout",
    "Rejected",
    "Settings",
    "TaskError",
    "TaskFailed",
    "Unauthorized",
    "Unavailable",
]


def test_all_is_pinned():
    assert reach.__all__ == EXPECTED_ALL


def test_all_is_sorted_and_unique():
    assert reach.__all__ == sorted(set(reach.__all__))


def test_every_exported_name_is_importable():
    module = importlib.import_module("reach")
    for name in reach.__all__:
        assert getattr(module, name) is not None, name
    namespace: dict[str, object] = {}
    exec("from reach import *", namespace)  # noqa: S102 - checks star-import honours __all__
    assert set(EXPECTED_ALL) <= set(namespace)


def test_exported_errors_are_the_errors_module_classes():
    from reach import errors

    for name in ("InvalidParams", "NoRoute", "ProtocolError", "ReachError", "ReachTimeout",
                 "Rejected", "TaskError", "TaskFailed", "Unauthorized", "Unavailable"):
        assert getattr(reach, name) is getattr(errors, name)
        assert issubclass(getattr(reach, name), errors.ReachError)


def test_exported_classes_are_classes_from_their_modules():
    # Where each lives since the house issue (the layer packages); `from reach import X`,
    # which is what README shows, is unchanged.
    expected_modules = {"Admin": "reach.admin", "Agent": "reach.sdk.agent", "Client": "reach.sdk.client",
                        "Handle": "reach.sdk.handle", "Context": "reach.sdk.context",
                        "Reach": "reach.reach", "Settings": "reach.config"}
    for name, module in expected_modules.items():
        obj = getattr(reach, name)
        assert isinstance(obj, type), name
        assert obj.__module__ == module, name


def test_version():
    assert reach.__version__ == "0.1.0"
