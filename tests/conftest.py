"""Shared test settings: the ``reach_cluster`` fixture comes from the reach pytest plugin."""

from __future__ import annotations

import os

# Subprocesses started by tests import the package from this checkout.
os.environ.setdefault("PYTHONUNBUFFERED", "1")
