"""The package version, in one place: reach/__init__ re-exports it, the snapshot reports it."""

__version__ = "0.1.0"
